#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Routed MoE dispatch + combine: chimera against the dispatchers frameworks use, on the same
routing in the same run.

Run with as many ranks as each mesh has, under MPI or under torchrun::

    mpirun -np 8 python benchmarks/python/moe_dispatch.py --json moe.json
    torchrun --standalone --nproc-per-node 8 benchmarks/python/moe_dispatch.py --json moe.json

chimera runs on the host backend of the launch (chimera.torch.backend.mesh_backend): its MPI
backend under mpirun, its gloo mesh backend under torchrun.

Per (mesh, E, K, routing): T tokens of H features per rank (``--tokens``, ``--hidden``), routed
top-K over E experts in contiguous blocks over the expert group (the whole world: ``ep=8``, or
``tp=2,ep=4`` with EP folded over TP, tokens sharded over TP as sequence parallelism leaves
them). Dispatchers, each over the whole expert group (chimera.torch.moe_baselines):

* ``chimera``: ``chimera.torch.moe.dispatch`` / ``combine`` (each token once per destination
  rank; from the sequence shards with ``tp``);
* ``per_expert``: one row per (token, expert) in an uneven all-to-all after a count exchange
  (Megatron-core's alltoall dispatcher, torchtitan);
* ``allgather``: AllGather of the tokens and their routing, ReduceScatter back (Megatron-core's
  allgather dispatcher);
* ``tp_chain`` (meshes with tp > 1): torchtitan's chain, AllGather over TP, per-(token,
  expert) dispatch of this TP rank's share, combine, ReduceScatter over TP.

The baselines run on MPI through mpi4py (``--transport mpi``, the transport chimera's MPI
backend uses; the default under mpirun) or on gloo (``--transport gloo``; the default
otherwise, the transport chimera's gloo mesh backend uses). As in nccl-tests: ``-w`` warm-up iterations,
then ``-n`` timed ones; each exchange is timed between barriers, the max over ranks taken, and
the median over iterations reported (dispatch + combine, forward, the expert stand-in not
counted); the dispatchers run interleaved per iteration so they share the machine's load alike.
Bytes are what each dispatcher sent to other ranks in one forward dispatch + combine, summed
over all ranks: chimera's own counters, the baselines' splits as passed to their collectives.
``exact``: every dispatcher's received rows, combine output and gradients of x and of the
routing weights equal the per-(token, expert) baseline's bit for bit (the data are exactly
summable, chimera.torch.moe_routings). ``--json FILE`` writes ``{"rows": [...]}`` (rank 0);
``--check`` exits 1 unless every row is exact and has chimera, which never sends more than
per_expert.

Memory: every dispatcher returns fresh tensors each iteration (recv_x alone is 1 GiB on the
rank that holds the experts when every token goes to them). The script turns on torch's own
huge-page allocation (``THP_MEM_ALLOC_ENABLE=1``: tensors of 2 MiB and more) for every
dispatcher alike, as a GPU caching allocator hands back warm memory; ``THP_MEM_ALLOC_ENABLE=0``
in the environment keeps 4 KiB pages, on which faulting in those tensors, not the exchange,
takes most of the time of every dispatcher. Each row says which (``huge_pages``). With huge
pages the script has glibc map every allocation of 1 MiB or more by itself and unmap it when
freed, so that freed tensors do not pile up in its heap over the rows: the default meshes and
configs on 8 ranks then fit in 24 GiB (without it they outgrow it).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import chimera.torch as ct
from chimera.torch import moe_routings
from chimera.torch.backend import transport
from chimera.torch.moe_baselines import (
    AllGatherDispatcher,
    ChimeraDispatcher,
    MpiComm,
    PerExpertDispatcher,
    TorchComm,
    TPChainDispatcher,
)

DTYPES = {"f32": torch.float32, "f64": torch.float64}


def huge_pages() -> bool:
    """Whether torch backs this run's large tensors with huge pages (see the module docstring)."""
    return os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"


def use_huge_pages() -> None:
    """Huge pages for torch's large tensors unless the environment says otherwise (set before the
    first tensor of 2 MiB or more: torch reads the switch once). With them, glibc maps every
    allocation of 1 MiB or more by itself, unmaps it when freed and trims its heap above 1 MiB:
    its adaptive threshold would otherwise let tensors of up to 32 MiB into a heap that keeps their
    pages after they are freed, and over the rows of a full run that outgrows a 24 GiB host."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    try:
        glibc = bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):
        glibc = False
    if not huge_pages() or not glibc:
        return
    libc = ctypes.CDLL(None)
    m_trim_threshold, m_mmap_threshold = -1, -3  # mallopt parameters (malloc.h)
    libc.mallopt(m_mmap_threshold, 1 << 20)
    libc.mallopt(m_trim_threshold, 1 << 20)


def parse_mesh(text: str, world: int) -> dict[str, int]:
    axes = {}
    for part in text.split(","):
        name, _, size = part.partition("=")
        if name not in ("tp", "ep") or not size.isdigit() or name in axes:
            raise SystemExit(f"--meshes: '{text}' is not [tp=N,]ep=M")
        axes[name] = int(size)
    axes.setdefault("tp", 1)
    if "ep" not in axes or axes["tp"] * axes["ep"] != world:
        raise SystemExit(f"--meshes: '{text}' needs tp x ep = {world} ranks (the world)")
    return axes


def parse_config(text: str) -> tuple[int, int]:
    e, _, k = text.partition("x")
    if not (e.isdigit() and k.isdigit()) or not 1 <= int(k) <= int(e):
        raise SystemExit(f"--configs: '{text}' is not ExK with 1 <= K <= E")
    return int(e), int(k)


class Comms:
    """The expert group (the world) and this rank's TP group, on the baselines' transport."""

    def __init__(self, transport: str, tp: int):
        rank = dist.get_rank()
        if transport == "mpi":
            from mpi4py import MPI

            self.world = MpiComm(MPI.COMM_WORLD)
            self.tp = MpiComm(MPI.COMM_WORLD.Split(rank // tp, rank)) if tp > 1 else None
        else:
            self.world = TorchComm(dist.new_group(backend="gloo"))
            self.tp = None
            for first in range(0, dist.get_world_size(), tp) if tp > 1 else []:
                g = dist.new_group(list(range(first, first + tp)), backend="gloo")
                if first <= rank < first + tp:
                    self.tp = TorchComm(g)


def chimera_dispatcher(num_experts: int, mesh: dict, program: str) -> ChimeraDispatcher:
    """chimera.torch.moe over the whole world: on ``tp=T,ep=M`` the mesh ``ep=M,tp=T`` (tp
    innermost), the folded group ``ep+tp`` and the tokens the ``tp=S0`` shards; ``bytes_sent``
    from the exchange's own counters (payload, headers, counts)."""
    where = {} if mesh["tp"] == 1 else {"mesh": f"ep={mesh['ep']},tp={mesh['tp']}", "group": "ep+tp",
                                        "layout": "tp=S0"}
    return ChimeraDispatcher(num_experts, program, **where)


def has_chimera_moe() -> bool:
    try:
        from chimera.torch import moe  # noqa: F401
    except ImportError:
        return False
    return True


def same(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def max_over_ranks(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def sum_over_ranks(value: int) -> int:
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t.item())


def routed_pairs(idx, num_experts: int, ranks: int, me: int):
    """(distinct destination ranks summed over this rank's tokens, those other than this rank)."""
    if idx.shape[0] == 0:
        return 0, 0
    dest = idx // (num_experts // ranks)
    hit = torch.zeros(idx.shape[0], ranks, dtype=torch.bool)
    hit.scatter_(1, dest, True)
    return int(hit.sum()), int(hit.sum() - hit[:, me].sum())


def time_forward(dispatchers, x, idx, w, warmup: int, iters: int):
    """Median over iterations of the max over ranks of dispatch + combine (forward), and the
    bytes each dispatcher sent in its last iteration (summed over ranks)."""
    times = {name: [] for name in dispatchers}
    sent = {}
    with torch.no_grad():
        for it in range(warmup + iters):
            for name, d in dispatchers.items():
                before = d.bytes_sent
                dist.barrier()
                start = time.perf_counter()
                recv_x, recv_expert, _, _, handle = d.dispatch(x, idx, w)
                dispatch = time.perf_counter() - start
                out = moe_routings.expert_fn(recv_x, recv_expert)
                dist.barrier()
                start = time.perf_counter()
                d.combine(out, handle)
                combine = time.perf_counter() - start
                del recv_x, out, handle
                sent[name] = d.bytes_sent - before
                if it >= warmup:
                    times[name].append(max_over_ranks(dispatch) + max_over_ranks(combine))
    return ({name: statistics.median(t) * 1e6 for name, t in times.items()},
            {name: sum_over_ranks(b) for name, b in sent.items()})


def bench_row(args, mesh, comms, e, k, kind):
    rank, n = dist.get_rank(), dist.get_world_size()
    t, h, dtype = args.tokens, args.hidden, DTYPES[args.dtype]
    seed = args.seed + 1000 * e + 10 * k + moe_routings.ROUTINGS.index(kind)
    idx, w = moe_routings.routing(kind, t, e, k, seed, rank)
    x = moe_routings.tokens(t, h, seed, rank, dtype)
    grad_y = moe_routings.tokens(t, h, seed + 1, rank, dtype)
    w = w.to(dtype)
    counts = torch.bincount(idx.reshape(-1), minlength=e).double()
    dist.all_reduce(counts)
    per_rank = counts.view(n, -1).sum(1)
    pairs, off_rank = routed_pairs(idx, e, n, rank)
    dispatchers = {"per_expert": PerExpertDispatcher(e, comms.world), "allgather": AllGatherDispatcher(e, comms.world)}
    if mesh["tp"] > 1:
        dispatchers["tp_chain"] = TPChainDispatcher(e, comms.world, comms.tp)
    if has_chimera_moe():
        dispatchers = {"chimera": chimera_dispatcher(e, mesh, args.program), **dispatchers}
    exact = True
    if not args.no_check:
        want = moe_routings.forward_backward(dispatchers["per_expert"], x, idx, w, grad_y)
        for name, d in dispatchers.items():
            if name != "per_expert":
                got = moe_routings.forward_backward(d, x, idx, w, grad_y)
                exact = exact and all(same(a, b) for a, b in zip(got, want))
        del want
    flag = torch.tensor([1 if exact else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    us, sent = time_forward(dispatchers, x, idx, w, args.warmup, args.iters)
    row = {"mesh": ",".join(f"{a}={s}" for a, s in mesh.items() if s > 1 or a == "ep"), "experts": e, "topk": k,
           "routing": kind, "tokens": t, "hidden": h, "dtype": args.dtype, "ranks": n,
           "huge_pages": huge_pages(),
           "expert_load_max_over_mean": (counts.max() / counts.mean()).item(),
           "rank_load_max_over_mean": (per_rank.max() / per_rank.mean()).item(),
           "distinct_ranks_per_token": sum_over_ranks(pairs) / max(1, n * t),
           "routed_payload_bytes": 2 * sum_over_ranks(off_rank) * h * x.element_size(),  # dispatch + combine
           "exact": bool(flag.item()) and not args.no_check}
    for name in ("chimera", "per_expert", "allgather", "tp_chain"):
        if name in dispatchers:
            row[f"{name}_bytes"] = sent[name]
            row[f"{name}_us"] = us[name]
    if "chimera_bytes" in row and row["chimera_bytes"] > 0:
        for name in ("per_expert", "allgather", "tp_chain"):
            if f"{name}_bytes" in row:
                row[f"bytes_ratio_vs_{name}"] = row[f"{name}_bytes"] / row["chimera_bytes"]
                row[f"speedup_vs_{name}"] = row[f"{name}_us"] / row["chimera_us"]
    return row


def print_row(row) -> None:
    def cell(name, scale, fmt):
        return format(row[name] / scale, fmt) if name in row else format("-", ">" + fmt.split(".")[0])

    print(f"{row['mesh']:>10} {row['experts']:>4} {row['topk']:>3} {row['routing']:>10} "
          f"{row['expert_load_max_over_mean']:>6.2f} {row['distinct_ranks_per_token']:>5.2f} "
          + " ".join(cell(f"{d}_bytes", 2**20, "14.1f") for d in ("chimera", "per_expert", "allgather", "tp_chain"))
          + " " + " ".join(cell(f"{d}_us", 1, "13.0f") for d in ("chimera", "per_expert", "allgather", "tp_chain"))
          + f" {str(row['exact']):>6}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-t", "--tokens", type=int, default=4096, help="tokens per rank")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    parser.add_argument("--meshes", nargs="+", default=["ep=8", "tp=2,ep=4"], help="[tp=N,]ep=M each")
    parser.add_argument("--configs", nargs="+", default=["8x1", "8x2", "64x2", "64x8"], help="ExK each")
    parser.add_argument("--routings", nargs="+", choices=moe_routings.ROUTINGS, default=list(moe_routings.ROUTINGS))
    parser.add_argument("-w", "--warmup", type=int, default=2)
    parser.add_argument("-n", "--iters", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--transport", choices=["mpi", "gloo"],
                        help="the baselines' transport (default: chimera's, mpi under an MPI launch, else gloo)")
    parser.add_argument("--program", choices=["planned", "fused", "per_expert"], default="planned",
                        help="chimera's program (moe.dispatch program=)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    parser.add_argument("--no-check", action="store_true", help="skip the bit-for-bit check (exact: false)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless exact and chimera <= per_expert bytes")
    parser.add_argument("--json", help="write {\"rows\": [...]} here (rank 0)")
    args = parser.parse_args()
    use_huge_pages()
    torch.set_num_threads(args.threads)
    ct.init_process_group("gloo")
    world = dist.get_world_size()
    args.transport = args.transport or transport(world)
    meshes = [parse_mesh(m, world) for m in args.meshes]
    configs = [parse_config(c) for c in args.configs]
    for mesh in meshes:
        for e, _ in configs:
            if e % world:
                raise SystemExit(f"{e} experts do not split into contiguous blocks over {world} ranks")
        if args.tokens % mesh["tp"]:
            raise SystemExit(f"--tokens {args.tokens} must divide by tp={mesh['tp']}")
    if dist.get_rank() == 0:
        print(f"# {world} ranks, {args.tokens} tokens x {args.hidden} {args.dtype} per rank, baselines on "
              f"{args.transport}, {args.warmup} warm-up + {args.iters} timed iterations (median), torch "
              f"huge pages {'on' if huge_pages() else 'off'} (THP_MEM_ALLOC_ENABLE)")
        print(f"{'mesh':>10} {'E':>4} {'K':>3} {'routing':>10} {'imb':>6} {'D':>5} "
              + " ".join(f"{d + ' MiB':>14}" for d in ("chimera", "per_expert", "allgather", "tp_chain")) + " "
              + " ".join(f"{d + ' us':>13}" for d in ("chimera", "per_expert", "allgather", "tp_chain"))
              + f" {'exact':>6}")
    rows = []
    for mesh in meshes:
        comms = Comms(args.transport, mesh["tp"])
        for e, k in configs:
            for kind in args.routings:
                row = bench_row(args, mesh, comms, e, k, kind)
                rows.append(row)
                if dist.get_rank() == 0:
                    print_row(row)
    ok = all(r["exact"] and "chimera_bytes" in r and r["chimera_bytes"] <= r["per_expert_bytes"] for r in rows)
    if args.json and dist.get_rank() == 0:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    if args.check and not ok:
        print("moe_dispatch: a row is not exact or chimera sent more than the per-expert dispatcher", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
