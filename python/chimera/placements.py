# SPDX-License-Identifier: Apache-2.0
"""Per-mesh-axis placements and their mapping to and from DTensor's: the one converter.

A chimera Layout holds one placement per mesh axis. DTensor (``torch.distributed.tensor``) has
three of the four kinds: ``Replicate()``, ``Shard(d)`` and ``Partial(op)``; chimera adds
``Stage(k)`` (``@k``: only coordinate k of the axis holds the tensor, a pipeline stage). The
classes below mirror DTensor's names; ``Layout.from_placements`` also accepts DTensor's own
objects (recognised by exact class name, so torch is never imported here) and the text forms
(``"R"``, ``"S0"``, ``"P"``, ``"P(max)"``, ``"@1"``). ``chimera.torch`` converts DTensor
placements through this module too.

DTensor and chimera name one reduce op differently: DTensor's ``Partial("product")`` is
chimera's ``P(prod)``; the table below maps both ways. A DTensor placement chimera has no
counterpart of (``Partial("band")``, ``_MaskPartial``, ...) raises ``chimera.Unsupported``;
malformed input raises ``chimera.InvalidArgument``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from ._chimera import InvalidArgument, Unsupported

# DTensor's Partial reduce-op name -> chimera's (ReduceOp names, include/chimera/types.hpp).
_REDUCE_OP_FROM_DTENSOR = {"sum": "sum", "avg": "avg", "min": "min", "max": "max", "product": "prod"}
_REDUCE_OP_TO_DTENSOR = {chimera: dtensor for dtensor, chimera in _REDUCE_OP_FROM_DTENSOR.items()}


@dataclass(frozen=True)
class Replicate:
    """Every coordinate of the axis holds the same data (``R``)."""

    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True)
class Shard:
    """The axis splits tensor dimension ``dim`` (``S<dim>``)."""

    dim: int

    def __str__(self) -> str:
        return f"S{self.dim}"


@dataclass(frozen=True)
class Partial:
    """The value is the ``reduce_op``-reduction over the axis (``P`` / ``P(op)``; chimera's op
    names: sum, prod, min, max, avg)."""

    reduce_op: str = "sum"

    def __str__(self) -> str:
        return "P" if self.reduce_op == "sum" else f"P({self.reduce_op})"


@dataclass(frozen=True)
class Stage:
    """Only coordinate ``index`` of the axis holds the tensor (``@index``); DTensor has no equivalent."""

    index: int

    def __str__(self) -> str:
        return f"@{self.index}"


def _reduce_op(op: Any) -> str:
    """chimera's name of a Partial's reduce op given by DTensor's or chimera's name."""
    name = str(op).lower()
    if name in _REDUCE_OP_TO_DTENSOR:
        return name
    if name in _REDUCE_OP_FROM_DTENSOR:
        return _REDUCE_OP_FROM_DTENSOR[name]
    raise Unsupported(f"Partial({op}) has no chimera equivalent (reduce ops: {', '.join(_REDUCE_OP_FROM_DTENSOR)})")


def _unsupported(placement: Any) -> Unsupported:
    return Unsupported(
        f"placement {placement!r} ({type(placement).__name__}) has no chimera equivalent "
        "(Replicate, Shard(d), Partial(op), Stage(k) or the text R, S<d>, P, P(op), @k)")


def to_chimera(placement: Any) -> Any:
    """chimera's placement object for one placement: chimera's, DTensor's (Replicate, Shard,
    Partial; matched by exact class name, so their subclasses such as ``_MaskPartial`` and
    ``_StridedShard`` are refused) or text."""
    if isinstance(placement, (Replicate, Shard, Stage)):
        return placement
    if isinstance(placement, Partial):
        return Partial(_reduce_op(placement.reduce_op))
    if isinstance(placement, str):
        return placement
    name = type(placement).__name__
    if name == "Replicate":
        return Replicate()
    if name == "Shard":
        return Shard(int(placement.dim))
    if name == "Partial":
        return Partial(_reduce_op(getattr(placement, "reduce_op", "sum")))
    raise _unsupported(placement)


def placement_text(placement: Any) -> str:
    """The text form of one placement (see `to_chimera`)."""
    return str(to_chimera(placement))


def from_tuple(item: Sequence[Any]) -> Any:
    """The placement object for one ("R",) / ("S", d) / ("P", op) / ("@", k) tuple."""
    kind = item[0]
    if kind == "R":
        return Replicate()
    if kind == "S":
        return Shard(int(item[1]))
    if kind == "P":
        return Partial(str(item[1]))
    return Stage(int(item[1]))


def layout_text(axis_names: List[str], placements: Sequence[Any],
                shard_order: Optional[Dict[int, Sequence[int]]] = None) -> str:
    """The layout text of one placement per axis, in mesh order (replicated axes left out):
    ``"pp=@1,dp+tp=S0,ep=P(prod)"``. Several axes splitting one tensor dim nest in mesh order
    (earlier axis outer, as DTensor's default), or in the order ``shard_order`` gives: tensor dim
    -> mesh axis indices, outer first (DTensor's ``ShardOrderEntry``: the axis applied first
    is outer). Empty text when every axis replicates."""
    if len(placements) != len(axis_names):
        raise InvalidArgument(
            f"{len(placements)} placements for a mesh of {len(axis_names)} axes ({', '.join(axis_names)}): "
            "give one per mesh axis, in mesh order")
    parts = []
    split: Dict[int, List[int]] = {}
    for axis, (name, placement) in enumerate(zip(axis_names, placements)):
        text = placement_text(placement)
        if text.startswith("S") and text[1:].isdigit():
            split.setdefault(int(text[1:]), []).append(axis)
        elif text != "R":
            parts.append((axis, f"{name}={text}"))
    for dim, order in (shard_order or {}).items():
        if sorted(order) != split.get(dim, []):
            raise InvalidArgument(
                f"shard order {dict(shard_order)} names mesh axes {list(order)} for tensor dim {dim}, but the "
                f"placements {list(placements)} shard it over {split.get(dim, [])}")
        split[dim] = list(order)
    for dim, axes in split.items():
        parts.append((min(axes), "+".join(axis_names[a] for a in axes) + f"=S{dim}"))
    return ",".join(text for _, text in sorted(parts))


def to_dtensor(placements: Sequence[Any]) -> list:
    """DTensor's placement objects for chimera's (imports torch). A Stage has none:
    ``chimera.InvalidArgument`` (a ValueError)."""
    from torch.distributed.tensor import Partial as DPartial
    from torch.distributed.tensor import Replicate as DReplicate
    from torch.distributed.tensor import Shard as DShard

    out = []
    for p in placements:
        if isinstance(p, Stage):
            raise InvalidArgument(f"@{p.index} (a pipeline stage) has no DTensor placement")
        if isinstance(p, Partial):
            out.append(DPartial(_REDUCE_OP_TO_DTENSOR[_reduce_op(p.reduce_op)]))
        else:
            out.append(DReplicate() if isinstance(p, Replicate) else DShard(p.dim))
    return out
