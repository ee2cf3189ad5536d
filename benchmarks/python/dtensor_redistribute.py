#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""DTensor's own redistribute (gloo) vs chimera.torch.redistribute, side by side in one run.

Run with as many ranks as the mesh has, under MPI or torchrun (the default process group is gloo,
so DTensor moves data exactly as it would without chimera; chimera runs on its MPI backend under
mpirun, on its gloo mesh backend under torchrun: the ``transport`` of each row)::

    mpirun -np 8 python benchmarks/python/dtensor_redistribute.py --mesh 2x4 --json out.json
    torchrun --standalone --nproc-per-node 8 benchmarks/python/dtensor_redistribute.py --mesh 2x4

Per transition: bytes sent over all ranks (DTensor: its collectives, counted as they are issued,
by the same bandwidth-optimal formulas chimera's planner uses; chimera: its plan's bytes), the
median wall time of each over --iters runs (each timed between barriers, max over ranks), and
whether both results are equal. DTensor is also timed on the same mesh with its groups on the
"chimera" c10d backend (its own collectives on chimera's host transport, the same as chimera's
plans use), which separates the gain of the fused plan from that of the transport. DTensor's own
call is also made inside ``fused_redistribute()`` (with ``async_op=True``): how many of those redistributions chimera
planned ends the output (``routed_planned`` / ``routed_total`` per row). One JSON row per
transition (--json FILE).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.utils._python_dispatch import TorchDispatchMode

import chimera.torch as ct
from chimera.torch.redistribute import Unplannable, bytes_of, runtime_for

P, R = Partial(), Replicate()
S = Shard
TRANSITIONS = [
    ((P, P), (S(0), S(0))),
    ((P, P), (R, R)),
    ((P, P), (S(0), S(1))),
    ((P, R), (S(0), R)),
    ((S(0), R), (S(1), R)),
    ((S(0), S(1)), (S(1), S(0))),
    ((S(0), S(0)), (S(1), S(1))),
    ((S(0), S(0)), (R, R)),
    ((R, S(0)), (R, S(1))),
    ((S(1), P), (S(0), S(0))),
]


def _group_of(args, kwargs):
    """The process group of a functional collective: a ProcessGroup argument or, in older
    signatures, the group name (the last string argument)."""
    values = list(args) + list(kwargs.values())
    for a in values:
        if isinstance(a, dist.ProcessGroup):
            return a
    names = [a for a in values if isinstance(a, str)]
    if names:
        return dist.distributed_c10d._resolve_process_group(names[-1])  # noqa: SLF001
    raise RuntimeError(f"no process group among {[type(a).__name__ for a in values]}")


class ByteCounter(TorchDispatchMode):
    """Counts the bytes this rank sends in the functional collectives DTensor issues."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0]
        collective = name.startswith(("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast"))
        if func.namespace == "_c10d_functional" and collective:
            group = _group_of(args, kwargs)
            n = group.size()
            size = args[0].numel() * args[0].element_size()
            self.calls += 1
            if name.startswith("all_reduce"):
                self.bytes += 2 * (n - 1) * size // n
            elif name.startswith("reduce_scatter"):
                self.bytes += (n - 1) * size // n
            elif name.startswith("all_gather"):
                self.bytes += (n - 1) * size
            elif name.startswith("all_to_all"):
                self.bytes += (n - 1) * size // n
            else:  # broadcast and anything else: the whole buffer
                self.bytes += size
        return func(*args, **kwargs)


def make(mesh, placements, shape, dtype):
    rank = dist.get_rank()
    full = (torch.arange(shape[0] * shape[1]).reshape(shape) % 13 - 6).to(dtype)
    start = tuple(R if isinstance(p, Partial) else p for p in placements)
    d = distribute_tensor(full, mesh, start)
    if not any(isinstance(p, Partial) for p in placements):
        return d
    local = d.to_local() * (rank + 1)
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=d.shape, stride=d.stride())


def timed(fn, iters):
    times = []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        fn()
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times.append(elapsed.item())
    return statistics.median(times) * 1e3


def text(placements):
    return ",".join(str(p) for p in placements)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mesh", default="2x2", help="mesh sizes, e.g. 2x4 (product = ranks)")
    parser.add_argument("--shape", default="1024x1024", help="global tensor shape, e.g. 1024x1024")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--json", help="write the rows here (rank 0)")
    args = parser.parse_args()
    ct.init_process_group("gloo")  # the rendezvous from an MPI launch, else torchrun's environment
    sizes = tuple(int(s) for s in args.mesh.split("x"))
    shape = tuple(int(s) for s in args.shape.split("x"))
    dtype = getattr(torch, args.dtype)
    names = tuple(f"d{i}" for i in range(len(sizes)))
    mesh = init_device_mesh("cpu", sizes, mesh_dim_names=names)
    # The same mesh with its groups on the "chimera" c10d backend: DTensor's own collectives on
    # chimera's host transport, which separates the planning gain from the transport's.
    on_chimera = init_device_mesh("cpu", sizes, mesh_dim_names=names,
                              backend_override={i: "chimera" for i in range(len(sizes))})
    transport = runtime_for(mesh).backend.name
    rows = []
    for src, dst in TRANSITIONS:
        d = make(mesh, src, shape, dtype)
        counter = ByteCounter()
        with counter:
            ref = d.redistribute(mesh, dst)
        dt_bytes = torch.tensor([counter.bytes], dtype=torch.int64)
        dist.all_reduce(dt_bytes)
        try:
            ch_bytes, _, plan = bytes_of(d, dst)
        except Unplannable as why:
            ch_bytes, plan = None, f"not planned: {why}"
        ours = ct.redistribute(d, dst)
        # DTensor's own call (with async_op, as torch's parallel styles make it) routed by the hook.
        before = ct.stats()
        with ct.fused_redistribute():
            routed = d.redistribute(mesh, dst, async_op=True)
        after = ct.stats()
        planned_routed = after["planned"] - before["planned"]
        routed_total = planned_routed + after["fallback"] - before["fallback"]
        equal = torch.tensor([int(torch.equal(ours.to_local(), ref.to_local())
                                  and torch.equal(routed.to_local(), ref.to_local()))])
        dist.all_reduce(equal, op=dist.ReduceOp.MIN)
        d_chimera = DTensor.from_local(d.to_local(), on_chimera, d.placements, run_check=False, shape=d.shape,
                                   stride=d.stride())
        ref_chimera = d_chimera.redistribute(on_chimera, dst)
        equal_chimera = torch.tensor([int(torch.equal(ref_chimera.to_local(), ref.to_local()))])
        dist.all_reduce(equal_chimera, op=dist.ReduceOp.MIN)
        dt_ms = timed(lambda: d.redistribute(mesh, dst), args.iters)
        dt_chimera_ms = timed(lambda: d_chimera.redistribute(on_chimera, dst), args.iters)
        ch_ms = timed(lambda: ct.redistribute(d, dst), args.iters)
        row = {"mesh": args.mesh, "transport": transport, "transition": f"{text(src)} -> {text(dst)}",
               "shape": args.shape,
               "dtype": args.dtype, "dtensor_bytes": int(dt_bytes.item()), "dtensor_collectives": counter.calls,
               "chimera_bytes": ch_bytes, "dtensor_ms": round(dt_ms, 3),
               "dtensor_on_chimera_backend_ms": round(dt_chimera_ms, 3), "chimera_ms": round(ch_ms, 3),
               "speedup": round(dt_ms / ch_ms, 2), "speedup_same_transport": round(dt_chimera_ms / ch_ms, 2),
               "equal": bool(equal.item() and equal_chimera.item()), "chimera_plan": plan.strip(),
               "routed_planned": planned_routed, "routed_total": routed_total}
        rows.append(row)
        if dist.get_rank() == 0:
            print(f"{row['transition']:<28} dtensor {row['dtensor_bytes']:>10} B {dt_ms:8.2f} ms "
                  f"(on chimera's backend {dt_chimera_ms:8.2f} ms)   "
                  f"chimera {ch_bytes if ch_bytes is not None else '-':>10} B {ch_ms:8.2f} ms   "
                  f"x{row['speedup']:<5} (x{row['speedup_same_transport']:<5}) equal={row['equal']}", flush=True)
    planned = sum(r["routed_planned"] for r in rows)
    total = sum(r["routed_total"] for r in rows)
    if dist.get_rank() == 0:
        print(f"chimera on its {transport} backend; fused_redistribute(): "
              f"chimera planned {planned} of {total} redistributions "
              f"({planned / max(total, 1):.0%})", flush=True)
    if args.json and dist.get_rank() == 0:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
