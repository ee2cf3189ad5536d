#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Plots chimera-model reports: for each --json report, the predicted iteration time of the
chains as written (baseline) and as planned (fused), split into compute and communication
on the 1F1B critical path, with the end-to-end speedup on top.

usage: plot_model.py REPORT.json [REPORT.json ...] [--out docs/model_iteration.png]
(uses Debian's python3-matplotlib: run it as /usr/bin/python3 or directly, not through a venv)
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    if report.get("format") != "chimera-model-report-1":
        sys.exit(f"{path}: not a chimera-model --json report")
    return report


def label(report):
    p = report["parallel"]
    split = ",".join(f"{k}{v}" for k, v in p.items() if k != "microbatches" and v > 1) or "1 GPU"
    return f"{report['model']}\n{split}\n{report['topology']}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("reports", nargs="+")
    parser.add_argument("--out", default="model_iteration.png")
    args = parser.parse_args()
    reports = [load(path) for path in args.reports]
    figure, axes = plt.subplots(figsize=(max(6, 1.9 * len(reports)), 4.5))
    width = 0.38
    for i, report in enumerate(reports):
        compute = report["compute_s"] * 1e3
        for offset, key, colour in ((-width / 2, "baseline", "tab:red"), (width / 2, "fused", "tab:green")):
            comm = report[f"{key}_comm_s"] * 1e3
            axes.bar(i + offset, compute, width, color="tab:grey",
                     label="compute" if i == 0 and key == "baseline" else None)
            axes.bar(i + offset, comm, width, bottom=compute, color=colour,
                     label=f"communication, {key}" if i == 0 else None)
        top = report["baseline_iteration_s"] * 1e3
        axes.text(i, top * 1.02, f"{report['end_to_end_speedup']:.2f}x", ha="center", fontsize="small")
    axes.set_xticks(range(len(reports)), [label(r) for r in reports], fontsize="x-small")
    axes.set_ylabel("predicted iteration time (ms)")
    axes.set_title("One training iteration: chains as written vs planned")
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
