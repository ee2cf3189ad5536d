#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Routed MoE exchange of a pipeline stage's tokens (layout ``pp=@0``): straight from stage 0
to stage 1's experts against the hand-off then the dispatch, on the same routing in the same run.

Run under MPI with as many ranks as the mesh has::

    mpirun -np 8 python benchmarks/python/moe_stage_dispatch.py --json stage.json

Mesh ``pp=2,ep=N/2`` (``--mesh``): each stage-0 rank holds T tokens of H f32 features
(``--tokens``, ``--hidden``) routed top-K over E experts (``--configs ExK``, uniform routing),
placed in contiguous blocks over stage 1's ``ep`` group. Programs (RoutedExchange ``program=``):

* ``straight`` (``fused``): stage 0 sends each token once per destination rank straight to
  stage 1's expert ranks, its routing to its peer; the rows' gradients return straight to it;
* ``handoff_once`` (``planned`` on the ``pcie-4080x8`` topology, where rule 5 does not pay and
  rule 1 does): the hand-off, then a once-per-rank dispatch on stage 1 (the row says whether
  the decision was that: ``handoff_once_is_handoff``);
* ``handoff`` (``per_expert``, the chain as issued): x and routing to the stage-1 peer, then its
  per-(token, expert) dispatch; grad x and grad w handed back.

One step is the exchange's forward (dispatch, receive, combine) and backward (combine backward,
dispatch backward) with an identity expert, timed between barriers, max over ranks. As in
nccl-tests: ``-w`` warm-up steps, then ``-n`` timed ones, the programs interleaved per step; the
median over steps is one run, and ``--runs`` runs (default 3) report the median of their
medians. Bytes: what all ranks sent in one step (RoutedStats), and what crossed the stage link
(stage 0's dispatch and what stage 1 sent back to it). ``straight_planned``: whether the
Planned decision (bytes alone) takes rule 5 for this configuration. ``exact``: y, grad x and grad w equal
between the programs bit for bit (integer data, quarter weights). ``--json FILE`` writes
``{"rows": [...]}`` (rank 0); ``--check`` exits 1 unless every row is exact.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

import chimera

# name: (program, topology) of the RoutedExchange.
PROGRAMS = {"straight": ("fused", "bytes"), "handoff_once": ("planned", "pcie-4080x8"),
            "handoff": ("per_expert", "bytes")}


def routing(rank: int, tokens: int, experts: int, top_k: int, hidden: int):
    """Stage-0 rank `rank`'s uniform top-K ids, quarter weights and integer rows."""
    rng = np.random.default_rng(1000 + rank)
    ids = np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k].astype(np.int64)
    weights = (rng.integers(1, 5, (tokens, top_k)) * 0.25).astype(np.float32)
    x = rng.integers(-8, 8, (tokens, hidden)).astype(np.float32)
    return ids, weights, x


def barrier(backend) -> None:
    backend.all_reduce(np.zeros(1, np.float32), axes="pp+ep")


def step(backend, exchange, data, hidden: int):
    """One forward + backward on this rank's side; returns (seconds, outputs, stats dicts)."""
    barrier(backend)
    start = time.perf_counter()
    stats = []
    if exchange.role == "source":
        ids, weights, x = data
        handle = exchange.dispatch(x, ids, weights, x.shape[0])
        grad_x, grad_w = np.empty_like(x), np.empty_like(weights)
        stats.append(handle.stats)
        stats.append(exchange.dispatch_backward(None, None, handle, grad_x, grad_w))
        outputs = (grad_x, grad_w)
    else:
        handle = exchange.dispatch(None, None, None, 0)
        rows = handle.rows
        recv_x = np.empty((rows, hidden), np.float32)
        recv_e, recv_w = np.empty(rows, np.int64), np.empty(rows, np.float32)
        exchange.receive(handle, recv_x, recv_e, recv_w)
        y = np.empty((handle.tokens, hidden), np.float32)
        stats.append(handle.stats)
        stats.append(exchange.combine(recv_x, recv_w, handle, y))
        grad_out, grad_rw = np.empty_like(recv_x), np.empty_like(recv_w)
        stats.append(exchange.combine_backward(y, recv_x, recv_w, handle, grad_out, grad_rw))
        stats.append(exchange.dispatch_backward(grad_out, grad_rw, handle, None, None))
        outputs = (y, grad_out, grad_rw)
    seconds = time.perf_counter() - start
    worst = backend.all_reduce(np.array([seconds], np.float64), op="max", axes="pp+ep")
    return float(worst[0]), outputs, stats


def total(backend, value: int) -> int:
    return int(backend.all_reduce(np.array([value], np.float64), axes="pp+ep")[0])


def bench(backend, args, experts: int, top_k: int) -> dict:
    stage = 0 if backend.rank < backend.mesh.size // 2 else 1
    exchanges = {name: chimera._chimera.RoutedExchange(backend, experts, top_k, args.hidden, group="ep",
                                                       layout="pp=@0", program=program, topology=topology)
                 for name, (program, topology) in PROGRAMS.items()}
    data = routing(backend.rank, args.tokens, experts, top_k, args.hidden) if stage == 0 else None
    medians = {name: [] for name in PROGRAMS}
    outputs, stats = {}, {}
    for _ in range(args.runs):
        times = {name: [] for name in PROGRAMS}
        for i in range(args.warmup + args.iters):
            for name, exchange in exchanges.items():
                seconds, outputs[name], stats[name] = step(backend, exchange, data, args.hidden)
                if i >= args.warmup:
                    times[name].append(seconds)
        for name in PROGRAMS:
            medians[name].append(statistics.median(times[name]))
    same = all(np.array_equal(a, b) for name in ("handoff_once", "handoff")
               for a, b in zip(outputs["straight"], outputs[name]))
    row = {"mesh": args.mesh, "experts": experts, "topk": top_k, "tokens": args.tokens, "hidden": args.hidden,
           "exact": bool(total(backend, 0 if same else 1) == 0)}
    for name in PROGRAMS:
        sent = sum(s["bytes_sent"] for s in stats[name])
        # Stage 0 sends only across the stage link; stage 1 sends back across it in its dispatch
        # backward (straight), or in the hand-off back (its last round).
        link = sent if stage == 0 else 0
        if stage == 1:
            back = stats[name][-1]
            link = back["bytes_sent"] if name == "straight" else 8 + args.tokens * (args.hidden + top_k) * 4
        row[f"{name}_bytes"] = total(backend, sent)
        row[f"{name}_link_bytes"] = total(backend, link)
        row[f"{name}_us"] = statistics.median(medians[name]) * 1e6
        row[f"{name}_run_us"] = [m * 1e6 for m in medians[name]]
    once = exchanges["handoff_once"]
    row["handoff_once_is_handoff"] = not once.straight_from_stage and once.once_per_rank
    row["straight_planned"] = chimera._chimera.RoutedExchange(
        backend, experts, top_k, args.hidden, group="ep", layout="pp=@0").straight_from_stage
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-t", "--tokens", type=int, default=4096, help="tokens per stage-0 rank")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--mesh", default=None, help="pp=2,ep=M (default: pp=2,ep=world/2)")
    parser.add_argument("--configs", nargs="+", default=["64x2", "64x8"], help="ExK each")
    parser.add_argument("-w", "--warmup", type=int, default=1)
    parser.add_argument("-n", "--iters", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="write {\"rows\": [...]} here (rank 0)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every row is exact")
    args = parser.parse_args()
    _, size = chimera.world()
    args.mesh = args.mesh or f"pp=2,ep={size // 2}"
    rows = []
    with chimera.mpi_backend(args.mesh) as backend:
        backend.create_groups(["ep", "pp+ep"])
        for config in args.configs:
            experts, top_k = (int(v) for v in config.split("x"))
            row = bench(backend, args, experts, top_k)
            rows.append(row)
            if backend.rank == 0:
                print(f"{row['mesh']} E={experts} K={top_k} T={args.tokens} H={args.hidden}: "
                      f"straight {row['straight_us']:.0f} us {row['straight_bytes']} B "
                      f"(link {row['straight_link_bytes']} B), "
                      f"hand-off once per rank {row['handoff_once_us']:.0f} us {row['handoff_once_bytes']} B, "
                      f"hand-off {row['handoff_us']:.0f} us {row['handoff_bytes']} B "
                      f"(link {row['handoff_link_bytes']} B), "
                      f"planned straight: {row['straight_planned']}, exact: {row['exact']}", flush=True)
        if backend.rank == 0 and args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"rows": rows}, f, indent=1)
    if args.check and not all(row["exact"] for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
