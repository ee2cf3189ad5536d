#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The six paper scenarios on multinode-ib:N as the number of nodes grows: decision and
predicted speedup (baseline / fused) of chimera-plan's topology model, and how long each
planning took. Each scenario is placed as a job would place it across nodes of 8 GPUs:
TP, SP and EP groups of 4-8 ranks inside a node, PP stages on different nodes (pp is the
outermost axis), data-parallel replicas (dp) filling the rest; in tp_ep and sp_ep the
AllToAll spans the whole job (ep or dp grows with N). f32, 16 MiB per rank at the chain's
start.

usage: scale_sweep.py --plan build/bin/chimera-plan [--nodes 2,4,...,128]
                      [--json scale.json] [--plot docs/scale_speedup.png]
(the plot uses Debian's python3-matplotlib: run it as /usr/bin/python3, not from a venv)
"""
import argparse
import json
import subprocess
import sys
import time


def scenarios(nodes):
    """(name, mesh, from, chain, consume, shape) with 16 MiB per rank at the start."""
    b = 2**17 // nodes  # sp_ep: keeps 16 MiB per rank while dp+sp spans 8N ranks
    return [
        ("tp_sp", f"dp={nodes},tp=8", "tp=P", "allreduce:tp", "tp=S0", "4096,1024"),
        ("tp_pp", f"pp=2,dp={max(1, nodes // 2)},tp=8", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R",
         "4096,1024"),
        ("tp_ep", f"ep={2 * nodes},tp=4", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1",
         f"{8192 * nodes},1024"),
        ("sp_ep", f"dp={2 * nodes},sp=4", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2",
         f"{8 * nodes},{4 * b},{8 * nodes}"),
        ("pp_sp", f"pp=2,dp={nodes},sp=4", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R", "4096,4096"),
        ("pp_ep", f"pp=2,dp={nodes},ep=4", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", "4096,4096"),
    ]


def sweep(plan, node_counts):
    rows = []
    for nodes in node_counts:
        for name, mesh, start, chain, consume, shape in scenarios(nodes):
            began = time.time()
            result = subprocess.run([plan, "--mesh", mesh, "--shape", shape, "--dtype", "f32", "--from", start,
                                     "--chain", chain, "--consume", consume, "--topology", f"multinode-ib:{nodes}",
                                     "--json"], capture_output=True, text=True, check=False)
            seconds = time.time() - began
            if result.returncode != 0:
                sys.exit(f"{name} on {nodes} nodes: {result.stderr.strip()}")
            doc = json.loads(result.stdout)
            rows.append({"nodes": nodes, "ranks": 8 * nodes, "scenario": name, "mesh": mesh,
                         "baseline_s": doc["baseline_cost"], "fused_s": doc["fused_cost"],
                         "speedup": doc["baseline_cost"] / doc["fused_cost"], "decision": doc["decision"],
                         "tool_seconds": seconds})
    return rows


def table(rows):
    names = list(dict.fromkeys(r["scenario"] for r in rows))
    lines = ["| nodes (GPUs) | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for nodes in dict.fromkeys(r["nodes"] for r in rows):
        cells = []
        for name in names:
            row = next(r for r in rows if r["nodes"] == nodes and r["scenario"] == name)
            cells.append(f"{row['speedup']:.2f} {'F' if row['decision'] == 'fused' else 'B'}")
        lines.append(f"| {nodes} ({8 * nodes}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for name in dict.fromkeys(r["scenario"] for r in rows):
        series = [(r["nodes"], r["speedup"]) for r in rows if r["scenario"] == name]
        axes.plot([n for n, _ in series], [s for _, s in series], marker="o", label=name)
    axes.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("nodes of 8 GPUs (multinode-ib:N)")
    axes.set_ylabel("predicted speedup (baseline / fused)")
    axes.set_title("Paper scenarios across nodes, 16 MiB per rank, f32")
    axes.legend(ncol=3, fontsize="small")
    figure.tight_layout()
    figure.savefig(out, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", required=True, help="path of the chimera-plan binary")
    parser.add_argument("--nodes", default="2,4,8,16,32,64,128")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--plot", help="write a PNG here")
    args = parser.parse_args()
    rows = sweep(args.plan, [int(n) for n in args.nodes.split(",")])
    print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
