# SPDX-License-Identifier: Apache-2.0
# The routed exchange of a pipeline stage's tokens (layout "pp=@k") from Python on NumPy arrays,
# mesh pp=2,ep=N/2: stage 0 dispatches and receives grad x and grad w, stage 1 receives, combines
# and returns the rows' gradients. Straight from the stage and after the hand-off both give the
# NumPy reference bit for bit, in f32 and f16 (small integers and quarter weights: every product
# and sum is exact, also rounded to 16 bits).
import os

import numpy as np
import pytest

import chimera

pytestmark = pytest.mark.mpi

K, H = 2, 6


def tokens_of(rank, experts, dtype=np.float32):
    """Stage-0 rank `rank`'s ids [T, K], weights [T, K], x [T, H] (rows and weights of `dtype`);
    ranks with rank % 3 == 1 hold none."""
    rng = np.random.default_rng(100 + rank)
    count = 0 if rank % 3 == 1 else 3 + rank
    ids = np.array([rng.choice(experts, K, replace=False) for _ in range(count)], np.int64).reshape(count, K)
    weights = (rng.integers(1, 5, (count, K)) * 0.25).astype(dtype)
    x = rng.integers(-8, 8, (count, H)).astype(dtype)
    return ids, weights, x


@pytest.fixture(scope="module")
def staged(world):
    _, size = world
    with chimera.mpi_backend(f"pp=2,ep={size // 2}") as backend:
        yield backend, size // 2


def run_stage(backend, experts, program, dtype):
    """This rank's side of one dispatch, combine and backwards; returns its outputs by role."""
    exchange = chimera._chimera.RoutedExchange(backend, experts, K, H, dtype=np.dtype(dtype).name,
                                               weight_dtype=np.dtype(dtype).name, group="ep", layout="pp=@0",
                                               program=program)
    assert exchange.straight_from_stage == (program == "fused")
    if exchange.role == "source":
        ids, weights, x = tokens_of(backend.rank, experts, dtype)
        handle = exchange.dispatch(x, ids, weights, x.shape[0])
        assert handle.rows == 0 and handle.tokens == x.shape[0]
        grad_x, grad_w = np.full_like(x, -1), np.full_like(weights, -1)
        exchange.dispatch_backward(None, None, handle, grad_x, grad_w)
        return {"grad_x": grad_x, "grad_w": grad_w}
    assert exchange.role == "experts"
    handle = exchange.dispatch(None, None, None, 0)
    rows = handle.rows
    recv_x, recv_e, recv_w = np.empty((rows, H), dtype), np.empty(rows, np.int64), np.empty(rows, dtype)
    exchange.receive(handle, recv_x, recv_e, recv_w)
    expert_out = recv_x * (recv_e[:, None] + 1).astype(dtype)
    y = np.full((handle.tokens, H), -1, dtype)
    exchange.combine(expert_out, recv_w, handle, y)
    grad_recv = recv_x * 2 + recv_e[:, None].astype(dtype)
    exchange.dispatch_backward(grad_recv, recv_e.astype(dtype), handle, None, None)
    return {"y": y}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("program", ["fused", "per_expert"])
def test_stage_dispatch_matches_reference(staged, program, dtype):
    backend, experts_ranks = staged
    experts = 2 * experts_ranks
    out = run_stage(backend, experts, program, dtype)
    rank = backend.rank
    if rank < experts_ranks:  # stage 0: grad x[t] = sum_k (2 x[t] + id_k), grad w[t, k] = id_k
        ids, _, x = tokens_of(rank, experts, dtype)
        np.testing.assert_array_equal(out["grad_x"], 2 * K * x + ids.sum(axis=1, keepdims=True).astype(dtype))
        np.testing.assert_array_equal(out["grad_w"], ids.astype(dtype))
    else:  # stage 1, the owner of its peer's tokens: y[t] = sum_k w[t, k] x[t] (id_k + 1)
        ids, weights, x = tokens_of(rank - experts_ranks, experts, dtype)
        expected = np.zeros_like(x)
        for k in range(K):
            expected += weights[:, k:k + 1] * (x * (ids[:, k:k + 1] + 1).astype(dtype))
        np.testing.assert_array_equal(out["y"], expected)


def test_stage_calls_outside_the_role_raise(staged):
    """Stage 0 holds no expert rows: its combine raises at once, without communicating."""
    backend, experts_ranks = staged
    experts = 2 * experts_ranks
    exchange = chimera._chimera.RoutedExchange(backend, experts, K, H, group="ep", layout="pp=@0")
    if exchange.role == "experts":
        exchange.dispatch(None, None, None, 0)
        return
    ids, weights, x = tokens_of(backend.rank, experts)
    handle = exchange.dispatch(x, ids, weights, x.shape[0])
    with pytest.raises(chimera.InvalidArgument, match="dispatch and dispatchBackward only"):
        exchange.combine(np.empty((0, H), np.float32), None, handle, np.empty_like(x))


def test_planned_program_is_priced_by_the_backends_model(staged, monkeypatch):
    """Given no topology, the planned program is priced as a Session on the backend prices it:
    CHIMERA_TOPOLOGY when set, else the backend's own model (host:N on MPI). On 8 ranks, E = 64,
    K = 8 and 64-element rows, that model keeps the hand-off where bytes alone send straight from
    the stage; a model that cannot be loaded fails creation naming it."""
    backend, experts_ranks = staged
    size = 2 * experts_ranks

    def straight(**kwargs):
        return chimera._chimera.RoutedExchange(backend, 64, 8, 64, group="ep", layout="pp=@0",
                                               **kwargs).straight_from_stage

    named = os.environ.get("CHIMERA_TOPOLOGY") or backend.default_topology
    assert straight() == straight(topology=named)
    if "CHIMERA_TOPOLOGY" not in os.environ and size == 8:
        assert straight(topology="bytes") and not straight()
    monkeypatch.setenv("CHIMERA_TOPOLOGY", "bytes")
    assert straight() == straight(topology="bytes")
    monkeypatch.setenv("CHIMERA_TOPOLOGY", "no-such-topology")
    with pytest.raises(chimera.InvalidArgument, match="routed exchange cost model 'no-such-topology'"):
        straight()
