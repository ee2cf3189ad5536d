#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Plots measured (and predicted) speedup of the fused plan over the chain as written, per
scenario, against the bytes each rank holds at the chain's start, from the --json file of a
chimera-bench --scenario sweep (e.g. -b 1M -e 16M -f 2).

usage: plot_scenarios.py SWEEP.json [--out docs/scenario_speedup.png]
(uses Debian's python3-matplotlib: run it as /usr/bin/python3 or directly, not through a venv)
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load_series(path):
    """{scenario: [(bytes, measured, predicted), ...]} sorted by bytes, plus the run header."""
    with open(path, encoding="utf-8") as handle:
        document = json.load(handle)
    if document.get("mode") != "scenario":
        sys.exit(f"{path}: not a chimera-bench --scenario JSON file (mode is {document.get('mode')!r})")
    series = {}
    for row in document["rows"]:
        if row["speedup"] is None:
            continue
        series.setdefault(row["scenario"], []).append((row["bytes"], row["speedup"], row["predicted_speedup"]))
    for points in series.values():
        points.sort()
    return series, document


def size_label(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def plot(series, document, out):
    figure, axes = plt.subplots(figsize=(8, 5))
    sizes = sorted({size for points in series.values() for size, _, _ in points})
    for index, (name, points) in enumerate(series.items()):
        color = f"C{index}"
        xs = [size for size, _, _ in points]
        axes.plot(xs, [measured for _, measured, _ in points], "o-", color=color, label=f"{name} measured")
        predicted = [(size, value) for size, _, value in points if value is not None]
        if predicted:
            axes.plot([s for s, _ in predicted], [v for _, v in predicted], "--", color=color, alpha=0.6,
                      label=f"{name} predicted")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes)
    axes.set_xticklabels([size_label(size) for size in sizes])
    axes.set_xlabel("bytes per rank at the chain's start")
    axes.set_ylabel("speedup (baseline time / fused time)")
    axes.set_title(f"chimera fused vs as-written chains, {document['nranks']} ranks, backend {document['backend']}, "
                   f"{document['stat']} of {document['iters']}", fontsize=10)
    axes.legend(fontsize=7, ncol=2)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(out, dpi=120)


def print_errors(series):
    """Prints measured vs predicted speedup per row and the prediction error (predicted / measured - 1)."""
    print(f"{'scenario':>8} {'bytes':>10} {'measured':>9} {'predicted':>9} {'error':>7}")
    errors = []
    for name, points in series.items():
        for size, measured, predicted in points:
            if predicted is None:
                print(f"{name:>8} {size:>10} {measured:>9.2f} {'n/a':>9}")
                continue
            error = predicted / measured - 1.0
            errors.append(abs(error))
            print(f"{name:>8} {size:>10} {measured:>9.2f} {predicted:>9.2f} {error:>+7.1%}")
    if errors:
        print(f"mean |error| {sum(errors) / len(errors):.1%}, worst {max(errors):.1%} over {len(errors)} rows")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="--json output of chimera-bench --scenario")
    parser.add_argument("--out", default="docs/scenario_speedup.png", help="PNG to write")
    parser.add_argument("--errors", action="store_true", help="only print the prediction error per row, no plot")
    args = parser.parse_args()
    series, document = load_series(args.sweep)
    if not series:
        sys.exit(f"{args.sweep}: no rows with a measured speedup")
    if args.errors:
        print_errors(series)
        return
    plot(series, document, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
