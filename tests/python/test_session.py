# SPDX-License-Identifier: Apache-2.0
# The Session on torch CPU tensors: the scenarios recorded call by call and consumed, fused
# and unfused, against the NumPy reference; the window context manager and the window cache;
# consume by byte range; and the errors of a recording (expired handles, wrong buffers).
import numpy as np
import pytest
import torch

import chimera

from reference import as_f64, local_box, local_empty, logical_tensor, scenario_input, scenarios_for

pytestmark = pytest.mark.mpi


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        cases = scenarios_for(chimera.world()[1])
        metafunc.parametrize("scenario", cases, ids=[f"{c[0]}[{c[1]}]" for c in cases])


def consumed_part(final, consume, rank, spec, tensor):
    """The part of the final value's buffer the consume declaration fixes: consume's box within final's."""
    f_off, _ = final.rank_box(rank, spec)
    c_off, c_ext = consume.rank_box(rank, spec)
    index = tuple(slice(c - f, c - f + e) for c, f, e in zip(c_off, f_off, c_ext))
    return as_f64(tensor)[index]


def record_chain(session, scenario, rank, spec, full, dtype):
    """Registers the scenario's input and records its ops one by one; returns (last handle, layouts)."""
    _, mesh_text, from_text, chain, _, _ = scenario
    mesh = chimera.Mesh(mesh_text)
    layout = chimera.Layout(from_text, mesh)
    handle = session.tensor(scenario_input(layout, rank, spec, full, "torch", dtype), layout, spec=spec)
    for op in chain.split(","):
        after = layout.after(op, spec)
        in_place = op.startswith(("allreduce", "broadcast"))
        out = None if in_place else local_empty(after, rank, spec, "torch", dtype)
        handle = session.record(handle, op, out)
        assert session.layout_of(handle) == after
        layout = after
    return handle, layout


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_scenario_session_fused_equals_unfused(scenario, dtype):
    _, mesh_text, _, _, consume_text, shape = scenario
    mesh = chimera.Mesh(mesh_text)
    with chimera.mpi_backend(mesh) as backend:
        rank = backend.rank
        spec = chimera.TensorSpec(shape, dtype)
        consume = chimera.Layout(consume_text, mesh)
        full = logical_tensor(shape)
        results = {}
        for fusion in (False, True):
            session = chimera.Session(backend, fusion=fusion)
            handle, final = record_chain(session, scenario, rank, spec, full, dtype)
            tensor = handle.tensor
            session.consume(handle, consume)
            results[fusion] = None if tensor is None else consumed_part(final, consume, rank, spec, tensor)
            stats = session.stats()
            assert stats["windows"] == 1 and stats["recorded_calls"] == len(scenario[3].split(","))
            assert stats["bytes_sent"] <= stats["bytes_as_recorded"]
            if not fusion:
                assert stats["fused_chains"] == 0
            elif scenario[0] == "tp_sp":  # AllReduce + own slice: fused into a ReduceScatter by bytes alone
                assert stats["fused_chains"] == 1 and stats["bytes_sent"] < stats["bytes_as_recorded"]
        if consume.holds(rank):
            expected = local_box(consume, rank, spec, full)
            np.testing.assert_array_equal(results[False], expected)
            np.testing.assert_array_equal(results[True], expected)


@pytest.fixture(scope="module")
def tp_backend(world):
    _, size = world
    with chimera.mpi_backend(f"tp={size}") as backend:
        yield backend


def test_window_context_manager_and_cache(tp_backend):
    size = tp_backend.mesh.size
    rank = tp_backend.rank
    session = chimera.Session(tp_backend)
    for step in range(3):
        x = torch.full((size * 2, 3), float(rank + step))
        with session.window():
            t = session.tensor(x, chimera.Layout("tp=P", tp_backend.mesh))
            session.all_reduce(t, "tp")
        expected = sum(r + step for r in range(size))
        assert torch.equal(x, torch.full((size * 2, 3), float(expected)))
    stats = session.stats()
    assert stats["windows"] == 3 and stats["window_cache_hits"] == 2


def test_options_are_named_as_the_constructor_takes_them(tp_backend):
    """Every keyword of Session() reads back under its own name from Session.options."""
    session = chimera.Session(tp_backend, fusion=False, check_every_window=True, prepared_plan_limit=7, per_rank=True)
    options = session.options
    assert options["fusion"] is False and options["check_every_window"] is True
    assert options["prepared_plan_limit"] == 7 and options["per_rank"] is True
    session.close()


def test_cost_model_defaults_to_the_backends_own(tp_backend):
    """Without topology=, a session on MPI prices with the host preset for its ranks; topology= names
    another; an unknown one is an error naming it."""
    size = tp_backend.mesh.size
    for cost, name in ((None, "host" if size == 8 else f"host:{size}"), ("bytes", "bytes")):
        session = chimera.Session(tp_backend, topology=cost)
        assert session.options["topology"] == name
        session.close()
    with pytest.raises(chimera.InvalidArgument, match="no-such-topology"):
        chimera.Session(tp_backend, topology="no-such-topology")


def test_window_is_not_flushed_on_exception(tp_backend):
    session = chimera.Session(tp_backend)
    x = torch.ones(tp_backend.mesh.size)
    with pytest.raises(KeyError):
        with session.window():
            t = session.tensor(x, chimera.Layout("tp=P", tp_backend.mesh))
            session.all_reduce(t, "tp")
            raise KeyError("framework error")
    assert session.stats()["windows"] == 0
    session.flush()  # every rank runs the recorded window now
    assert torch.equal(x, torch.full_like(x, tp_backend.mesh.size))


def test_consume_by_byte_range(tp_backend):
    size = tp_backend.mesh.size
    rank = tp_backend.rank
    session = chimera.Session(tp_backend)
    rows = 2 * size
    x = torch.arange(rows * 4, dtype=torch.float32).reshape(rows, 4) + rank
    t = session.tensor(x, chimera.Layout("tp=P", tp_backend.mesh))
    t = session.all_reduce(t, "tp")
    # Each rank reads its own block of rows: chimera turns AllReduce + that read into a ReduceScatter.
    block = x.numel() * 4 // size
    session.consume(t, offset=rank * block, nbytes=block)
    reference = (np.arange(rows * 4).reshape(rows, 4) * size + sum(range(size))).astype(np.float64)
    mine = slice(rank * rows // size, (rank + 1) * rows // size)
    np.testing.assert_array_equal(x.numpy()[mine], reference[mine])
    assert session.stats()["fused_chains"] == 1


def test_recording_errors(tp_backend):
    size = tp_backend.mesh.size
    session = chimera.Session(tp_backend)
    layout = chimera.Layout("tp=P", tp_backend.mesh)
    x = torch.ones(size * 2, 4)
    t = session.tensor(x, layout)
    with pytest.raises(ValueError, match=r"'out' must hold 32 bytes \(the local tensor of layout tp=S0"):
        session.reduce_scatter(t, "tp", 0, torch.empty(3, 4))
    with pytest.raises(ValueError, match="'out' must have dtype float"):
        session.reduce_scatter(t, "tp", 0, torch.empty(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="works in place"):
        session.record(t, "allreduce:tp", torch.empty(2, 4))
    with pytest.raises(ValueError, match="C-contiguous"):
        session.tensor(torch.ones(4, size * 2).t(), layout)
    with pytest.raises(ValueError, match="must hold"):
        session.tensor(torch.ones(size), layout, spec=chimera.TensorSpec((size * 2, 4), "f32"))
    with pytest.raises(chimera.InvalidArgument, match="allgather"):
        session.all_gather(t, "tp", 0, torch.empty(size * 2 * size, 4))
    with pytest.raises(chimera.InvalidArgument, match="layout or a byte range"):
        session.consume(t)
    t = session.all_reduce(t, "tp")
    session.flush()
    with pytest.raises(chimera.InvalidArgument, match="expired"):
        session.all_reduce(t, "tp")
    assert torch.equal(x, torch.full_like(x, size))


def test_a_rank_recording_other_calls_gets_mismatch_everywhere(tp_backend):
    size = tp_backend.mesh.size
    rank = tp_backend.rank
    session = chimera.Session(tp_backend)
    x = torch.ones(size * (4 if rank == 0 else 2))
    t = session.tensor(x, chimera.Layout("tp=P", tp_backend.mesh))
    session.all_reduce(t, "tp")
    with pytest.raises(chimera.Mismatch):
        session.flush()


@pytest.fixture(scope="module")
def grid_backend(world):
    _, size = world
    with chimera.mpi_backend(f"dp=2,tp={size // 2}") as backend:
        yield backend


def test_every_recording_call(grid_backend):
    """slice, broadcast, send_backward, all_to_all and wait, each checked against the reference."""
    mesh = grid_backend.mesh
    rank = grid_backend.rank
    tp = mesh.shape[1]
    spec = chimera.TensorSpec((4 * tp, 2 * tp), "f32")
    full = logical_tensor(spec.shape)
    session = chimera.Session(grid_backend)

    # slice: R on tp -> S0 on tp (local), then all_to_all S0 -> S1.
    rep = chimera.Layout.replicated(mesh)
    x = session.tensor(torch.from_numpy(full.astype(np.float32)), rep)
    sliced_layout = rep.after("slice:tp:0", spec)
    sliced = session.slice(x, "tp", 0, local_empty(sliced_layout, rank, spec, "torch", "f32"))
    moved_layout = sliced_layout.after("alltoall:tp:0:1", spec)
    moved = session.all_to_all(sliced, "tp", 0, 1, local_empty(moved_layout, rank, spec, "torch", "f32"))
    session.wait(moved)
    np.testing.assert_array_equal(as_f64(sliced.tensor), local_box(sliced_layout, rank, spec, full))
    np.testing.assert_array_equal(as_f64(moved.tensor), local_box(moved_layout, rank, spec, full))

    # broadcast over tp from group index tp-1: every member ends with that member's values.
    mine = torch.full((4,), float(rank))
    b = session.broadcast(session.tensor(mine, chimera.Layout("tp=R", mesh), spec=chimera.TensorSpec((4,), "f32")),
                          "tp", root=tp - 1)
    assert b.tensor is mine
    session.flush()
    assert torch.equal(mine, torch.full((4,), float(mesh.group_ranks(rank, "tp")[tp - 1])))

    # send_backward: stage 1 of dp hands its tensor to stage 0 (the backward pass's hand-off).
    source = chimera.Layout("dp=@1,tp=S1", mesh)
    target = source.after("send:dp:backward", spec)
    assert target == chimera.Layout("dp=@0,tp=S1", mesh)
    inp = scenario_input(source, rank, spec, full, "torch", "f32")
    out = local_empty(target, rank, spec, "torch", "f32")
    h = session.send_backward(session.tensor(inp, source, spec=spec), "dp", out)
    session.flush()
    if target.holds(rank):
        np.testing.assert_array_equal(as_f64(h.tensor), local_box(target, rank, spec, full))
    else:
        assert h.tensor is None


def test_dlpack_round_trip_results_land_in_the_producer(grid_backend):
    """A NumPy view of a torch tensor (and back) is communicated in place: both see the result."""
    t = torch.zeros(8)
    n = np.from_dlpack(t)
    n[:] = grid_backend.rank
    grid_backend.all_reduce(n, axes="dp+tp")
    size = grid_backend.mesh.size
    assert torch.equal(t, torch.full((8,), float(sum(range(size)))))
    back = torch.from_dlpack(n)
    grid_backend.broadcast(back, root=0, axes="dp+tp")
    assert back.data_ptr() == t.data_ptr()


def test_tp_sp_example_of_the_docs(grid_backend):
    """The TP+SP example of docs/python.md, on this run's mesh."""
    backend, session = grid_backend, chimera.Session(grid_backend)
    tp_size = backend.mesh.shape[1]
    tp = backend.mesh.coordinates(backend.rank)[1]
    seq, hidden = 64 * tp_size, 16
    y = torch.full((seq, hidden), float(backend.rank))
    h = session.tensor(y, chimera.Layout("tp=P", backend.mesh))
    h = session.all_reduce(h, "tp")
    session.consume(h, chimera.Layout("tp=S0", backend.mesh))
    shard = y[tp * seq // tp_size:(tp + 1) * seq // tp_size]
    full = torch.empty(seq, hidden)
    with session.window():
        session.all_gather(session.tensor(shard, chimera.Layout("tp=S0", backend.mesh)), "tp", 0, full)
    assert session.stats()["fused_chains"] == 1
    expected = float(sum(backend.mesh.group_ranks(backend.rank, "tp")))
    assert torch.equal(full, torch.full((seq, hidden), expected))


@pytest.fixture(scope="module")
def stage_backend(world):
    _, size = world
    with chimera.mpi_backend(f"pp=2,tp={size // 2}") as backend:
        backend.create_groups(["tp", "pp"])
        yield backend


@pytest.mark.parametrize("back", [False, True], ids=["forward", "backward"])
def test_per_rank_hand_off_fused_equals_unfused(stage_backend, back):
    """Per-rank recording: the sending stage records all_reduce(tp) + send (or send_backward), the
    receiving stage only recv (or recv_backward) + a read of the whole tensor. Fused and unfused give
    the same, exact result, on the first (planned) and the second (cached) window."""
    backend = stage_backend
    mesh, rank = backend.mesh, backend.rank
    tp = mesh.shape[1]
    spec = chimera.TensorSpec((8 * tp, 16), "f32")
    src, dst = (1, 0) if back else (0, 1)
    stage = mesh.coordinates(rank)[0]
    source = chimera.Layout(f"pp=@{src},tp=P", mesh)
    target = chimera.Layout(f"pp=@{dst},tp=R", mesh)
    senders = [r for r in range(mesh.size) if mesh.coordinates(r)[0] == src]
    expected = torch.full((8 * tp, 16), float(sum(senders))) + len(senders) * torch.arange(16.0)
    received, counters = {}, {}
    for fusion in (False, True):
        session = chimera.Session(backend, fusion=fusion, per_rank=True, topology="bytes")  # fuses this small hand-off
        for step in range(2):
            if stage == src:
                x = torch.full((8 * tp, 16), float(rank)) + torch.arange(16.0)
                h = session.all_reduce(session.tensor(x, source, spec=spec), "tp")
                (session.send_backward if back else session.send)(h, "pp")
                session.flush()
            else:
                out = torch.full((8 * tp, 16), -1.0)
                h = (session.recv_backward if back else session.recv)(out, target, "pp", spec=spec)
                session.consume(h, target)
                received[(fusion, step)] = out
        counters[fusion] = session.stats()
        session.close()
    assert counters[True]["fused_chains"] >= 1, counters
    for stats in counters.values():
        # Per-rank recording counts this rank's bytes and agreements (its first window is agreed).
        assert stats["agreements"] >= 1, stats
        if stage == src:
            assert stats["rank_bytes_sent"] > 0 and stats["rank_bytes_as_recorded"] > 0, stats
    if stage == dst:
        for key, out in received.items():
            assert torch.equal(out, expected), key


def test_per_rank_recv_outside_per_rank_mode_is_an_error(stage_backend):
    session = chimera.Session(stage_backend)
    target = chimera.Layout("pp=@1,tp=R", stage_backend.mesh)
    out = torch.empty(8, 4) if target.holds(stage_backend.rank) else None
    with pytest.raises(chimera.InvalidArgument):
        session.recv(out, target, "pp", spec=chimera.TensorSpec((8, 4), "f32"))
    session.close()


def test_a_failed_recording_on_one_rank_gives_mismatch_everywhere(tp_backend):
    size = tp_backend.mesh.size
    session = chimera.Session(tp_backend)
    layout = chimera.Layout("tp=P", tp_backend.mesh)
    session.all_reduce(session.tensor(torch.ones(size), layout), "tp")  # the window holds a call on every rank
    t = session.tensor(torch.ones(size * 2, 3), layout)
    out = torch.empty(3 if tp_backend.rank == 0 else 2, 3)  # rank 0: the wrong size
    if tp_backend.rank == 0:
        with pytest.raises(ValueError, match="must hold"):
            session.reduce_scatter(t, "tp", 0, out)
    else:
        session.reduce_scatter(t, "tp", 0, out)
    with pytest.raises(chimera.Mismatch):
        session.flush()
