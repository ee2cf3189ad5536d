# SPDX-License-Identifier: Apache-2.0
# chimera.torch is a layer over the package `chimera`: its compiled part _C holds only the c10d
# process group, shares the one libchimera chimera._chimera loads, and raises the exceptions of
# chimera's hierarchy. One process, no communication.
import pytest
import torch.distributed as dist

import chimera
import chimera.torch  # noqa: F401  (registers the backend, loading _C)
from chimera.torch import _extension

# What the process group needs from Python: creating it, MPI's world and thread level, CUDA support, teardown.
PROCESS_GROUP_API = {"create_backend", "named_process_group", "mpi_world", "mpi_thread_multiple", "cuda_supported",
                     "finalize_mpi"}


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
        _extension.load().create_backend(5, 2, [0, 1], 2, "group", store)
    with pytest.raises(chimera.InvalidArgument, match="3 global ranks"):
        _extension.load().create_backend(0, 2, [0, 1, 2], 2, "group", store)

