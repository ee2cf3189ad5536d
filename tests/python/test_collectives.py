# SPDX-License-Identifier: Apache-2.0
# The plain collectives on NumPy arrays and torch CPU tensors over the MPI backend, checked
# element by element against a NumPy reference computed from every member's input, for each
# dtype (f32 f64 f16 i32, and bf16 on torch), reduce op and group (one axis, the other, both).
import os

import numpy as np
import pytest

import chimera

from reference import as_f64, empty, make, rank_values, reduce

pytestmark = pytest.mark.mpi

COUNT = 24  # divisible by every group size of the meshes used (1, 2, 4, 8)
CASES = ([("numpy", d) for d in ("f32", "f64", "f16", "i32")]
         + [("torch", d) for d in ("f32", "f64", "f16", "bf16", "i32")])
GROUPS = ["tp", "dp", "dp+tp"]


@pytest.fixture(scope="module")
def backend(world):
    _, size = world
    b = chimera.init(f"dp=2,tp={size // 2}", backend="mpi")
    yield b
    b.close()


def group_of(backend, axes):
    return backend.mesh.group_ranks(backend.rank, axes)


@pytest.mark.parametrize("axes", GROUPS)
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max", "avg"])
@pytest.mark.parametrize("lib,dtype", CASES)
def test_all_reduce(backend, lib, dtype, op, axes):
    group = group_of(backend, axes)
    tensor = make(lib, dtype, rank_values(backend.rank, COUNT, op))
    result = backend.all_reduce(tensor, op=op, axes=axes)
    assert result is tensor  # in place, in the caller's tensor
    expected = reduce([rank_values(r, COUNT, op) for r in group], op, dtype == "i32")
    np.testing.assert_array_equal(as_f64(tensor), expected)


@pytest.mark.parametrize("axes", GROUPS)
@pytest.mark.parametrize("lib,dtype", CASES)
def test_all_reduce_out_of_place(backend, lib, dtype, axes):
    group = group_of(backend, axes)
    tensor = make(lib, dtype, rank_values(backend.rank, COUNT))
    before = as_f64(tensor)
    out = empty(lib, dtype, (COUNT,))
    assert backend.all_reduce(tensor, axes=axes, out=out) is out
    np.testing.assert_array_equal(as_f64(out), reduce([rank_values(r, COUNT) for r in group], "sum", False))
    np.testing.assert_array_equal(as_f64(tensor), before)


@pytest.mark.parametrize("axes", GROUPS)
@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("lib,dtype", CASES)
def test_reduce_scatter(backend, lib, dtype, op, axes):
    group = group_of(backend, axes)
    n = len(group)
    g = group.index(backend.rank)
    tensor = make(lib, dtype, rank_values(backend.rank, COUNT, op))
    out = empty(lib, dtype, (COUNT // n,))
    assert backend.reduce_scatter(tensor, out, op=op, axes=axes) is out
    full = reduce([rank_values(r, COUNT, op) for r in group], op, dtype == "i32")
    np.testing.assert_array_equal(as_f64(out), full.reshape(n, -1)[g])


@pytest.mark.parametrize("axes", GROUPS)
@pytest.mark.parametrize("lib,dtype", CASES)
def test_all_gather(backend, lib, dtype, axes):
    group = group_of(backend, axes)
    tensor = make(lib, dtype, rank_values(backend.rank, COUNT))
    out = empty(lib, dtype, (len(group), COUNT))
    backend.all_gather(tensor, out, axes=axes)
    np.testing.assert_array_equal(as_f64(out), np.stack([rank_values(r, COUNT) for r in group]))


@pytest.mark.parametrize("axes", GROUPS)
@pytest.mark.parametrize("lib,dtype", CASES)
def test_all_to_all(backend, lib, dtype, axes):
    group = group_of(backend, axes)
    n = len(group)
    g = group.index(backend.rank)
    tensor = make(lib, dtype, rank_values(backend.rank, COUNT))
    out = empty(lib, dtype, (COUNT,))
    backend.all_to_all(tensor, out, axes=axes)
    # Block j of member i's input lands in block i of member j's output.
    expected = np.concatenate([rank_values(r, COUNT).reshape(n, -1)[g] for r in group])
    np.testing.assert_array_equal(as_f64(out), expected)


@pytest.mark.parametrize("axes", GROUPS)
@pytest.mark.parametrize("lib,dtype", CASES)
def test_broadcast(backend, lib, dtype, axes):
    group = group_of(backend, axes)
    root = len(group) - 1
    tensor = make(lib, dtype, rank_values(backend.rank, COUNT))
    backend.broadcast(tensor, root=root, axes=axes)
    np.testing.assert_array_equal(as_f64(tensor), rank_values(group[root], COUNT))


@pytest.mark.parametrize("lib,dtype", CASES)
def test_send_recv(backend, lib, dtype):
    rank = backend.rank
    peer = rank ^ 1
    mine = make(lib, dtype, rank_values(rank, COUNT))
    theirs = empty(lib, dtype, (COUNT,))
    if rank % 2 == 0:
        backend.send(mine, peer)
        backend.recv(theirs, peer)
    else:
        backend.recv(theirs, peer)
        backend.send(mine, peer)
    np.testing.assert_array_equal(as_f64(theirs), rank_values(peer, COUNT))


def test_multidimensional_tensors_keep_their_shape(backend):
    import torch

    tensor = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    backend.all_reduce(tensor, axes="dp+tp")
    assert tensor.shape == (2, 3, 4)
    size = backend.mesh.size
    np.testing.assert_array_equal(tensor.numpy(), np.arange(24, dtype=np.float32).reshape(2, 3, 4) * size)


@pytest.mark.skipif(os.environ.get("CHIMERA_CHECK_ARGS") != "1", reason="needs CHIMERA_CHECK_ARGS=1 (set by ctest)")
def test_mismatched_counts_raise_mismatch_on_every_rank(backend):
    count = 8 if backend.rank == 0 else 4
    with pytest.raises(chimera.Mismatch):
        backend.all_reduce(np.ones(count, np.float32), axes="dp+tp")
    # The backend still works afterwards.
    x = np.ones(4, np.float32)
    backend.all_reduce(x, axes="dp+tp")
    np.testing.assert_array_equal(x, np.full(4, backend.mesh.size, np.float32))


def test_bad_tensors_raise_value_error_naming_them(backend):
    n = backend.mesh.group_size("tp")
    with pytest.raises(ValueError, match=r"reduce_scatter: tensor 'output' must hold 16 bytes"):
        backend.reduce_scatter(np.ones(4 * n, np.float32), np.ones(5, np.float32), axes="tp")
    with pytest.raises(ValueError, match=r"all_gather: tensor 'output' must have dtype float"):
        backend.all_gather(np.ones(4, np.float32), np.ones(4 * n, np.float64), axes="tp")
    with pytest.raises(ValueError, match=r"all_reduce: tensor 'tensor' must be C-contiguous"):
        backend.all_reduce(np.ones((4, 4), np.float32).T)
    with pytest.raises(ValueError, match=r"all_to_all: tensor 'output' must hold"):
        backend.all_to_all(np.ones(4 * n, np.float32), np.ones(4, np.float32), axes="tp")
    with pytest.raises(chimera.InvalidArgument, match="unknown mesh axis"):
        backend.all_reduce(np.ones(4, np.float32), axes="ep")
    with pytest.raises(chimera.InvalidArgument, match="reduce op"):
        backend.all_reduce(np.ones(4, np.float32), op="median")


def test_closed_backend_raises(world):
    _, size = world
    b = chimera.mpi_backend(f"world={size}")
    executor = chimera.Executor(b)
    b.close()
    with pytest.raises(chimera.InvalidArgument, match="closed"):
        b.all_reduce(np.ones(4, np.float32))
    with pytest.raises(chimera.InvalidArgument, match="closed"):
        executor.redistribute(np.ones(4, np.float32), "world=R", "world=R", np.ones(4, np.float32))


def test_mpi4py_world_communicator(world):
    from mpi4py import MPI

    _, size = world
    with chimera.init(f"world={size}", comm=MPI.COMM_WORLD) as b:
        x = np.full(3, MPI.COMM_WORLD.Get_rank(), np.float64)
        b.all_reduce(x)
        assert x[0] == sum(range(size))
    with pytest.raises(chimera.Unsupported, match="MPI_COMM_WORLD"):
        chimera.init(f"world={size // 2}", comm=MPI.COMM_WORLD.Split(MPI.COMM_WORLD.Get_rank() % 2))


@pytest.mark.skipif(os.environ.get("CHIMERA_CHECK_ARGS") != "1", reason="needs CHIMERA_CHECK_ARGS=1 (set by ctest)")
def test_a_bad_tensor_on_one_rank_fails_every_rank(backend):
    """Rank 0 passes a non-contiguous tensor: it raises ValueError, its peers a chimera error, nobody waits."""
    n = backend.mesh.group_size("dp+tp")
    good = np.ones(4 * n, np.float32)
    bad = np.ones(8 * n, np.float32)[::2]
    calls = [
        lambda t: backend.all_reduce(t, axes="dp+tp"),
        lambda t: backend.reduce_scatter(t, np.ones(4, np.float32), axes="dp+tp"),
        lambda t: backend.all_gather(t[:4].copy() if t.flags.c_contiguous else t[:4], np.ones(4 * n, np.float32),
                                     axes="dp+tp"),
        lambda t: backend.all_to_all(t, np.ones(4 * n, np.float32), axes="dp+tp"),
        lambda t: backend.broadcast(t, root=0, axes="dp+tp"),
    ]
    for call in calls:
        if backend.rank == 0:
            with pytest.raises(ValueError, match="C-contiguous"):
                call(bad)
        else:
            with pytest.raises(chimera.Error):
                call(good.copy())
    x = np.ones(4, np.float32)
    backend.all_reduce(x, axes="dp+tp")  # the group is in step again
    np.testing.assert_array_equal(x, np.full(4, n, np.float32))
