#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Ping-pong of CPU tensors over the "chimera" process group's send/recv, on 2 ranks::

    mpirun -np 2 python benchmarks/python/p2p_pingpong.py --sizes 8 4194304 --iters 2000 200

Rank 0 sends a tensor of each size to rank 1, which sends it back; per size one line: the size
in bytes, the iterations, and the median and minimum round trip in microseconds over --repeats
timed blocks (each block --iters round trips after --warmup untimed ones). Rank 1 checks every
payload it gets (its first and last bytes), so a transfer that moves wrong data fails the run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import chimera.torch as ct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 4 << 20], help="message sizes in bytes")
    parser.add_argument("--iters", type=int, nargs="+", default=[2000, 200],
                        help="round trips per timed block, per size (the last one repeats)")
    parser.add_argument("--repeats", type=int, default=5, help="timed blocks per size")
    parser.add_argument("--warmup", type=int, default=20, help="untimed round trips before each size")
    args = parser.parse_args()
    ct.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    if size != 2:
        raise SystemExit("p2p_pingpong: run on 2 ranks")
    for i, nbytes in enumerate(args.sizes):
        iters = args.iters[min(i, len(args.iters) - 1)]
        out = torch.full((nbytes,), 7, dtype=torch.uint8)
        back = torch.empty(nbytes, dtype=torch.uint8)

        def round_trip() -> None:
            if rank == 0:
                dist.send(out, 1)
                dist.recv(back, 1)
            else:
                dist.recv(back, 0)
                if back[0].item() != 7 or back[-1].item() != 7:
                    raise RuntimeError("p2p_pingpong: wrong payload")
                dist.send(back, 0)

        for _ in range(args.warmup):
            round_trip()
        blocks = []
        for _ in range(args.repeats):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                round_trip()
            blocks.append((time.perf_counter() - start) / iters * 1e6)
        if rank == 0:
            print(f"{nbytes:>10} B  {iters:>6} iters  median {statistics.median(blocks):10.1f} us  "
                  f"min {min(blocks):10.1f} us", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
