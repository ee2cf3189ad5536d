#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The routed MoE exchange once per destination host against once per rank, across two
simulated hosts (scripts/multihost.sh), in both placements.

Per placement it runs `routed_hosts_timing --only both` --repeats times (the two exchanges
alternating per iteration on the same routings, y and recv_x compared bit for bit, --iters timed
iterations after --warmup untimed ones) and takes medians of the forward's time (dispatch +
receive + combine; with --step train, a training step's: the forward, then combine backward and
dispatch backward); then, per side, the bytes that really crossed the link: the rig's veth
counters (tx_bytes of every host's eth0, TCP/IP headers and ACKs included) around a run of that
side alone, once with 1 and once with 1 + --byte-iters iterations, the difference divided by
--byte-iters. Rows: {placement, link_bytes_rank, link_bytes_host, byte_ratio, rank_us, host_us,
speedup, exact, stats_cross_rank, stats_cross_host} (stats_*: RoutedStats::crossHostBytes of all
ranks, per iteration; stats_cross_rank is null without --stages, since that side runs on a
backend that takes every rank for one host).

With --stages, a pipeline stage's tokens (pp=2, pp=@0): the `host` side is the Planned program
(the hand-off, then stage 1's dispatch once per destination host where the planner takes it:
`once_per_host` in the row) and the `rank` side the straight dispatch from stage 0.

    python3 benchmarks/multihost/moe_hosts.py --timing build/benchmarks/timing/routed_hosts_timing --json rows.json

Python's standard library only; needs what the rig needs (root, ip, tc, unshare, mpirun).
"""
import argparse
import json
import os
import signal
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep import PLACEMENTS, ROOT, Rig, add_rig_arguments, parse_rig_arguments  # noqa: E402  (the sweep's rig)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--timing", default=os.path.join(ROOT, "build", "benchmarks", "timing", "routed_hosts_timing"),
                   help="routed_hosts_timing binary")
    p.add_argument("--tokens", type=int, default=2048, help="tokens per rank (2048)")
    p.add_argument("--hidden", type=int, default=1024, help="elements per row, f32 (1024)")
    p.add_argument("--experts", type=int, default=64, help="experts (64)")
    p.add_argument("--top-k", type=int, default=8, help="experts per token (8)")
    p.add_argument("--step", choices=("forward", "train"), default="forward",
                   help="what an iteration runs: the forward, or the forward and both backwards (forward)")
    p.add_argument("--stages", action="store_true",
                   help="a stage's tokens (pp=2, pp=@0): planned against straight from the stage")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed iterations before the timed ones of each run (5): the exchanges' buffers grow to "
                        "the routing's sizes over the first 3-4 iterations, page faults that are not the steady state")
    add_rig_arguments(p, iters=3)
    args = parse_rig_arguments(p, argv)
    if args.warmup < 0:
        p.error("--warmup must be at least 0")
    if not os.access(args.timing, os.X_OK):
        p.error(f"--timing: {args.timing} is not an executable (build routed_hosts_timing first)")
    return args


def timing_command(args, only, iters, warmup):
    return [args.timing, "-t", str(args.tokens), "-H", str(args.hidden), "-E", str(args.experts), "-K",
            str(args.top_k), "-n", str(iters), "-w", str(warmup), "--only", only, "--step", args.step] + (
                ["--stages"] if args.stages else [])


def last_json(output):
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"routed_hosts_timing printed no result:\n{output[-2000:]}")


def link_bytes(rig, args, launch, only):
    return rig.bytes_per_iteration(launch, lambda iters: timing_command(args, only, iters, 0), args.byte_iters,
                                   args.timeout)


def measure(rig, args):
    rows = []
    for placement in args.placements.split(","):
        launch = ["--ranks", args.ranks] + PLACEMENTS[placement]
        runs = [last_json(rig.run(launch, timing_command(args, "both", args.iters, args.warmup), args.timeout))
                for _ in range(args.repeats)]
        if not args.stages and not all(r["once_per_host"] for r in runs):
            raise RuntimeError(f"{placement}: the exchange did not run once per host")
        rank_bytes = link_bytes(rig, args, launch, "rank")
        host_bytes = link_bytes(rig, args, launch, "host")
        row = {
            "placement": placement,
            "link_bytes_rank": rank_bytes,
            "link_bytes_host": host_bytes,
            "byte_ratio": rank_bytes / host_bytes if host_bytes else None,
            "rank_us": statistics.median(r["rank_us"] for r in runs),
            "host_us": statistics.median(r["host_us"] for r in runs),
            "speedup": statistics.median(r["rank_us"] / r["host_us"] for r in runs),
            "speedups": [round(r["rank_us"] / r["host_us"], 3) for r in runs],
            "exact": all(r["exact"] for r in runs),
            "stats_cross_rank": runs[0]["cross_host_bytes_rank"],
            "stats_cross_host": runs[0]["cross_host_bytes_host"],
            "once_per_host": runs[0]["once_per_host"],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the rig comes down on SIGTERM too
    hosts = len(args.ranks.split(","))
    rig = Rig(hosts, args.rate)
    try:
        rows = measure(rig, args)
    finally:
        rig.down()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tokens": args.tokens, "hidden": args.hidden, "experts": args.experts, "top_k": args.top_k,
                       "step": args.step, "layout": "pp=@0" if args.stages else "owned", "ranks": args.ranks,
                       "rate": args.rate, "rows": rows}, f, indent=2)
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
