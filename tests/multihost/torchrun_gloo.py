# SPDX-License-Identifier: Apache-2.0
"""torchrun across the rig's hosts: gloo's all-reduce over every rank and each rank's host name.

Started by `scripts/multihost.sh run --torchrun --ranks A,B,...`; exits non-zero when the sum is
wrong or the ranks did not span as many hosts as torchrun was given nodes.
"""
import os
import socket
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.full((1024,), float(rank + 1))
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    dist.destroy_process_group()
    nodes = int(os.environ["GROUP_WORLD_SIZE"])
    if not torch.all(value == expected):
        print(f"rank {rank}: all_reduce gave {value[0].item()}, expected {expected}", file=sys.stderr)
        return 1
    if len(set(hosts)) != nodes:
        print(f"rank {rank}: ranks on hosts {hosts}, expected {nodes} distinct", file=sys.stderr)
        return 1
    if rank == 0:
        print(f"{world} ranks on hosts {hosts}: all_reduce = {expected}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
