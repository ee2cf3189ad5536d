#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""First-time planning time and memory of chimera-plan as the world grows, planned for the
whole world and as one rank (--rank, what an executor does at run time). Two chains: an
AllReduce over one axis of N ranks consumed as shards (4N x N f32, the shape of a
data-parallel gradient ReduceScatter) and the TP+PP hand-off on dp=N/16,pp=2,tp=8
(8192x1024 f32). Each point is the best of --repeat runs: CPU seconds (user + system, what
the process itself needs, unaffected by other processes waiting for the same cores), wall
seconds, and peak resident memory. The tool's time includes its report (the unconsumed-
bytes analysis), not only planChain.

usage: plan_scale.py --plan build/bin/chimera-plan [--ranks 1024,4096,...] [--repeat 3]
"""
import argparse
import os
import sys
import time


def chains(n):
    """(name, chimera-plan arguments) for a world of n ranks."""
    return [
        ("allreduce:w, consumed w=S0", ["--mesh", f"w={n}", "--shape", f"{4 * n},{n}", "--from", "w=P",
                                        "--chain", "allreduce:w", "--consume", "w=S0"]),
        ("TP+PP on dp=N/16,pp=2,tp=8", ["--mesh", f"dp={n // 16},pp=2,tp=8", "--shape", "8192,1024",
                                        "--from", "pp=@0,tp=P", "--chain", "allreduce:tp,send:pp",
                                        "--consume", "pp=@1,tp=R"]),
    ]


def measure(command):
    """(cpu seconds, wall seconds, peak resident MB) of one run; exits on failure."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        os.execv(command[0], command)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"plan_scale.py: {' '.join(command)} failed")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="the chimera-plan binary")
    parser.add_argument("--ranks", default="1024,4096,16384,65536,131072")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| ranks N | chain | topology | world: CPU / wall / memory | rank N-1: CPU / wall / memory |")
    print("|---|---|---|---|---|")
    for n in (int(x) for x in args.ranks.split(",")):
        for name, chain in chains(n):
            for topology in ("bytes", f"multinode-ib:{n // 8}"):
                cells = []
                for scope in ([], ["--rank", str(n - 1)]):
                    command = [args.plan, *chain, "--dtype", "f32", "--topology", topology, "--json", *scope]
                    runs = [measure(command) for _ in range(args.repeat)]
                    cells.append("{:.3f} s / {:.3f} s / {:.0f} MB".format(min(r[0] for r in runs),
                                                                         min(r[1] for r in runs),
                                                                         max(r[2] for r in runs)))
                print(f"| {n:,} | {name} | {topology} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
