# SPDX-License-Identifier: Apache-2.0
# Inputs and NumPy references shared by the Python suites. Every value is a small integer (or a
# dyadic fraction), so sums, products and averages are exact in every dtype, bf16 included, and
# each rank computes every other rank's input locally from (rank, index).
import numpy as np

NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32}


def torch_dtypes():
    import torch

    return {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
            "i32": torch.int32}


def rank_values(rank: int, count: int, op: str = "sum") -> np.ndarray:
    """The input of `rank` as float64: 0..6 (1 or 2 for prod, so products stay powers of two)."""
    index = np.arange(count, dtype=np.int64)
    if op == "prod":
        return (1 + (rank + index) % 2).astype(np.float64)
    return ((rank * 3 + index * 5) % 7).astype(np.float64)


def reduce(values: list, op: str, is_int: bool) -> np.ndarray:
    stacked = np.stack(values)
    if op == "sum":
        return stacked.sum(0)
    if op == "prod":
        return stacked.prod(0)
    if op == "min":
        return stacked.min(0)
    if op == "max":
        return stacked.max(0)
    avg = stacked.sum(0) / len(values)
    return np.trunc(avg) if is_int else avg


def make(lib: str, name: str, values: np.ndarray):
    """`values` (float64) as a contiguous tensor of `lib` ("numpy" or "torch") and dtype `name`."""
    if lib == "numpy":
        return np.ascontiguousarray(values.astype(NUMPY_DTYPES[name]))
    import torch

    return torch.from_numpy(values.copy()).to(torch_dtypes()[name]).contiguous()


def empty(lib: str, name: str, shape):
    if lib == "numpy":
        return np.full(shape, -1, dtype=NUMPY_DTYPES[name])
    import torch

    return torch.full(tuple(shape), -1, dtype=torch_dtypes()[name])


def as_f64(tensor) -> np.ndarray:
    if isinstance(tensor, np.ndarray):
        return tensor.astype(np.float64)
    import torch

    return tensor.to(torch.float64).numpy()


def logical_tensor(shape) -> np.ndarray:
    """The logical tensor of the chain tests: distinct small integers."""
    count = int(np.prod(shape))
    return (np.arange(count, dtype=np.int64) % 61).astype(np.float64).reshape(shape)


def local_box(layout, rank, spec, full: np.ndarray) -> np.ndarray:
    """The part of `full` that `rank` holds under `layout` (a copy)."""
    offset, extent = layout.rank_box(rank, spec)
    index = tuple(slice(o, o + e) for o, e in zip(offset, extent))
    return full[index].copy()


def partial_contribution(layout, rank, full_box: np.ndarray) -> np.ndarray:
    """This rank's addend of a partial layout: the addends over the partial group sum to `full_box`
    exactly (member 0 holds the value, member g < n-1 adds g, the last subtracts the others)."""
    import chimera

    partial_axes = [name for name, p in zip(layout.mesh.axis_names, layout.to_placements())
                    if isinstance(p, chimera.Partial)]
    if not partial_axes:
        return full_box
    group = layout.mesh.group_ranks(rank, partial_axes)
    g = group.index(rank)
    n = len(group)
    shift = g if g < n - 1 else -sum(range(n - 1))
    return (full_box if g == 0 else np.zeros_like(full_box)) + shift


# The six scenarios of the paper (at 8 ranks), the same chains on other meshes, and their
# 4-rank forms: (name, mesh, from, chain, consume, logical shape).
FLAT = (32, 48)
CUBE = (16, 24, 16)
SCENARIOS = [
    ("tp_sp", "tp=8", "tp=P", "allreduce:tp", "tp=S0", FLAT),
    ("tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", FLAT),
    ("tp_ep", "ep=2,tp=4", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1", FLAT),
    ("sp_ep", "dp=2,sp=4", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", CUBE),
    ("pp_sp", "sp=4,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R", FLAT),
    ("pp_ep", "pp=2,ep=4", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", FLAT),
    ("tp_sp", "dp=2,tp=4", "tp=P", "allreduce:tp", "tp=S1", FLAT),
    ("tp_pp", "pp=4,tp=2", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", CUBE),
    ("sp_ep", "dp=4,sp=2", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", CUBE),
    ("tp_sp", "tp=4", "tp=P", "allreduce:tp", "tp=S0", FLAT),
    ("tp_pp", "pp=2,tp=2", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", FLAT),
    ("tp_ep", "ep=2,tp=2", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1", CUBE),
    ("sp_ep", "dp=2,sp=2", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", CUBE),
    ("pp_sp", "sp=2,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R", FLAT),
    ("pp_ep", "pp=2,ep=2", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", FLAT),
]


def scenarios_for(size: int):
    import chimera

    fitting = []
    for case in SCENARIOS:
        if chimera.Mesh(case[1]).size == size:
            fitting.append(case)
    return fitting


def scenario_input(layout, rank, spec, full, lib, dtype):
    """This rank's local input of a chain starting at `layout` (None when it holds nothing)."""
    if not layout.holds(rank):
        return None
    return make(lib, dtype, partial_contribution(layout, rank, local_box(layout, rank, spec, full)))


def local_empty(layout, rank, spec, lib, dtype):
    """A local output tensor of `layout` filled with -1 (None when the rank holds nothing)."""
    if not layout.holds(rank):
        return None
    return empty(lib, dtype, layout.local_shape(spec))
