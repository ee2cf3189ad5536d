# SPDX-License-Identifier: Apache-2.0
# Misused routed handles from Python: a dispatch's handle given to another exchange, a handle
# that outlives its exchange (closed, then collected, then a new exchange made in its place), and
# an exchange whose backend is closed. Each is InvalidArgument on the calling rank, before any
# message, and the exchange's own calls go on working. scripts/sanitize.sh runs this file with
# the extension built under AddressSanitizer, so that a misuse that reached memory would fail.
import gc

import numpy as np
import pytest

import chimera

pytestmark = pytest.mark.mpi

H = 4


def routing(rank, size, k, seed):
    """This rank's T = 2 * size tokens: ids [T, k] over E = 2 * size experts, weights, x."""
    rng = np.random.default_rng(seed + rank)
    tokens, experts = 2 * size, 2 * size
    ids = np.array([rng.choice(experts, k, replace=False) for _ in range(tokens)], np.int64)
    weights = (rng.integers(1, 5, (tokens, k)) * 0.25).astype(np.float32)
    x = rng.integers(-8, 8, (tokens, H)).astype(np.float32)
    return ids, weights, x


def exchange(backend, size, k, program):
    return chimera._chimera.RoutedExchange(backend, 2 * size, k, H, program=program)


def forward(ex, handle, x):
    """receive and combine on `handle` with the experts as identity: y = sum_k w x = x sum_k w."""
    rows = handle.rows
    recv_x, recv_e, recv_w = np.empty((rows, H), np.float32), np.empty(rows, np.int64), np.empty(rows, np.float32)
    ex.receive(handle, recv_x, recv_e, recv_w)
    y = np.empty_like(x)
    ex.combine(recv_x, recv_w, handle, y)
    return y


@pytest.fixture(scope="module")
def backend(world):
    _, size = world
    with chimera.mpi_backend(f"ep={size}") as b:
        yield b


def misuses(ex, handle, tokens):
    """Every call of `ex` that takes a handle, given `handle`, with arrays the handle's sizes fit."""
    rows = handle.rows
    rows_of = lambda n: np.zeros((n, H), np.float32)  # noqa: E731
    return {
        "receive": lambda: ex.receive(handle, rows_of(rows), np.zeros(rows, np.int64), np.zeros(rows, np.float32)),
        "combine": lambda: ex.combine(rows_of(rows), np.zeros(rows, np.float32), handle, rows_of(tokens)),
        "combine_backward": lambda: ex.combine_backward(rows_of(tokens), rows_of(rows), np.zeros(rows, np.float32),
                                                        handle, rows_of(rows), np.zeros(rows, np.float32)),
        "dispatch_backward": lambda: ex.dispatch_backward(rows_of(rows), np.zeros(rows, np.float32), handle,
                                                          rows_of(tokens), None),
    }


def test_a_handle_of_another_exchange_is_refused(world, backend):
    rank, size = world
    first, second = exchange(backend, size, 1, "per_expert"), exchange(backend, size, 2, "fused")
    ids, weights, x = routing(rank, size, 2, seed=10)
    ids1, weights1 = np.ascontiguousarray(ids[:, :1]), np.ascontiguousarray(weights[:, :1])
    handle = first.dispatch(x, ids1, weights1, x.shape[0])
    for call in misuses(second, handle, x.shape[0]).values():
        with pytest.raises(chimera.InvalidArgument, match="another routed exchange"):
            call()
    # Its own exchange still takes it, and the other one its own handles.
    np.testing.assert_array_equal(forward(first, handle, x), x * weights1)
    own = second.dispatch(x, ids, weights, x.shape[0])
    np.testing.assert_array_equal(forward(second, own, x), x * weights.sum(axis=1, keepdims=True))


def test_a_handle_that_outlives_its_exchange_is_refused(world, backend):
    rank, size = world
    ids, weights, x = routing(rank, size, 2, seed=20)
    first = exchange(backend, size, 2, "fused")
    handle = first.dispatch(x, ids, weights, x.shape[0])
    rows = handle.rows
    first.close()
    with pytest.raises(chimera.InvalidArgument, match="closed"):
        forward(first, handle, x)
    del first
    gc.collect()
    # A new exchange with the same options (its memory may well be the old one's) is another one.
    again = exchange(backend, size, 2, "fused")
    assert handle.rows == rows
    for call in misuses(again, handle, x.shape[0]).values():
        with pytest.raises(chimera.InvalidArgument, match="another routed exchange"):
            call()
    own = again.dispatch(x, ids, weights, x.shape[0])
    np.testing.assert_array_equal(forward(again, own, x), x * weights.sum(axis=1, keepdims=True))


def test_an_exchange_whose_backend_is_closed_is_refused(world):
    rank, size = world
    ids, weights, x = routing(rank, size, 2, seed=30)
    with chimera.mpi_backend(f"ep={size}") as b:
        ex = exchange(b, size, 2, "fused")
        handle = ex.dispatch(x, ids, weights, x.shape[0])
    with pytest.raises(chimera.InvalidArgument, match="closed"):
        ex.dispatch(x, ids, weights, x.shape[0])
    for call in misuses(ex, handle, x.shape[0]).values():
        with pytest.raises(chimera.InvalidArgument, match="closed"):
            call()
