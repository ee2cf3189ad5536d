# SPDX-License-Identifier: Apache-2.0
"""chimera for PyTorch.

``import chimera.torch`` registers the torch.distributed backend ``"chimera"`` (CPU tensors on
chimera's MPI backend under an MPI launch, on gloo bootstrapped from the c10d Store otherwise);
see docs/torch.md.
"""

from .backend import BACKEND_NAME, init_process_group, mpi_environment, register

register()

from .redistribute import fused_redistribute, redistribute  # noqa: E402  (after registration)

__all__ = ["BACKEND_NAME", "fused_redistribute", "init_process_group", "mpi_environment", "redistribute",
           "register"]
