# SPDX-License-Identifier: Apache-2.0
"""chimera: fused collectives for hybrid-parallel LLM training, from Python.

Tensors cross by DLPack (``__dlpack__``): torch tensors and NumPy arrays on the CPU with the MPI
backend, CUDA tensors with the NCCL backend. Nothing is copied: a tensor that is not contiguous,
has the wrong dtype, lives on the wrong device or has the wrong size raises ``ValueError``.
Errors of the library raise the exception named after their status (``chimera.InvalidArgument``,
``chimera.Mismatch``, ``chimera.Timeout``, ...), all subclasses of ``chimera.Error``.

    import chimera
    backend = chimera.init("dp=2,tp=4", backend="mpi")
    backend.all_reduce(tensor, axes="tp")
"""
from __future__ import annotations

import atexit as _atexit
import json as _json
from pathlib import Path as _Path
from typing import Any, Optional, Sequence

from . import _nccl


def _built_with_cuda() -> bool:
    # Written by the build next to the extension; absent means "ask the extension after loading".
    marker = _Path(__file__).with_name("_build_info.json")
    try:
        return bool(_json.loads(marker.read_text()).get("cuda", False))
    except (OSError, ValueError):
        return False


_nccl.preload(_built_with_cuda())

from . import _chimera  # noqa: E402  (after the NCCL choice)
from . import placements as _placements  # noqa: E402
from ._chimera import (  # noqa: E402
    Backend,
    BackendError,
    Error,
    Executor,
    Internal,
    InvalidArgument,
    Layout,
    Mesh,
    Mismatch,
    Session,
    SessionWindow,
    TensorHandle,
    TensorSpec,
    Timeout,
    Unsupported,
    dtype_name,
    has_cuda,
    has_mpi,
    nccl_unique_id,
    plan,
    plan_redistribution,
    world,
)
from .placements import Partial, Replicate, Shard, Stage  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Backend", "BackendError", "Error", "Executor", "Internal", "InvalidArgument", "Layout", "Mesh", "Mismatch",
    "Partial", "Replicate", "Session", "SessionWindow", "Shard", "Stage", "TensorHandle", "TensorSpec", "Timeout",
    "Unsupported", "dtype_name", "has_cuda", "has_mpi", "init", "mpi_backend", "nccl_backend", "nccl_library",
    "nccl_unique_id", "plan", "plan_redistribution", "world",
]


def _from_placements(mesh: Any, placements: Sequence[Any]) -> Layout:
    """The Layout with one placement per mesh axis (chimera's, DTensor's, or text), in mesh order.

    Several axes sharding one dim nest in mesh order (earlier axis outer), as DTensor's do
    (chimera.placements is the converter)."""
    mesh = mesh if isinstance(mesh, Mesh) else Mesh(mesh)
    text = _placements.layout_text(mesh.axis_names, placements)
    return Layout(text, mesh) if text else Layout.replicated(mesh)


def _to_placements(self: Layout) -> list:
    """One placement object per mesh axis (Replicate, Shard, Partial, Stage), in mesh order.

    Raises Unsupported when a dim's splits do not nest in mesh order, which placements alone can't say."""
    result = [_placements.from_tuple(t) for t in self._placement_tuples()]
    names = self.mesh.axis_names
    for dim in {p.dim for p in result if isinstance(p, Shard)}:
        order = self.split_axes(dim)
        if order != sorted(order, key=names.index):
            raise Unsupported(
                f"layout {self} nests dim {dim} as {'+'.join(order)}, not in mesh order: "
                "per-axis placements can't express that")
    return result


def _to_dtensor_placements(self: Layout) -> list:
    """The same as DTensor placement objects (imports torch); Stage has none: InvalidArgument."""
    return _placements.to_dtensor(_to_placements(self))


Layout.from_placements = staticmethod(_from_placements)
Layout.to_placements = _to_placements
Layout.to_dtensor_placements = _to_dtensor_placements


def _check_world_comm(comm: Any) -> None:
    from mpi4py import MPI

    if comm.Compare(MPI.COMM_WORLD) not in (MPI.IDENT, MPI.CONGRUENT):
        raise Unsupported(
            "chimera's MPI backend runs over MPI_COMM_WORLD; a backend on another communicator is not supported yet")


def mpi_backend(mesh: Any, comm: Any = None, ranks: Optional[Sequence[int]] = None) -> Backend:
    """The MPI backend (host memory) for ``mesh`` over MPI_COMM_WORLD (``comm``: an mpi4py
    communicator congruent to it, optional), or over the world ranks ``ranks`` alone: mesh
    coordinate i (row-major) is world rank ``ranks[i]``, in any order, and only those ranks call
    it (a sub-mesh). Initialises MPI unless mpi4py or the caller did."""
    if comm is not None:
        _check_world_comm(comm)
    return _chimera._mpi_backend(mesh, None if ranks is None else [int(r) for r in ranks])


def nccl_backend(mesh: Any, *, unique_id: Optional[bytes] = None, rank: Optional[int] = None,
                 device: Optional[int] = None) -> Backend:
    """The NCCL backend (CUDA device memory). Without ``unique_id``: over MPI_COMM_WORLD, one GPU per
    rank. With it (from ``nccl_unique_id()`` on one rank, shared by you): rank ``rank`` of the mesh
    on CUDA device ``device``, no MPI."""
    if unique_id is None:
        return _chimera._nccl_backend_mpi(mesh)
    if rank is None or device is None:
        raise InvalidArgument("nccl_backend(unique_id=...) needs rank= and device=")
    return _chimera._nccl_backend(mesh, rank, device, unique_id)


def init(mesh: Any, backend: str = "mpi", **kwargs: Any) -> Backend:
    """Creates the backend ``"mpi"`` or ``"nccl"`` for ``mesh`` (a Mesh or ``"pp=2,tp=4"``) and
    makes the mesh the default of ``Layout("...")``. Keyword arguments go to the factory."""
    mesh = mesh if isinstance(mesh, Mesh) else Mesh(mesh)
    if backend == "mpi":
        result = mpi_backend(mesh, **kwargs)
    elif backend == "nccl":
        result = nccl_backend(mesh, **kwargs)
    else:
        raise InvalidArgument(f"unknown backend '{backend}' (mpi, nccl)")
    _chimera._set_default_mesh(mesh)
    return result


def nccl_library() -> Optional[str]:
    """Path of the libnccl this process runs on (None when none is loaded)."""
    return _nccl.loaded_library()


# Native objects are freed newest first and MPI finalised (if chimera started it) before the
# interpreter tears modules down.
_atexit.register(_chimera._shutdown)
