# SPDX-License-Identifier: Apache-2.0
# chimera.torch is a layer over the package `chimera`: its compiled part _C holds only the c10d
# process group and its gloo transport (also as a chimera Backend over a mesh), shares the one
# libchimera chimera._chimera loads, and raises the exceptions of chimera's hierarchy.
# One process, no communication.
import datetime

import pytest
import torch
import torch.distributed as dist

import chimera
import chimera.torch  # noqa: F401  (registers the backend, loading _C)
from chimera.torch import _extension

# What the process group needs from Python: creating it, MPI's world and thread level, the MPI rendezvous's
# bounded all-gather, CUDA support, teardown; and its gloo transport as chimera's Backend over a mesh.
PROCESS_GROUP_API = {"create_backend", "named_process_group", "mpi_world", "mpi_all_gather_bytes",
                     "mpi_thread_multiple", "cuda_supported", "finalize_mpi", "gloo_mesh_backend"}


def test_one_libchimera_is_loaded():
    _extension.load()
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libchimera" in line}
    assert len(paths) == 1, f"libchimera loaded from {sorted(paths)} (chimera._chimera and _C must share one)"


def test_the_extension_is_only_the_process_group():
    names = {name for name in dir(_extension.load()) if not name.startswith("_")}
    assert names == PROCESS_GROUP_API


def test_extension_errors_are_chimeras():
    store = dist.HashStore()
    with pytest.raises(chimera.InvalidArgument, match="group rank 5 of 2"):
        _extension.load().create_backend(5, 2, [0, 1], 2, "group", store, 1000, False)
    with pytest.raises(chimera.InvalidArgument, match="3 global ranks"):
        _extension.load().create_backend(0, 2, [0, 1, 2], 2, "group", store, 1000, False)
    with pytest.raises(chimera.InvalidArgument, match="a timeout of 0 ms"):
        _extension.load().create_backend(0, 1, [0], 1, "group", store, 0, False)



def _gloo_group(store):
    def make(prefix, rank, size, timeout_ms):
        return dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, size,
                                     datetime.timedelta(milliseconds=timeout_ms))

    return make


def test_gloo_mesh_backend_reaches_chimera_once():
    """A one-rank mesh on gloo: its Backend is adopted by chimera once, runs, and names errors."""
    store = dist.HashStore()
    extension = _extension.load()
    with pytest.raises(chimera.InvalidArgument, match="rank 2 is not one of the mesh's ranks 0,1"):
        extension.gloo_mesh_backend("a=2", [0, 1], 2, store, _gloo_group(store), 10000)
    capsule = extension.gloo_mesh_backend("a=1,b=1", [0], 0, store, _gloo_group(store), 10000)
    backend = chimera._chimera._adopt_backend(capsule)  # noqa: SLF001
    with pytest.raises(chimera.InvalidArgument, match="adopted already"):
        chimera._chimera._adopt_backend(capsule)  # noqa: SLF001
    x = torch.arange(6, dtype=torch.float32)
    assert backend.name == "gloo" and torch.equal(backend.all_reduce(x.clone(), axes="b"), x)
    assert torch.equal(backend.all_reduce(x.clone()), x)
    backend.close()


def test_gloo_mesh_backend_waits_a_bounded_time():
    """A mesh whose other rank never comes: Timeout after the given bound, naming the mesh."""
    store = dist.HashStore()
    with pytest.raises(chimera.Timeout, match="gloo mesh backend of mesh a=2 over torch ranks 0,1"):
        _extension.load().gloo_mesh_backend("a=2", [0, 1], 0, store, _gloo_group(store), 500)
