# SPDX-License-Identifier: Apache-2.0
"""chimera for PyTorch.

``import chimera.torch`` registers the torch.distributed backend ``"chimera"`` (CPU tensors on
chimera's MPI backend under an MPI launch, on gloo bootstrapped from the c10d Store otherwise)
and, with CHIMERA_TORCH_REDISTRIBUTE=1, routes every DTensor redistribution through chimera;
``Options`` are the backend's ``pg_options``. See docs/torch.md.
"""

from .backend import BACKEND_NAME, init_process_group, register
from .options import Options
from .rendezvous import RendezvousError, mpi_environment

register()

from .redistribute import (  # noqa: E402  (after registration)
    fused_redistribute,
    redistribute,
    reset_stats,
    route_from_environment,
    stats,
)

route_from_environment()

__all__ = ["BACKEND_NAME", "Options", "RendezvousError", "fused_redistribute", "init_process_group", "mpi_environment",
           "redistribute", "register", "reset_stats", "stats"]
