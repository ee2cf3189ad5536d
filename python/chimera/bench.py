# SPDX-License-Identifier: Apache-2.0
"""The Python-side overhead of chimera's bindings: ``python -m chimera.bench``.

1. A cached Session window (record 8 calls + consume, repeated): Python vs the same window
   recorded from C++, per recorded call. Both run on a backend that moves no data (rank 0 of
   pp=2,tp=4), so the figures are the call paths alone.
2. A plain collective (in-place AllReduce of a small tensor): Python vs the C++ call, on the
   no-op backend and on the MPI backend of this process's world.

Each figure is the median over repetitions; the two variants are interleaved per repetition
so that machine load affects both alike.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import chimera
from chimera import _chimera


def _window_python(session: chimera.Session, mesh: chimera.Mesh, buffers: dict, layouts: dict) -> None:
    s, L, B = session, layouts, buffers
    x = s.tensor(B["a"], L["stage0_partial"])
    x1 = s.all_reduce(x, "tp")
    x2 = s.send(x1, "pp")
    y = s.tensor(B["b"], L["stage0_shard"])
    y1 = s.all_gather(y, "tp", 0, B["c"])
    y2 = s.send(y1, "pp")
    z = s.tensor(B["d"], L["stage0_shard"])
    z1 = s.send(z, "pp")
    z2 = s.all_to_all(z1, "tp", 0, 1, None)
    w = s.tensor(B["e"], L["partial"])
    w1 = s.all_reduce(w, "tp")
    v = s.tensor(B["f"], L["partial"])
    s.reduce_scatter(v, "tp", 0, B["g"])
    s.declare_read(x2, L["stage1"])
    s.declare_read(y2, L["stage1"])
    s.declare_read(z2, L["stage1_shard"])
    s.consume(w1, L["shard"])


def window_overhead(iters: int, lib: str) -> dict:
    mesh = chimera.Mesh("pp=2,tp=4")
    backend = _chimera._null_backend(mesh, 0)
    session = chimera.Session(backend)
    texts = {"stage0_partial": "pp=@0,tp=P", "stage0_shard": "pp=@0,tp=S0", "partial": "tp=P",
             "stage1": "pp=@1,tp=R", "stage1_shard": "pp=@1,tp=S1", "shard": "tp=S0"}
    layouts = {k: chimera.Layout(v, mesh) for k, v in texts.items()}
    if lib == "torch":
        import torch

        def make(shape):
            return torch.zeros(shape, dtype=torch.float32)
    else:
        def make(shape):
            return np.zeros(shape, dtype=np.float32)
    buffers = {"a": make((64, 64)), "b": make((16, 64)), "c": make((64, 64)), "d": make((16, 64)),
               "e": make((64, 64)), "f": make((64, 64)), "g": make((16, 64))}
    _window_python(session, mesh, buffers, layouts)  # plans once
    py, cpp = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        _window_python(session, mesh, buffers, layouts)
        py.append((time.perf_counter() - t0) * 1e6 / 8)
        cpp.extend(_chimera._bench_window_cpp(1))
    stats = session.stats()
    assert stats["window_cache_hits"] == iters, stats
    return {"python_us": statistics.median(py), "cpp_us": statistics.median(cpp)}


def collective_overhead(backend: chimera.Backend, iters: int, calls: int, lib: str) -> dict:
    if lib == "torch":
        import torch

        tensor = torch.ones(256, dtype=torch.float32)
    else:
        tensor = np.ones(256, dtype=np.float32)
    py, cpp = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(calls):
            backend.all_reduce(tensor, op="max")
        py.append((time.perf_counter() - t0) * 1e6 / calls)
        cpp.extend(_chimera._bench_all_reduce_cpp(backend, tensor, 1, calls))
    return {"python_us": statistics.median(py), "cpp_us": statistics.median(cpp)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200, help="repetitions (median reported)")
    parser.add_argument("--calls", type=int, default=100, help="collective calls per repetition")
    parser.add_argument("--lib", choices=["numpy", "torch"], default="torch")
    args = parser.parse_args()

    w = window_overhead(args.iters, args.lib)
    print(f"cached Session window, per recorded call ({args.lib}): python {w['python_us']:7.2f} us  "
          f"C++ {w['cpp_us']:7.2f} us  overhead {w['python_us'] - w['cpp_us']:7.2f} us  (target < 20 us)")
    null = _chimera._null_backend(chimera.Mesh("world=1"), 0)
    c = collective_overhead(null, args.iters, args.calls, args.lib)
    print(f"all_reduce on the no-op backend ({args.lib}):      python {c['python_us']:7.2f} us  "
          f"C++ {c['cpp_us']:7.2f} us  overhead {c['python_us'] - c['cpp_us']:7.2f} us  (target < 10 us)")
    rank, size = chimera.world()
    with chimera.mpi_backend(f"world={size}") as mpi:
        c = collective_overhead(mpi, args.iters, args.calls, args.lib)
    if rank == 0:
        print(f"all_reduce on MPI, {size} rank(s), 1 KiB ({args.lib}):   python {c['python_us']:7.2f} us  "
              f"C++ {c['cpp_us']:7.2f} us  overhead {c['python_us'] - c['cpp_us']:7.2f} us")


if __name__ == "__main__":
    main()
