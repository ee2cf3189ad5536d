# SPDX-License-Identifier: Apache-2.0
# Run by torchrun with 2 processes: the chimera backend cannot join ranks that MPI did not start,
# and must say so (naming mpirun) on every rank instead of hanging. Exits 0 when it does.
import sys

import torch
import torch.distributed as dist

import chimera.torch  # noqa: F401  (registers the backend)

try:
    dist.init_process_group("chimera")
    dist.all_reduce(torch.ones(1))
except RuntimeError as error:
    ok = "MPI world has 1" in str(error) and "mpirun" in str(error)
    print(f"rank {dist.get_rank() if dist.is_initialized() else '?'}: {'expected' if ok else 'WRONG'} error: {error}")
    sys.exit(0 if ok else 1)
print("the chimera backend initialised under torchrun without an MPI launch")
sys.exit(1)
