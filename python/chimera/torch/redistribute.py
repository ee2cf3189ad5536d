# SPDX-License-Identifier: Apache-2.0
"""Fused DTensor redistribution: one chimera plan across all mesh dimensions.

``redistribute(dtensor, placements)`` returns what ``dtensor.redistribute(dtensor.device_mesh,
placements)`` returns, moving the data with the plan chimera's planner picks for the whole
transition (``Partial`` over several mesh dims reduced once, ``Shard(i) -> Shard(j)`` as one
AllToAll, nested shard orders as box intersections) instead of DTensor's one collective per
mesh dim. ``with fused_redistribute(): ...`` routes ``DTensor.redistribute`` through it.
Transitions chimera does not plan fall back to DTensor's own with a debug log line. Under
autograd the gradient goes back through chimera too.
"""

from __future__ import annotations

import contextlib
import logging

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec

import chimera
from chimera import placements as _placements

log = logging.getLogger("chimera.torch")

_RUNTIMES: dict = {}
_PLANNABLE: dict = {}


class Unplannable(chimera.Unsupported):
    """A transition (or tensor) chimera does not plan; callers fall back to DTensor."""


def mesh_axis_names(mesh) -> list[str]:
    """chimera's axis names for a DeviceMesh: its dim names, else d0, d1, ..."""
    names = mesh.mesh_dim_names
    return list(names) if names else [f"d{i}" for i in range(mesh.ndim)]


class MeshRuntime:
    """chimera's Executor on an MPI backend laid out as one DeviceMesh: Python over the package
    `chimera`, the DTensor's local tensors crossing by DLPack."""

    def __init__(self, mesh_text: str):
        self.mesh = chimera.Mesh(mesh_text)
        self.executor = chimera.Executor(chimera.mpi_backend(self.mesh))

    def plan_bytes(self, shape, dtype, source: str, target: str) -> tuple[int, int, str]:
        """(bytes over all ranks, of the busiest rank, plan text) of source -> target; nothing runs.
        chimera.InvalidArgument / chimera.Unsupported when chimera does not plan it."""
        plan = chimera.plan_redistribution(self.mesh, list(shape), dtype, source, target)
        return plan["bytes"], plan["max_rank_bytes"], plan["plan"]

    def redistribute(self, local: torch.Tensor, shape, source: str, target: str) -> torch.Tensor:
        """This rank's part of the tensor of logical `shape` moved from `source` to `target`
        (collective over the world): a new tensor, the local tensor of `target`."""
        spec = chimera.TensorSpec(list(shape), local.dtype)
        out = torch.empty(chimera.Layout(target, self.mesh).local_shape(spec), dtype=local.dtype)
        return self.executor.redistribute(local, source, target, out, spec=spec)


def runtime_for(mesh) -> MeshRuntime:
    """The MeshRuntime laid out as `mesh`; created once, collectively over the world.
    Unplannable when the mesh does not cover the world in order."""
    world = dist.get_world_size()
    ranks = mesh.mesh.flatten().tolist()
    if ranks != list(range(world)):
        raise Unplannable(f"mesh ranks {ranks} are not the world 0..{world - 1} in row-major order")
    text = ",".join(f"{name}={int(size)}" for name, size in zip(mesh_axis_names(mesh), mesh.mesh.shape))
    if text not in _RUNTIMES:
        _RUNTIMES[text] = MeshRuntime(text)
    return _RUNTIMES[text]


def layout_text(mesh, placements, shard_order=None) -> str:
    """chimera's layout text for DTensor placements on `mesh` ("dp=P,tp=S0"; a tensor dim split
    by several mesh dims as "a+b=S0", outer first, in DTensor's shard order: ``shard_order``
    entries, or the order ``_StridedShard`` placements encode). The conversion itself is
    chimera.placements'. Raises Unplannable for placements chimera has no counterpart of."""
    if any(type(p).__name__ == "_StridedShard" for p in placements):
        if shard_order:
            raise Unplannable(f"_StridedShard placements {placements} with a shard order {shard_order}")
        try:
            placements, shard_order = DTensorSpec._normalize_placements_into_shard_order(  # noqa: SLF001
                tuple(placements), mesh)
        except ValueError as error:
            raise Unplannable(str(error)) from None
    order = {entry.tensor_dim: list(entry.mesh_dims) for entry in shard_order or ()}
    try:
        text = _placements.layout_text(mesh_axis_names(mesh), placements, order)
    except (chimera.InvalidArgument, chimera.Unsupported) as error:
        raise Unplannable(str(error)) from None
    return text or f"{mesh_axis_names(mesh)[0]}=R"


def _source_order(dtensor):
    spec = dtensor._spec  # noqa: SLF001 (the shard order lives only there)
    return None if getattr(spec, "use_strided_shard_as_shard_order", False) else getattr(spec, "shard_order", None)


def plan(dtensor, placements):
    """(runtime, source layout text, target layout text, normalised placements) for a
    transition, or Unplannable. Pure: no communication besides creating the runtime once."""
    mesh = dtensor.device_mesh
    placements = tuple(Shard(p.dim % dtensor.ndim) if type(p) is Shard else p for p in placements)
    if len(placements) != mesh.ndim:
        raise Unplannable(f"{len(placements)} placements for a {mesh.ndim}-dim mesh")
    if dtensor.device_mesh.device_type != "cpu":
        raise Unplannable(f"device {dtensor.device_mesh.device_type} (chimera's MPI backend runs CPU tensors)")
    source = layout_text(mesh, dtensor.placements, _source_order(dtensor))
    target = layout_text(mesh, placements)
    runtime = runtime_for(mesh)
    # Whether chimera plans it, remembered per transition: a planning pass per call would cost
    # more than many a small redistribution (the executor caches the plan itself).
    key = (id(runtime), tuple(dtensor.shape), dtensor.dtype, source, target)
    if key not in _PLANNABLE:
        try:
            runtime.plan_bytes(dtensor.shape, dtensor.dtype, source, target)
            _PLANNABLE[key] = None
        except (chimera.InvalidArgument, chimera.Unsupported) as error:
            _PLANNABLE[key] = str(error)
    if _PLANNABLE[key] is not None:
        raise Unplannable(_PLANNABLE[key])
    return runtime, source, target, placements


def redistribute(dtensor, placements, *, _dtensor_redistribute=None):
    """`dtensor` redistributed to `placements` on its own mesh by one chimera plan; equal in value
    and placements to DTensor's own result (see docs/torch.md for where reductions may differ).
    Falls back to DTensor's own redistribute, with a debug log line, for what chimera does not plan."""
    own = _dtensor_redistribute or _ORIGINAL_REDISTRIBUTE
    try:
        runtime, source, target, placements = plan(dtensor, placements)
    except Unplannable as why:
        log.debug("chimera.torch.redistribute: DTensor's own for %s -> %s: %s", dtensor.placements, placements, why)
        return own(dtensor, dtensor.device_mesh, placements)
    if source == target:
        return dtensor
    if dtensor.requires_grad and torch.is_grad_enabled():
        return _FusedRedistribute.apply(dtensor, placements, runtime, source, target)
    return _run(dtensor, placements, runtime, source, target)


def _run(dtensor, placements, runtime, source, target):
    local = dtensor._local_tensor.detach().contiguous()  # noqa: SLF001 (to_local() would record autograd)
    out = runtime.redistribute(local, dtensor.shape, source, target)
    return DTensor.from_local(out, dtensor.device_mesh, placements, run_check=False, shape=dtensor.shape,
                              stride=dtensor.stride())


def _gradient_placements(grad_placements, source_placements):
    """Where the gradient goes back to: the source placements, with a Partial the gradient is
    not partial on turned into Replicate (the gradient of a sum is the same on every member),
    as DTensor's own backward does."""
    return tuple(Replicate() if isinstance(t, Partial) and not isinstance(c, Partial) else t
                 for c, t in zip(grad_placements, source_placements))


class _FusedRedistribute(torch.autograd.Function):
    """The redistribution inside autograd: its backward moves the gradient back to the source
    placements (again through chimera when it plans that transition)."""

    @staticmethod
    def forward(ctx, dtensor, placements, runtime, source, target):  # noqa: D102
        ctx.source_placements = tuple(dtensor.placements)
        return _run(dtensor, placements, runtime, source, target)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        back = _gradient_placements(grad.placements, ctx.source_placements)
        return redistribute(grad, back), None, None, None, None


def bytes_of(dtensor, placements) -> tuple[int, int, str]:
    """(bytes over all ranks, bytes of the busiest rank, plan text) chimera's plan sends for this
    transition. Raises Unplannable when chimera does not plan it."""
    runtime, source, target, _ = plan(dtensor, placements)
    return runtime.plan_bytes(dtensor.shape, dtensor.dtype, source, target)


_ORIGINAL_REDISTRIBUTE = DTensor.redistribute


@contextlib.contextmanager
def fused_redistribute():
    """Routes ``DTensor.redistribute`` (same mesh) through chimera for the duration."""

    def routed(self, device_mesh=None, placements=None, *args, **kwargs):
        if (device_mesh is None or device_mesh == self.device_mesh) and placements is not None and not args \
                and not kwargs:
            return redistribute(self, placements)
        return _ORIGINAL_REDISTRIBUTE(self, device_mesh, placements, *args, **kwargs)

    DTensor.redistribute = routed
    try:
        yield
    finally:
        DTensor.redistribute = _ORIGINAL_REDISTRIBUTE
