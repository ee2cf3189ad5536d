# SPDX-License-Identifier: Apache-2.0
"""How one DTensor transition runs on chimera (``Route``): the DeviceMesh as a chimera mesh and
host backend (``MeshRuntime``), the placements as layouts, the element type chimera moves (complex
as (real, imaginary) pairs, bool as bytes) and DTensor's partial p-norms reduced in one plan.
``Unplannable`` says why chimera does not plan a transition; chimera.torch.redistribute then
leaves it to DTensor.
"""

from __future__ import annotations

import math

import torch
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec

import chimera
from chimera import placements as _placements

from . import backend as _backend

_RUNTIMES: dict = {}
_ROUTES: dict = {}


class Unplannable(chimera.Unsupported):
    """A transition (or tensor) chimera does not plan; callers fall back to DTensor."""


def mesh_axis_names(mesh) -> list[str]:
    """chimera's axis names for a DeviceMesh: its dim names, else d0, d1, ..."""
    names = mesh.mesh_dim_names
    return list(names) if names else [f"d{i}" for i in range(mesh.ndim)]


class MeshRuntime:
    """chimera's Executor on a host Backend laid out as one DeviceMesh (see
    chimera.torch.backend.mesh_backend: MPI under an MPI launch, gloo otherwise): Python over
    the package `chimera`, the DTensor's local tensors crossing by DLPack. `ranks`: the torch
    global ranks of the mesh in row-major order. Plans are priced by the executor's own choice,
    as a Session on the backend prices them: ``CHIMERA_TOPOLOGY`` when set, else the backend's
    own model (``host:N``), which picks fewer steps over fewer bytes where the steps cost more
    (``.topology`` names it)."""

    def __init__(self, mesh_text: str, ranks):
        self.mesh = chimera.Mesh(mesh_text)
        self.backend = _backend.mesh_backend(mesh_text, ranks)
        self.executor = chimera.Executor(self.backend)
        self.topology = self.executor.topology

    def plan_bytes(self, shape, dtype, source: str, target: str) -> tuple[int, int, str]:
        """(bytes over all ranks, of the busiest rank, plan text) of the plan source -> target runs;
        nothing runs. chimera.InvalidArgument / chimera.Unsupported when chimera does not plan it."""
        plan = self.executor.plan_redistribution(list(shape), dtype, source, target)
        return plan["bytes"], plan["max_rank_bytes"], plan["plan"]

    def local_shape(self, spec, layout: str) -> list[int]:
        """The shape of this rank's local tensor of `spec` (a chimera.TensorSpec) under `layout`."""
        return chimera.Layout(layout, self.mesh).local_shape(spec)

    def redistribute(self, local: torch.Tensor, spec, source: str, target: str, out_shape) -> torch.Tensor:
        """This rank's part of the tensor of `spec` (a chimera.TensorSpec) moved from `source` to
        `target` (collective over the mesh's ranks): a new tensor of `out_shape`, the local tensor
        of `target`."""
        out = torch.empty(out_shape, dtype=local.dtype)
        return self.executor.redistribute(local, source, target, out, spec=spec)


def runtime_for(mesh) -> MeshRuntime:
    """The MeshRuntime laid out as `mesh`, over the mesh's own ranks in its order (any sub-mesh,
    any order); created once, collectively over those ranks, and cached by ranks and axis names."""
    ranks = tuple(int(r) for r in mesh.mesh.flatten().tolist())
    text = ",".join(f"{name}={int(size)}" for name, size in zip(mesh_axis_names(mesh), mesh.mesh.shape))
    key = (ranks, text)
    if key not in _RUNTIMES:
        _RUNTIMES[key] = MeshRuntime(text, ranks)
    return _RUNTIMES[key]


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


def _shard_order(spec):
    """DTensor's shard order of a spec, or None when its _StridedShard placements encode it."""
    return None if getattr(spec, "use_strided_shard_as_shard_order", False) else getattr(spec, "shard_order", None)


def _normalised(placements, ndim: int) -> tuple:
    return tuple(Shard(p.dim % ndim) if type(p) is Shard else p for p in placements)


# Element types chimera has no type for, moved exactly as one it has: a complex tensor as its
# (real, imaginary) pairs (torch.view_as_real: one more, last, dim of 2), a bool tensor as its
# bytes. A complex sum or average reduces pair by pair, as the complex one does; no bool reduces.
_CARRIERS = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64,
             torch.bool: torch.uint8}
_COMPLEX_REDUCE_OPS = ("sum", "avg")


def _is_partial(placement) -> bool:
    return isinstance(placement, Partial)


def _is_norm_partial(placement) -> bool:
    """DTensor's partial p-norm (``_NormPartial``, a Partial("sum") subclass of its math ops): the
    value is (sum over the axis of x^p)^(1/p), reduced as x^p, a sum, then ^(1/p)."""
    return type(placement).__name__ == "_NormPartial"


def _norm_of(mesh, source, target, dtype) -> tuple[tuple, tuple, float | None, tuple[float, ...]]:
    """(source, target placements with every partial norm a plain sum, the order p of the partial
    norms the transition reduces or None, the divisors that split a replicated value into partial
    norms). A replicated axis the target holds as a partial norm is split as DTensor splits it,
    dividing by n^(1/p), and is a partial norm thereafter. Unplannable where chimera's one reduction
    would not give DTensor's value: norms of two orders, a norm beside another partial, a norm
    made from a shard, an order without a p-th root, a non-float dtype."""
    norms = [p for p in (*source, *target) if _is_norm_partial(p)]
    if not norms:
        return tuple(source), tuple(target), None, ()
    orders = {float(p.norm_type) for p in norms}
    if len(orders) > 1:
        raise Unplannable(f"partial norms of orders {sorted(orders)} in one transition")
    order = orders.pop()
    if not math.isfinite(order) or order == 0:
        raise Unplannable(f"a partial norm of order {order} (no p-th root to take)")
    if not dtype.is_floating_point:
        raise Unplannable(f"a partial norm of {dtype} tensors")
    if any(_is_partial(p) and not _is_norm_partial(p) for p in (*source, *target)):
        raise Unplannable("a partial norm beside another partial placement")
    source = list(source)
    partition = []
    for dim, (s, t) in enumerate(zip(source, target)):
        if _is_norm_partial(t) and not _is_norm_partial(s):
            if not isinstance(s, Replicate):
                raise Unplannable(f"a partial norm made from {s} (DTensor splits only a replicated value)")
            partition.append(math.pow(mesh.size(dim), 1 / order))  # DTensor's _partition_value
            source[dim] = t
    reduces = any(_is_norm_partial(s) and not _is_norm_partial(t) for s, t in zip(source, target))
    plain = Partial("sum")
    return (tuple(plain if _is_norm_partial(p) else p for p in source),
            tuple(plain if _is_norm_partial(p) else p for p in target), order if reduces else None, tuple(partition))


def _carrier_of(source, dtype) -> torch.dtype:
    """The dtype chimera moves a tensor of `dtype` as (the tensor's own, or _CARRIERS'), or
    Unplannable when the source's partial placements reduce what the carrier cannot."""
    carrier = _CARRIERS.get(dtype, dtype)
    ops = {p.reduce_op for p in source if _is_partial(p)}
    if dtype == torch.bool and ops:
        raise Unplannable("a partial bool tensor (chimera reduces no bool)")
    if dtype.is_complex and not ops <= set(_COMPLEX_REDUCE_OPS):
        raise Unplannable(f"a complex Partial({', '.join(sorted(ops))}) (chimera reduces complex pairs by "
                          f"{' and '.join(_COMPLEX_REDUCE_OPS)} only)")
    return carrier


class Route:
    """How chimera runs one transition of a tensor of `dtype` and logical `shape`: on `runtime`,
    from layout `source` to `target`, its local tensors moved as `carrier` elements (complex as
    pairs: one more dim; a 0-dim tensor as one element of a 1-dim one); a replicated value split
    into partial norms first (divided by each of `partition`) and, where the transition reduces
    partial p-norms, raised to `norm` before and to 1/`norm` after. Made once per transition:
    Unplannable when chimera does not plan it."""

    def __init__(self, runtime, shape, source: str, target: str, dtype: torch.dtype, carrier: torch.dtype,
                 norm: float | None = None, partition: tuple[float, ...] = ()):
        self.runtime, self.source, self.target = runtime, source, target
        self.dtype, self.carrier, self.norm, self.partition = dtype, carrier, norm, partition
        self.scalar = len(shape) == 0  # moved as a 1-dim tensor of one element
        carried = [*(shape or [1]), 2] if dtype.is_complex else list(shape or [1])
        try:
            self.spec = chimera.TensorSpec(carried, carrier)
            self.bytes = runtime.plan_bytes(carried, carrier, source, target)
            self.out_shape = runtime.local_shape(self.spec, target)
        except (chimera.InvalidArgument, chimera.Unsupported) as error:
            raise Unplannable(str(error)) from None

    @property
    def idle(self) -> bool:
        """Whether the local tensor stays as it is (the same layout, nothing to split)."""
        return self.source == self.target and not self.partition

    def run(self, local: torch.Tensor) -> torch.Tensor:
        """This rank's local tensor of `target`, moved from `source` by chimera (collective over
        the mesh). A still pending asynchronous result of DTensor's own collectives is waited for
        first."""
        if isinstance(local, AsyncCollectiveTensor):
            local = local.wait()
        local = local.detach().contiguous()
        if self.scalar:
            local = local.reshape(1)
        for divisor in self.partition:
            local = local / divisor
        if self.source == self.target:
            return local.reshape(()) if self.scalar else local
        if self.norm is not None:
            local = local**self.norm
        if self.dtype.is_complex:
            local = torch.view_as_real(local)
        elif self.carrier != self.dtype:
            local = local.view(self.carrier)
        out = self.runtime.redistribute(local, self.spec, self.source, self.target, self.out_shape)
        if self.dtype.is_complex:
            out = torch.view_as_complex(out)
        elif self.carrier != self.dtype:
            out = out.view(self.dtype)
        if self.norm is not None:
            out = out ** (1.0 / self.norm)
        return out.reshape(()) if self.scalar else out


def _route(current_spec, target_spec, dtype) -> Route:
    mesh = current_spec.mesh
    if target_spec.mesh != mesh:
        raise Unplannable("source and target are on different meshes")
    if mesh.device_type != "cpu":
        raise Unplannable(f"device {mesh.device_type} (chimera's host backends run CPU tensors)")
    if current_spec.tensor_meta is None:
        raise Unplannable("a spec without tensor metadata")
    ndim = len(current_spec.tensor_meta.shape)
    sources, targets, norm, partition = _norm_of(mesh, current_spec.placements, target_spec.placements, dtype)
    carrier = _carrier_of(sources, dtype)
    source = layout_text(mesh, _normalised(sources, ndim), _shard_order(current_spec))
    target = layout_text(mesh, _normalised(targets, ndim), _shard_order(target_spec))
    return Route(runtime_for(mesh), current_spec.tensor_meta.shape, source, target, dtype, carrier, norm, partition)


def plan_specs(current_spec, target_spec, dtype) -> Route:
    """The Route of a transition between two DTensorSpecs of one tensor of `dtype`, or
    Unplannable. Decided from metadata every rank of the mesh shares, so they all take the same
    path. Pure: no communication besides creating the mesh's runtime once. Remembered per
    transition (specs and dtype): converting the placements and planning at every call would cost
    more than many a small redistribution (the executor caches the plan itself)."""
    key = (current_spec, target_spec, dtype, *(getattr(spec, "use_strided_shard_as_shard_order", False)
                                              for spec in (current_spec, target_spec)))
    route = _ROUTES.get(key)
    if route is None:
        try:
            route = _route(current_spec, target_spec, dtype)
        except Unplannable as why:
            route = str(why)
        _ROUTES[key] = route
    if isinstance(route, str):
        raise Unplannable(route)
    return route


def plan(dtensor, placements) -> tuple[Route, tuple]:
    """(route, normalised placements) of a transition of `dtensor`, or Unplannable (see
    plan_specs)."""
    mesh = dtensor.device_mesh
    placements = _normalised(placements, dtensor.ndim)
    if len(placements) != mesh.ndim:
        raise Unplannable(f"{len(placements)} placements for a {mesh.ndim}-dim mesh")
    target_spec = DTensorSpec(mesh, placements, tensor_meta=dtensor._spec.tensor_meta)  # noqa: SLF001
    return plan_specs(dtensor._spec, target_spec, dtensor.dtype), placements  # noqa: SLF001
