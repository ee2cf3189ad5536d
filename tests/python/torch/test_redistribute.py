# SPDX-License-Identifier: Apache-2.0
# chimera.torch.redistribute against DTensor's own redistribute on a 2x2 mesh (4 ranks; the
# mesh's groups run on the "chimera" c10d backend): equal values and placements for every
# transition, on integer-valued data so sums are exact, each planned by chimera; fallbacks and
# the context manager; meshes whose ranks are in any order, and sub-meshes. Under mpirun chimera
# runs on its MPI backend, under torchrun on its gloo mesh backend (CHIMERA_EXPECT_TRANSPORT).
import importlib
import logging
import math
import os
import re

import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._dtensor_spec import DTensorSpec

import chimera
import chimera.torch as ct
from chimera.torch.redistribute import bytes_of

from conftest import agree, sub_mesh_input

# The module, not the function chimera.torch exports under the same name.
routing = importlib.import_module("chimera.torch.redistribute")

P, R, S0, S1 = Partial(), Replicate(), Shard(0), Shard(1)
TRANSITIONS = [
    ((P, P), (S0, S0)),
    ((P, P), (R, R)),
    ((P, P), (S0, S1)),
    ((P, P), (S1, R)),
    ((P, R), (R, S0)),
    ((S0, R), (S1, R)),
    ((S0, S1), (S1, S0)),
    ((S0, S0), (S1, S1)),
    ((S0, S0), (R, R)),
    ((R, S0), (R, S1)),
    ((R, R), (S0, S1)),
    ((S1, P), (S0, S0)),
    ((P, S0), (R, R)),
]


@pytest.fixture(scope="module")
def mesh(world):
    return init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))


def make(mesh, placements, dtype, shape=(8, 12)):
    """A DTensor with `placements` whose values are integers (partial axes hold per-rank parts)."""
    rank = torch.distributed.get_rank()
    full = (torch.arange(shape[0] * shape[1]).reshape(shape) % 13 - 6).to(dtype)
    start = tuple(R if isinstance(p, Partial) else p for p in placements)
    d = distribute_tensor(full, mesh, start)
    if not any(isinstance(p, Partial) for p in placements):
        return d
    # Partial: every rank holds (rank+1) * its part; the sum is then exact too.
    local = d.to_local() * (rank + 1)
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=d.shape, stride=d.stride())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64], ids=str)
@pytest.mark.parametrize("src,dst", TRANSITIONS, ids=lambda t: "".join(str(p) for p in t))
def test_matches_dtensor(world, mesh, src, dst, dtype):
    rank, n, gloo = world
    d = make(mesh, src, dtype)
    bytes_of(d, dst)  # chimera plans it (raises Unplannable on a fallback)
    ct.reset_stats()
    ours = ct.redistribute(d, dst)
    planned = ct.stats()
    ref = d.redistribute(mesh, dst)
    ok = tuple(ours.placements) == tuple(ref.placements) and ours.shape == ref.shape and torch.equal(
        ours.to_local(), ref.to_local()) and planned["planned"] == 1 and planned["fallback"] == 0
    agree(ok, gloo, f"{src}->{dst} {dtype}: {ours.placements} {ours.to_local()} vs {ref.to_local()}, stats {planned}")


def test_plans_one_program_with_fewer_bytes(world, mesh):
    rank, n, gloo = world
    d = make(mesh, (P, P), torch.float32)
    total, busiest, plan = bytes_of(d, (S0, S0))
    # DTensor: two ReduceScatters, (2-1)/2 of 384 B then of 192 B per rank, on 4 ranks = 1152 B.
    agree(0 < total <= 1152, gloo, f"chimera plan sends {total} bytes: {plan}")


def test_plans_are_priced_by_the_backends_model(world, mesh):
    """The runtime prices as a Session on its backend does: CHIMERA_TOPOLOGY when set, else the
    backend's own model (host:N on the host backends); the bytes it reports are those of the plan
    that model picks."""
    rank, n, gloo = world
    runtime = routing.runtime_for(mesh)
    named = os.environ.get("CHIMERA_TOPOLOGY") or runtime.backend.default_topology
    ok = named == os.environ.get("CHIMERA_TOPOLOGY", f"host:{n}")
    ok = ok and runtime.topology == chimera.Executor(runtime.backend, topology=named).topology
    d = make(mesh, (P, P), torch.float32)
    total, _, plan = bytes_of(d, (S0, S1))
    priced = chimera.plan_redistribution(runtime.mesh, list(d.shape), "f32", "a=P,b=P", "a=S0,b=S1", topology=named)
    agree(ok and total == priced["bytes"] and plan == priced["plan"], gloo,
          f"runtime topology {runtime.topology}, named {named}, backend {runtime.backend.default_topology}: "
          f"{plan} vs {priced}")


def test_fallback_and_context_manager(world, mesh, caplog):
    rank, n, gloo = world
    odd = distribute_tensor(torch.arange(7.0).reshape(7, 1), mesh, (S0, R))  # uneven shards: DTensor's own
    with caplog.at_level(logging.DEBUG, logger="chimera.torch"):
        got = ct.redistribute(odd, (R, R))
    ok = torch.equal(got.to_local(), torch.arange(7.0).reshape(7, 1)) and any(
        "DTensor's own" in r.message for r in caplog.records)
    d = make(mesh, (P, P), torch.float32)
    ref = d.redistribute(mesh, (S0, S1))
    with ct.fused_redistribute():
        with caplog.at_level(logging.DEBUG, logger="chimera.torch"):
            caplog.clear()
            fused = d.redistribute(mesh, (S0, S1))
        fell_back = any("DTensor's own" in r.message for r in caplog.records)
    ok = ok and torch.equal(fused.to_local(), ref.to_local()) and not fell_back
    agree(ok, gloo, "fallback / fused_redistribute")


GRAD_TRANSITIONS = [((S0, S1), (S1, S0)), ((P, P), (S0, S0)), ((R, S0), (R, S1)), ((S0, S0), (R, R)),
                    ((S1, P), (S0, S0))]


@pytest.mark.parametrize("src,dst", GRAD_TRANSITIONS, ids=lambda t: "".join(str(p) for p in t))
def test_gradients_match_dtensor(world, mesh, src, dst):
    """Inside autograd: the gradient chimera's backward hands back equals DTensor's."""
    rank, n, gloo = world
    base = make(mesh, src, torch.float64)
    ours_in = base.detach().requires_grad_(True)
    ref_in = base.detach().requires_grad_(True)
    ours, ref = ct.redistribute(ours_in, dst), ref_in.redistribute(mesh, dst)
    weight = torch.arange(ours.to_local().numel(), dtype=torch.float64).reshape(ours.to_local().shape) % 5 + rank
    (ours.to_local() * weight).sum().backward()
    (ref.to_local() * weight).sum().backward()
    ok = tuple(ours_in.grad.placements) == tuple(ref_in.grad.placements) and torch.equal(
        ours_in.grad.to_local(), ref_in.grad.to_local())
    agree(ok, gloo, f"grad {src}->{dst}: {ours_in.grad.placements} {ours_in.grad.to_local()} vs "
                    f"{ref_in.grad.placements} {ref_in.grad.to_local()}")


def from_parts(mesh, placements, full):
    """A DTensor of `full` with `placements` whose local tensor is cut here, without a collective
    (a Partial one holds (rank + 1) times its part, so that sums stay exact)."""
    local = local_part(full, mesh, placements)
    if any(isinstance(p, Partial) for p in placements):
        local = local * (torch.distributed.get_rank() + 1)
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=full.shape, stride=full.stride())


def parts_reference(mesh, src, dst, full):
    """DTensor's own src -> dst of `full` moved as chimera moves it: a complex tensor as its real
    and imaginary parts (each float64), a bool one as uint8."""
    if full.dtype.is_complex:
        real, imag = (from_parts(mesh, src, part.double()).redistribute(mesh, dst).to_local()
                      for part in (full.real, full.imag))
        return torch.complex(real, imag).to(full.dtype)
    return from_parts(mesh, src, full.to(torch.uint8)).redistribute(mesh, dst).to_local().bool()


CARRIED = [(src, dst, dtype) for dtype in (torch.complex64, torch.complex128, torch.bool) for src, dst in TRANSITIONS
           if dtype != torch.bool or not any(isinstance(p, Partial) for p in src)]


@pytest.mark.parametrize("src,dst,dtype", CARRIED,
                         ids=lambda v: str(v) if isinstance(v, torch.dtype) else "".join(str(p) for p in v))
def test_complex_and_bool_move_as_parts(world, mesh, src, dst, dtype):
    """Element types chimera has none of move as one it has: complex as (real, imaginary) pairs,
    a Partial sum reduced pair by pair, bool as bytes; equal to DTensor's own moving the parts."""
    rank, n, gloo = world
    values = torch.arange(8 * 12).reshape(8, 12) % 13 - 6
    full = torch.complex(values.double(), (values * 7 % 5).double()).to(dtype) if dtype.is_complex else values.bool()
    d = from_parts(mesh, src, full)
    bytes_of(d, dst)  # planned by chimera
    ct.reset_stats()
    ours = ct.redistribute(d, dst)
    planned = ct.stats()
    expect = parts_reference(mesh, src, dst, full)
    ok = tuple(ours.placements) == dst and ours.dtype == dtype and torch.equal(ours.to_local(), expect) and (
        planned["planned"], planned["fallback"]) == (1, 0)
    agree(ok, gloo, f"{src}->{dst} {dtype}: {ours.to_local()} vs {expect}, stats {planned}")


def norm_partial(order):
    from torch.distributed.tensor._ops._math_ops import _NormPartial

    return _NormPartial(order)


NORM_TRANSITIONS = [(("N", "N"), (R, R)), (("N", "N"), (S0, S1)), (("N", R), (R, S0)), (("N", "N"), ("N", R)),
                    (("N", S1), (R, S1)), (("N", "N"), ("N", "N")), ((R, R), ("N", R)), ((R, "N"), ("N", R)),
                    (("N", R), ("N", "N")), ((R, S0), ("N", S1))]


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("src,dst", NORM_TRANSITIONS, ids=lambda t: "".join(str(p) for p in t))
def test_partial_norms_match_dtensor(world, mesh, src, dst, order):
    """DTensor's partial p-norm (gradient clipping's, reduced by DTensor one mesh dim after the
    other, a p-th root each): one chimera plan of x^p, a sum over every axis it reduces, one p-th
    root; a replicated axis split into norms as DTensor splits it; equal to DTensor's own up to
    the rounding of its extra roots."""
    rank, n, gloo = world
    src, dst = (tuple(norm_partial(order) if p == "N" else p for p in t) for t in (src, dst))
    full = torch.arange(8 * 12, dtype=torch.float64).reshape(8, 12) % 7 + 1
    # Each member of a partial axis holds its own part: (coordinate + 1) times the tensor.
    local = local_part(full, mesh, src) * math.prod(
        c + 1 for c, p in zip(mesh.get_coordinate(), src) if isinstance(p, Partial))
    d = DTensor.from_local(local, mesh, src, run_check=False, shape=full.shape, stride=full.stride())
    target = DTensorSpec(mesh, dst, tensor_meta=d._spec.tensor_meta)  # noqa: SLF001
    # Where DTensor's op dispatcher meets them (DTensor.redistribute refuses Replicate -> Partial).
    ct.reset_stats()
    ours = routing._routed_local(local, d._spec, target)  # noqa: SLF001
    planned = ct.stats()
    ref = routing._ORIGINAL_LOCAL(local, d._spec, target)  # noqa: SLF001
    ok = torch.allclose(ours, ref, rtol=1e-12, atol=0) and (planned["planned"], planned["fallback"]) == (1, 0)
    agree(ok, gloo, f"{src}->{dst}: {ours} vs {ref}, stats {planned}")


SCALAR_TRANSITIONS = [((P, P), (R, R)), ((P, R), (R, R)), (("N", "N"), (R, R)), ((R, R), ("N", R)),
                      ((R, "N"), ("N", R))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("src,dst", SCALAR_TRANSITIONS, ids=lambda t: "".join(str(p) for p in t))
def test_scalars_match_dtensor(world, mesh, src, dst, dtype):
    """A 0-dim tensor (a loss, a gradient norm) moves as one element of a 1-dim one; equal to
    DTensor's own (within 1e-6 where a norm's roots differ)."""
    rank, n, gloo = world
    src, dst = (tuple(norm_partial(2) if p == "N" else p for p in t) for t in (src, dst))
    part = math.prod(c + 1 for c, p in zip(mesh.get_coordinate(), src) if isinstance(p, Partial))
    local = torch.tensor(3.0 * part, dtype=dtype)
    spec = DTensor.from_local(local, mesh, src, run_check=False, shape=torch.Size(()), stride=())._spec  # noqa: SLF001
    target = DTensorSpec(mesh, dst, tensor_meta=spec.tensor_meta)
    ct.reset_stats()
    ours = routing._routed_local(local, spec, target)  # noqa: SLF001
    planned = ct.stats()
    ref = routing._ORIGINAL_LOCAL(local, spec, target)  # noqa: SLF001
    ok = ours.shape == ref.shape == () and torch.allclose(ours, ref, rtol=1e-6, atol=0) and (
        planned["planned"], planned["fallback"]) == (1, 0)
    agree(ok, gloo, f"{src}->{dst} {dtype}: {ours} vs {ref}, stats {planned}")


def test_what_chimera_does_not_reduce_falls_back(world, mesh):
    """A partial bool, a complex max, partial norms of two orders, beside a plain partial, or made
    from a shard, a norm of integers: Unplannable, each with its reason (DTensor's own runs)."""
    rank, n, gloo = world
    n2, n3 = norm_partial(2), norm_partial(3)
    full = torch.arange(8 * 12, dtype=torch.float64).reshape(8, 12) % 7 + 1
    cases = [
        (full.bool(), (P, R), (R, R), "partial bool"),
        (full.to(torch.complex64), (Partial("max"), R), (R, R), r"complex Partial\(max\)"),
        (full, (n2, n3), (R, R), "orders"),
        (full, (n2, P), (R, R), "beside another partial"),
        (full, (S0, R), (n2, R), "made from S"),
        (full.long(), (n2, R), (R, R), "int64"),
    ]
    failures = []
    for tensor, src, dst, reason in cases:
        d = DTensor.from_local(local_part(tensor, mesh, src), mesh, src, run_check=False, shape=tensor.shape,
                               stride=tensor.stride())
        try:
            bytes_of(d, dst)
            failures.append(f"{src}->{dst} {tensor.dtype} planned")
        except routing.Unplannable as why:
            if not re.search(reason, str(why)):
                failures.append(f"{src}->{dst} {tensor.dtype}: {why}")
    agree(not failures, gloo, "; ".join(failures))


@pytest.mark.parametrize("dst", [(R, R), (S1, S1), (S0, R), (S1, S0)], ids=lambda t: "".join(str(p) for p in t))
def test_nested_shard_order(world, mesh, dst):
    """A source whose dim 0 is split by mesh dim b first (outer), then a: chimera reads the
    order from the spec; the result equals the full tensor's and DTensor's own."""
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrderEntry, TensorMeta

    rank, n, gloo = world
    full = torch.arange(8 * 12, dtype=torch.float32).reshape(8, 12)
    a, b = mesh.get_coordinate()
    local = full.chunk(4, dim=0)[b * 2 + a].clone()
    spec = DTensorSpec(mesh, (S0, S0), TensorMeta(full.shape, full.stride(), full.dtype),
                       shard_order=(ShardOrderEntry(tensor_dim=0, mesh_dims=(1, 0)),))
    d = DTensor(local, spec, requires_grad=False)
    bytes_of(d, dst)  # planned by chimera
    ours = ct.redistribute(d, dst)
    expect = distribute_tensor(full, mesh, dst).to_local()
    ref = d.redistribute(mesh, dst).to_local()
    agree(torch.equal(ours.to_local(), expect) and torch.equal(ref, expect), gloo,
          f"nested order -> {dst}: {ours.to_local()} vs {expect}")


def test_host_transport(world, mesh):
    """The mesh's runtime runs on the transport the launch calls for: MPI under mpirun, gloo
    under torchrun."""
    rank, n, gloo = world
    expected = os.environ.get("CHIMERA_EXPECT_TRANSPORT", "mpi")
    name = routing.runtime_for(mesh).backend.name
    agree(name == expected, gloo, f"the mesh runtime runs on {name}, expected {expected}")


def local_part(full, mesh, placements):
    """This rank's part of `full` under Shard/Replicate `placements`, cut by its mesh coordinate
    (not by DTensor's collectives, whose groups order ranks by number)."""
    part = full
    for dim, p in enumerate(placements):
        if isinstance(p, Shard):
            part = part.chunk(mesh.size(dim), p.dim)[mesh.get_coordinate()[dim]]
    return part.contiguous()


ORDERS = {"scrambled": [[3, 1], [2, 0]], "column_major": [[0, 2], [1, 3]]}
ORDER_TRANSITIONS = [((S0, S1), (S1, S0)), ((S0, S1), (R, S0)), ((S0, S0), (R, R)), ((S1, R), (S0, S1))]


@pytest.mark.parametrize("order", ORDERS, ids=str)
def test_mesh_ranks_in_any_order(world, order):
    """A 2x2 DeviceMesh over the ranks in any order: every result is the exact part of the full
    tensor at the rank's coordinate, each transition planned by chimera."""
    rank, n, gloo = world
    mesh = DeviceMesh("cpu", torch.tensor(ORDERS[order]), mesh_dim_names=("x", "y"))
    full = torch.arange(8 * 12, dtype=torch.float32).reshape(8, 12)
    results = []
    for src, dst in ORDER_TRANSITIONS:
        d = DTensor.from_local(local_part(full, mesh, src), mesh, src, run_check=False, shape=full.shape,
                               stride=full.stride())
        ct.reset_stats()
        ours = ct.redistribute(d, dst)
        results.append(torch.equal(ours.to_local(), local_part(full, mesh, dst)) and ct.stats()["planned"] == 1)
    agree(all(results), gloo, f"mesh {ORDERS[order]}: {results}")


@pytest.mark.parametrize("src,dst", [((S0,), (S1,)), ((P,), (R,)), ((P,), (S0,))],
                         ids=lambda t: "".join(str(p) for p in t))
def test_sub_mesh(world, mesh, src, dst):
    """On mesh["b"] (ranks {0, 1} and {2, 3}: two runtimes at once), equal to DTensor's own."""
    rank, n, gloo = world
    sub = mesh["b"]
    d = sub_mesh_input(sub, src[0], rank)
    ct.reset_stats()
    ours = ct.redistribute(d, dst)
    planned = ct.stats()["planned"]
    ref = d.redistribute(sub, dst)
    agree(torch.equal(ours.to_local(), ref.to_local()) and planned == 1, gloo,
          f"{src}->{dst} on the sub-mesh b: planned {planned}")


def test_gloo_mesh_groups(world, mesh):
    """The gloo mesh backend: a group not created is InvalidArgument naming it; ranks asking for
    different new groups all fail with Mismatch and none is made; a second backend over the same
    mesh meets in fresh store keys and reduces exactly along each axis."""
    rank, n, gloo = world
    if os.environ.get("CHIMERA_EXPECT_TRANSPORT") != "gloo":
        pytest.skip("the gloo mesh backend is the transport of launches without MPI (torchrun)")
    from chimera.torch.backend import mesh_backend

    ranks = mesh.mesh.flatten().tolist()
    results = []
    for _ in range(2):
        backend = mesh_backend("a=2,b=2", ranks)
        with pytest.raises(chimera.InvalidArgument, match="gloo group of axes b .* was not created"):
            backend.all_reduce(torch.ones(3), axes="b")
        with pytest.raises(chimera.Mismatch, match="create different gloo groups"):
            backend.create_groups(["a", "b"] if rank == n - 1 else ["a"])
        with pytest.raises(chimera.InvalidArgument, match="gloo group of axes a .* was not created"):
            backend.all_reduce(torch.ones(3), axes="a")
        backend.create_groups(["a", "b"])
        x = torch.full((5,), float(rank + 1))
        a, b = mesh.get_coordinate()
        along_a = backend.all_reduce(x.clone(), axes="a")  # ranks b and b + 2
        along_b = backend.all_reduce(x.clone(), axes="b")  # ranks 2a and 2a + 1
        whole = backend.all_reduce(x.clone())
        results.append(torch.equal(along_a, torch.full((5,), float(b + 1 + b + 3))) and torch.equal(
            along_b, torch.full((5,), float(2 * a + 1 + 2 * a + 2))) and torch.equal(whole, torch.full((5,), 10.0)))
        backend.close()
    agree(all(results), gloo, f"gloo mesh groups: {results}")
