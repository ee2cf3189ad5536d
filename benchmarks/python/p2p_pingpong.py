#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Ping-pong of CPU tensors over the "chimera" process group's send/recv, on 2 ranks::

    mpirun -np 2 python benchmarks/python/p2p_pingpong.py --sizes 8 4194304 --iters 2000 200
    torchrun --standalone --nproc-per-node 2 benchmarks/python/p2p_pingpong.py --against-gloo

Rank 0 sends a tensor of each size to rank 1, which sends it back; per size one line: the size
in bytes, the iterations, and the median and minimum round trip in microseconds over --repeats
timed blocks (each block --iters round trips after --warmup untimed ones). Rank 1 checks every
payload it gets (its first and last bytes), so a transfer that moves wrong data fails the run.
With --against-gloo the same round trips also run on a plain gloo group over the same ranks,
its blocks alternated with chimera's (so both see the same load), and each line adds gloo's
median and the median over the blocks of the ratio chimera / gloo (chimera's block and the gloo
block after it). Under torchrun chimera's group runs on its gloo transport, so this is the cost
of its header messages and continuations; under mpirun, of the MPI transport against gloo.
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
    parser.add_argument("--against-gloo", action="store_true",
                        help="alternate each timed block with one on a plain gloo group")
    args = parser.parse_args()
    ct.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    if size != 2:
        raise SystemExit("p2p_pingpong: run on 2 ranks")
    groups = {"chimera": None}
    if args.against_gloo:
        groups["gloo"] = dist.new_group(backend="gloo")
    for i, nbytes in enumerate(args.sizes):
        iters = args.iters[min(i, len(args.iters) - 1)]
        out = torch.full((nbytes,), 7, dtype=torch.uint8)
        back = torch.empty(nbytes, dtype=torch.uint8)

        def round_trip(group) -> None:
            if rank == 0:
                dist.send(out, 1, group=group)
                dist.recv(back, 1, group=group)
            else:
                dist.recv(back, 0, group=group)
                if back[0].item() != 7 or back[-1].item() != 7:
                    raise RuntimeError("p2p_pingpong: wrong payload")
                dist.send(back, 0, group=group)

        blocks = {name: [] for name in groups}
        for group in groups.values():
            for _ in range(args.warmup):
                round_trip(group)
        for _ in range(args.repeats):
            for name, group in groups.items():
                dist.barrier()
                start = time.perf_counter()
                for _ in range(iters):
                    round_trip(group)
                blocks[name].append((time.perf_counter() - start) / iters * 1e6)
        if rank == 0:
            line = (f"{nbytes:>10} B  {iters:>6} iters  median {statistics.median(blocks['chimera']):10.1f} us  "
                    f"min {min(blocks['chimera']):10.1f} us")
            if args.against_gloo:
                ratios = [c / g for c, g in zip(blocks["chimera"], blocks["gloo"], strict=True)]
                line += (f"  gloo median {statistics.median(blocks['gloo']):10.1f} us  "
                         f"chimera/gloo {statistics.median(ratios):5.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
            print(line, flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
