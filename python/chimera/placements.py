# SPDX-License-Identifier: Apache-2.0
"""Per-mesh-axis placements and their mapping to and from DTensor's.

A chimera Layout holds one placement per mesh axis. DTensor (``torch.distributed.tensor``) has
three of the four kinds: ``Replicate()``, ``Shard(d)`` and ``Partial(op)``; chimera adds
``Stage(k)`` (``@k``: only coordinate k of the axis holds the tensor, a pipeline stage). The
classes below mirror DTensor's names; ``Layout.from_placements`` also accepts DTensor's own
objects (recognised by class name, so torch is never imported here) and the text forms
(``"R"``, ``"S0"``, ``"P"``, ``"P(max)"``, ``"@1"``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Sequence


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
    """The value is the ``reduce_op``-reduction over the axis (``P`` / ``P(op)``)."""

    reduce_op: str = "sum"

    def __str__(self) -> str:
        return "P" if self.reduce_op == "sum" else f"P({self.reduce_op})"


@dataclass(frozen=True)
class Stage:
    """Only coordinate ``index`` of the axis holds the tensor (``@index``); DTensor has no equivalent."""

    index: int

    def __str__(self) -> str:
        return f"@{self.index}"


def placement_text(placement: Any) -> str:
    """The text form of one placement: chimera's, DTensor's, or already text."""
    if isinstance(placement, str):
        return placement
    if isinstance(placement, (Replicate, Shard, Partial, Stage)):
        return str(placement)
    name = type(placement).__name__
    if name == "Replicate":
        return "R"
    if name == "Shard":
        return f"S{int(placement.dim)}"
    if name == "Partial":
        op = str(getattr(placement, "reduce_op", "sum")).lower()
        return "P" if op == "sum" else f"P({op})"
    raise ValueError(
        f"placement {placement!r} ({name}) has no chimera equivalent "
        "(Replicate, Shard(d), Partial(op), Stage(k) or the text R, S<d>, P, P(op), @k)")


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


def layout_text(axis_names: List[str], placements: Sequence[Any]) -> str:
    """``"tp=S0,pp=@1"`` for one placement per axis (replicated axes left out)."""
    if len(placements) != len(axis_names):
        raise ValueError(
            f"{len(placements)} placements for a mesh of {len(axis_names)} axes ({', '.join(axis_names)}): "
            "give one per mesh axis, in mesh order")
    parts = []
    for name, placement in zip(axis_names, placements):
        text = placement_text(placement)
        if text != "R":
            parts.append(f"{name}={text}")
    return ",".join(parts)
