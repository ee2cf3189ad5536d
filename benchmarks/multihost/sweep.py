#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The six scenarios across two simulated hosts (scripts/multihost.sh), in both placements.

For each placement (blocks: --host h0:4,h1:4; node: round-robin, --map-by node) it runs
`chimera-bench --scenario all` --repeats times (baseline and fused interleaved, every element
checked) and takes medians; then, per scenario and side, it counts the bytes that really crossed
the link: the rig's veth counters (tx_bytes of every host's eth0, TCP/IP headers and ACKs
included) around a run of only that side (`--only baseline|fused`, no warm-up), once with 1 and
once with 1 + --byte-iters iterations, the difference divided by --byte-iters, so start-up and
connection set-up cancel out. Rows: {scenario, placement, link_bytes_chain, link_bytes_fused,
baseline_us, fused_us, speedup, predicted, plan}: `fused` is the best fused plan, run whatever the
planner decides (ChainMode::Fused); `plan` is the planner's decision ("fused", or "chain" where
it keeps the chain as written, which is then what a Session or Executor runs); `predicted` is
chimera-bench's own (the cost model of the run's default topology), `speedup` the median of the
runs' baseline/fused.

    python3 benchmarks/multihost/sweep.py --bench build/bin/chimera-bench --json rows.json

Python's standard library only; needs what the rig needs (root, ip, tc, unshare, mpirun).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RIG = os.path.join(ROOT, "scripts", "multihost.sh")
RIG_UNAVAILABLE = 77
PLACEMENTS = {"blocks": [], "node": ["--map", "node"]}


def add_rig_arguments(p, iters):
    """The options of a measurement on the rig (this sweep's and moe_hosts.py's); `iters`: the
    default of --iters."""
    p.add_argument("--ranks", default="4,4", help="ranks per host (4,4)")
    p.add_argument("--rate", default="2gbit", help="link rate, tc syntax (2gbit)")
    p.add_argument("--placements", default="blocks,node", help="blocks, node or both (blocks,node)")
    p.add_argument("--iters", type=int, default=iters, help=f"timed iterations per run ({iters})")
    p.add_argument("--repeats", type=int, default=3, help="runs per placement; medians (3)")
    p.add_argument("--byte-iters", type=int, default=2, help="extra iterations of the byte-counting runs (2)")
    p.add_argument("--timeout", type=int, default=590, help="seconds per run (590)")
    p.add_argument("--json", help="write the rows here")


def parse_rig_arguments(p, argv):
    """`p`'s arguments, the rig's checked."""
    args = p.parse_args(argv)
    for name in args.placements.split(","):
        if name not in PLACEMENTS:
            p.error(f"--placements: unknown placement '{name}' (blocks, node)")
    if args.repeats < 1 or args.iters < 1 or args.byte_iters < 1:
        p.error("--repeats, --iters and --byte-iters must be at least 1")
    return args


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "chimera-bench"), help="chimera-bench binary")
    p.add_argument("--size", default="16M", help="bytes per rank, chimera-bench -b/-e syntax (16M)")
    p.add_argument("--scenarios", default="tp_sp,tp_pp,tp_ep,sp_ep,pp_sp,pp_ep", help="scenarios, comma separated")
    add_rig_arguments(p, iters=5)
    args = parse_rig_arguments(p, argv)
    if not os.access(args.bench, os.X_OK):
        p.error(f"--bench: {args.bench} is not an executable (build chimera-bench first)")
    return args


class Rig:
    """A rig of its own (a free id), removed on exit."""

    def __init__(self, hosts, rate):
        result = subprocess.run([RIG, "--id", "auto", "up", "--hosts", str(hosts), "--rate", rate],
                                stdout=subprocess.PIPE, text=True)
        if result.returncode != 0:
            sys.exit(result.returncode)
        self.id = result.stdout.strip()
        self.hosts = hosts

    def down(self):
        subprocess.run([RIG, "--id", self.id, "down"], stdout=subprocess.DEVNULL, check=False)

    def link_bytes(self):
        """Bytes every host has sent on its link so far (each crossing byte counted once)."""
        total = 0
        for host in range(self.hosts):
            out = subprocess.run([RIG, "--id", self.id, "exec", f"h{host}", "--", "cat",
                                  "/sys/class/net/eth0/statistics/tx_bytes"],
                                 stdout=subprocess.PIPE, text=True, check=True).stdout
            total += int(out)
        return total

    def bytes_per_iteration(self, launch, command, extra, timeout):
        """Link bytes of one iteration of `command(iters)` run on `launch`: (bytes at 1 + `extra`
        iterations - bytes at 1) / `extra`, so that start-up and connection set-up cancel out."""
        counted = []
        for iters in (1, 1 + extra):
            before = self.link_bytes()
            self.run(launch, command(iters), timeout)
            counted.append(self.link_bytes() - before)
        return max(0, round((counted[1] - counted[0]) / extra))

    def run(self, launch, command, timeout):
        cmd = [RIG, "--id", self.id, "run", "--timeout", str(timeout)] + launch + ["--"] + command
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {result.returncode}:\n{result.stdout[-4000:]}")
        return result.stdout


def scenario_rows(rig, args, launch, scenarios):
    """{scenario: [row of chimera-bench --json]} over --repeats runs."""
    runs = {name: [] for name in scenarios}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "rows.json")
        for _ in range(args.repeats):
            rig.run(launch, [args.bench, "--scenario", "all", "--backend", "mpi", "-b", args.size, "-e", args.size,
                             "-n", str(args.iters), "-w", "2", "-c", "1", "--json", path], args.timeout)
            with open(path) as f:
                for row in json.load(f)["rows"]:
                    if row["scenario"] in runs:
                        runs[row["scenario"]].append(row)
    return runs


def bytes_per_iteration(rig, args, launch, scenario, side):
    """Link bytes of one iteration of `side` of `scenario`."""
    def command(iters):
        return [args.bench, "--scenario", scenario, "--backend", "mpi", "--only", side, "-b", args.size, "-e",
                args.size, "-n", str(iters), "-w", "0", "-c", "0"]
    return rig.bytes_per_iteration(launch, command, args.byte_iters, args.timeout)


def measure(rig, args):
    scenarios = args.scenarios.split(",")
    rows = []
    for placement in args.placements.split(","):
        launch = ["--ranks", args.ranks] + PLACEMENTS[placement]
        runs = scenario_rows(rig, args, launch, scenarios)
        for scenario in scenarios:
            measured = runs[scenario]
            if not measured:
                raise RuntimeError(f"chimera-bench gave no row for {scenario} (size {args.size})")
            wrong = sum(r["wrong"] or 0 for r in measured)
            row = {
                "scenario": scenario,
                "placement": placement,
                "link_bytes_chain": bytes_per_iteration(rig, args, launch, scenario, "baseline"),
                "link_bytes_fused": bytes_per_iteration(rig, args, launch, scenario, "fused"),
                "baseline_us": statistics.median(r["baseline_time_us"] for r in measured),
                "fused_us": statistics.median(r["time_us"] for r in measured),
                "speedup": statistics.median(r["baseline_time_us"] / r["time_us"] for r in measured),
                "predicted": measured[0]["predicted_speedup"],
                "plan": "fused" if measured[0]["planner_fuses"] else "chain",
                "wrong": wrong,
            }
            rows.append(row)
            print(table_row(row), flush=True)
    return rows


def table_row(row):
    predicted = "n/a" if row["predicted"] is None else f"{row['predicted']:.2f}"
    return (f"| {row['scenario']} | {row['placement']} | {row['link_bytes_chain'] / 2**20:.1f} | "
            f"{row['link_bytes_fused'] / 2**20:.1f} | {row['baseline_us'] / 1e3:.1f} | {row['fused_us'] / 1e3:.1f} | "
            f"{row['speedup']:.2f} | {predicted} | {row['plan']} | {row['wrong']} |")


def main(argv):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the rig comes down on SIGTERM too
    hosts = len(args.ranks.split(","))
    rig = Rig(hosts, args.rate)
    try:
        print(f"# rig {rig.id}: {hosts} hosts, ranks {args.ranks}, links {args.rate}; {args.size} per rank, "
              f"median of {args.repeats} runs of {args.iters} iterations", flush=True)
        print("| scenario | placement | link MiB chain | link MiB fused | baseline ms | fused ms | speedup | "
              "predicted | plan | #wrong |\n|---|---|---|---|---|---|---|---|---|---|", flush=True)
        rows = measure(rig, args)
    finally:
        rig.down()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rate": args.rate, "ranks": args.ranks, "size": args.size, "iters": args.iters,
                       "repeats": args.repeats, "rows": rows}, f, indent=1)
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
