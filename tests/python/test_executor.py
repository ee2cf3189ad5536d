# SPDX-License-Identifier: Apache-2.0
# Executor.run_chain on the six scenarios of the paper (and the same chains on other meshes):
# the fused and planned programs give exactly the unfused chain's result, and all three equal
# the NumPy reference; Executor.redistribute between layouts, checked the same way.
import os

import numpy as np
import pytest

import chimera

from reference import FLAT, as_f64, local_box, local_empty, logical_tensor, scenario_input, scenarios_for

pytestmark = pytest.mark.mpi


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        size = chimera.world()[1]
        cases = scenarios_for(size)
        metafunc.parametrize("scenario", cases, ids=[f"{c[0]}[{c[1]}]" for c in cases])


@pytest.mark.parametrize("lib,dtype", [("numpy", "f32"), ("torch", "bf16")])
def test_scenario_fused_equals_unfused(scenario, lib, dtype):
    _, mesh_text, from_text, chain, consume_text, shape = scenario
    mesh = chimera.Mesh(mesh_text)
    with chimera.mpi_backend(mesh) as backend:
        executor = chimera.Executor(backend)
        rank = backend.rank
        spec = chimera.TensorSpec(shape, dtype)
        source = chimera.Layout(from_text, mesh)
        consume = chimera.Layout(consume_text, mesh)
        full = logical_tensor(shape)
        results = {}
        for mode in ("baseline", "fused", "planned"):
            inp = scenario_input(source, rank, spec, full, lib, dtype)
            out = local_empty(consume, rank, spec, lib, dtype)
            returned = executor.run_chain(chain, inp, out, source, consume=consume, spec=spec, mode=mode)
            assert returned is out
            results[mode] = None if out is None else as_f64(out)
        if consume.holds(rank):
            expected = local_box(consume, rank, spec, full)
            np.testing.assert_array_equal(results["baseline"], expected)
            np.testing.assert_array_equal(results["fused"], results["baseline"])
            np.testing.assert_array_equal(results["planned"], results["baseline"])
        else:
            assert all(r is None for r in results.values())


REDISTRIBUTIONS = [
    ("tp=S0", "tp=S1"),
    ("dp=S0,tp=P", "dp+tp=S1"),
    ("dp=@0,tp=S0", "dp=@1,tp=R"),
    ("tp=S1", "dp=S0"),
]


@pytest.mark.parametrize("source,target", REDISTRIBUTIONS)
def test_redistribute(world, source, target):
    import torch

    _, size = world
    mesh = chimera.Mesh(f"dp=2,tp={size // 2}")
    with chimera.mpi_backend(mesh) as backend:
        rank = backend.rank
        executor = chimera.Executor(backend)
        spec = chimera.TensorSpec(FLAT, torch.float32)
        src = chimera.Layout(source, mesh)
        dst = chimera.Layout(target, mesh)
        full = logical_tensor(FLAT)
        inp = scenario_input(src, rank, spec, full, "torch", "f32")
        out = local_empty(dst, rank, spec, "torch", "f32")
        # The logical spec is derived from the local tensors (given only where neither is held).
        needs_spec = inp is None and out is None
        executor.redistribute(inp, src, dst, out, spec=spec if needs_spec else None)
        if out is not None:
            np.testing.assert_array_equal(as_f64(out), local_box(dst, rank, spec, full))
        assert executor.planning_passes >= 1


def test_run_chain_checks_every_buffer(world):
    _, size = world
    mesh = chimera.Mesh(f"tp={size}")
    with chimera.mpi_backend(mesh) as backend:
        executor = chimera.Executor(backend)
        spec = chimera.TensorSpec((size * 4, 8), "f32")
        inp = np.ones((size * 4, 8), np.float32)
        with pytest.raises(ValueError, match=r"'output' must hold 128 bytes \(the local tensor of layout tp=S0"):
            executor.run_chain("allreduce:tp", inp, np.zeros((5, 8), np.float32), "tp=P", consume="tp=S0")
        with pytest.raises(ValueError, match="'output' must have dtype float"):
            executor.run_chain("allreduce:tp", inp, np.zeros((4, 8), np.int32), "tp=P", consume="tp=S0")
        with pytest.raises(ValueError, match="'input' must hold"):
            executor.run_chain("allreduce:tp", inp[:2], np.zeros((4, 8), np.float32), "tp=P", consume="tp=S0",
                               spec=spec)
        with pytest.raises(chimera.InvalidArgument, match="allgather"):
            executor.run_chain("allgather:tp:0", inp, inp, "tp=P")
        with pytest.raises(chimera.InvalidArgument, match="mode"):
            executor.run_chain("allreduce:tp", inp, inp, "tp=P", mode="fastest")


def test_cost_model_is_the_backends_unless_named(world):
    """Given no cost, an executor prices with CHIMERA_TOPOLOGY's model, else its backend's own
    (host:N on MPI), as a Session does; plan_redistribution plans with that same model."""
    _, size = world
    mesh = chimera.Mesh(f"dp=2,tp={size // 2}")
    with chimera.mpi_backend(mesh) as backend:
        named = os.environ.get("CHIMERA_TOPOLOGY") or backend.default_topology
        assert backend.default_topology == f"host:{size}"
        executor = chimera.Executor(backend)
        assert executor.topology == chimera.Executor(backend, topology=named).topology
        assert "CHIMERA_TOPOLOGY" in os.environ or executor.topology.startswith("host")
        assert chimera.Executor(backend, topology="bytes").topology == "bytes"
        for source, target in REDISTRIBUTIONS:
            shape = [4 * size, 16]
            assert executor.plan_redistribution(shape, "f32", source, target) == chimera.plan_redistribution(
                mesh, shape, "f32", source, target, topology=named)
