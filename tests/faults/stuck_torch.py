# SPDX-License-Identifier: Apache-2.0
# Run by stuck_job.py under mpirun: a training-like loop of 16 MiB all-reduces on the chimera
# process group, which a rank stopped with SIGSTOP leaves stuck; the job must end itself (the
# process group ends the job after a Timeout by default, as TORCH_NCCL_ASYNC_ERROR_HANDLING).
import torch
import torch.distributed as dist

import chimera.torch as ct

ct.init_process_group()
tensor = torch.zeros(4 << 20)
for step in range(1_000_000):
    dist.all_reduce(tensor)
    if step == 0:
        print(f"rank {dist.get_rank()}: all-reduce loop under way", flush=True)
