# SPDX-License-Identifier: Apache-2.0
"""Cost of the argument agreement (CHIMERA_CHECK_ARGS) on the chimera torch process group:
AllReduce (sum, float32) of each size over every rank, on two chimera groups of the same ranks,
one made with CHIMERA_CHECK_ARGS=0 and one with =1 (the backend reads it at creation), and on a
plain gloo group for reference, called in turn in every iteration of one run (the order rotated
every iteration), so all see the same load. Prints per size the median over iterations of the
slowest rank's time for each, and the ratio on / off. Size 0 times the agreement alone (with
checks off a call of 0 elements sends nothing).

Hand-run, on either transport: `torchrun --standalone --nproc-per-node 4 check_cost.py` (gloo),
`mpirun -np 4 python check_cost.py` (MPI)."""

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

import chimera.torch as ct


def group_with_checks(on: bool):
    """A chimera group over every rank whose backend was created with CHIMERA_CHECK_ARGS=on."""
    saved = os.environ.get("CHIMERA_CHECK_ARGS")
    os.environ["CHIMERA_CHECK_ARGS"] = "1" if on else "0"
    try:
        group = dist.new_group(backend="chimera")
        dist.all_reduce(torch.zeros(1), group=group)  # created on every rank before the next one
    finally:
        if saved is None:
            del os.environ["CHIMERA_CHECK_ARGS"]
        else:
            os.environ["CHIMERA_CHECK_ARGS"] = saved
    return group


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["0", "4K", "16M"], help="bytes per rank (0, 4K, 16M, ...)")
    parser.add_argument("-n", "--iters", type=int, default=200,
                        help="timed iterations per size (each: one call per group); a tenth above 1 MiB")
    parser.add_argument("-w", "--warmup", type=int, default=10)
    args = parser.parse_args()
    ct.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    groups = {"off": group_with_checks(False), "on": group_with_checks(True), "gloo": dist.new_group(backend="gloo")}
    transport = ct.backend.transport(size)
    if rank == 0:
        print(f"# AllReduce sum float32 over {size} ranks, transport {transport}; medians over iterations of the "
              "slowest rank")
        print("| size per rank | iterations | gloo (us) | checks off (us) | checks on (us) | on / off |")
        print("|---|---|---|---|---|---|")
    for text in args.sizes:
        count = parse_size(text) // 4
        tensor = torch.ones(count)
        iters = args.iters if count * 4 <= (1 << 20) else max(10, args.iters // 10)
        times = {name: [] for name in groups}
        names = list(groups)
        for i in range(args.warmup + iters):
            for name in names[i % 3:] + names[:i % 3]:
                start = time.perf_counter()
                dist.all_reduce(tensor, group=groups[name])
                elapsed = time.perf_counter() - start
                if i >= args.warmup:
                    times[name].append(elapsed)
        # The slowest rank's time of each call.
        slowest = {}
        for name, values in times.items():
            t = torch.tensor(values, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups["off"])
            slowest[name] = statistics.median(t.tolist()) * 1e6
        if rank == 0:
            ratio = f"{slowest['on'] / slowest['off']:.2f}" if count > 0 else "-"
            times_us = " | ".join(f"{slowest[name]:.0f}" for name in ("gloo", "off", "on"))
            print(f"| {text} | {iters} | {times_us} | {ratio} |", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
