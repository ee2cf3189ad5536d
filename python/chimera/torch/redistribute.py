# SPDX-License-Identifier: Apache-2.0
"""Fused DTensor redistribution: one chimera plan across all mesh dimensions.

``redistribute(dtensor, placements)`` returns what ``dtensor.redistribute(dtensor.device_mesh,
placements)`` returns, moving the data with the plan chimera's planner picks for the whole
transition (``Partial`` over several mesh dims reduced once, ``Shard(i) -> Shard(j)`` as one
AllToAll, nested shard orders as box intersections) instead of DTensor's one collective per
mesh dim. Under autograd the gradient goes back through chimera too. Complex tensors move as
their (real, imaginary) pairs, bool tensors as bytes, and DTensor's partial p-norms reduce in
one plan with one p-th root (``Route``).

``with fused_redistribute(): ...`` (or ``CHIMERA_TORCH_REDISTRIBUTE=1``, process-wide) routes every
redistribution DTensor makes through chimera: it replaces ``redistribute_local_tensor`` of
``torch.distributed.tensor._redistribute``, the one function that both ``DTensor.redistribute``
(with its keywords, in forward and backward) and the op dispatcher's implicit redistributions
call. Transitions chimera does not plan go to DTensor's own; ``stats()`` counts both, with the
reasons of the fallbacks.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import logging
import re
import threading
import warnings

import torch
import torch.distributed.tensor._redistribute as _dtensor_redistribute
from torch.distributed.tensor import DTensor, Partial, Replicate

# layout_text and runtime_for stay importable from here, where callers have found them.
from .route import Unplannable, layout_text, plan, plan_specs, runtime_for  # noqa: F401

log = logging.getLogger("chimera.torch")


# --- what chimera planned, and why it did not -------------------------------------------------

_STATS_LOCK = threading.Lock()
_PLANNED = collections.Counter()   # "explicit" / "implicit" -> count
_FALLBACKS = collections.Counter()  # reason -> count


def _reason(why) -> str:
    """A fallback's reason without its numbers (shapes, ranks, sizes), so that one cause is one key."""
    return re.sub(r"\d+", "N", str(why))[:160]


def _count_planned(explicit: bool) -> None:
    with _STATS_LOCK:
        _PLANNED["explicit" if explicit else "implicit"] += 1


def _count_fallback(why) -> None:
    reason = _reason(why)
    with _STATS_LOCK:
        _FALLBACKS[reason] += 1
    log.debug("chimera.torch: DTensor's own redistribution: %s", why)


def stats() -> dict:
    """This process's counts since start (or ``reset_stats()``): redistributions chimera planned
    (``planned``; ``explicit``: DTensor.redistribute / redistribute(), ``implicit``: inserted by
    DTensor's op dispatcher or autograd), those left to DTensor (``fallback``) and why
    (``fallback_reasons``: reason -> count, numbers in the reason replaced by N)."""
    with _STATS_LOCK:
        planned = _PLANNED["explicit"] + _PLANNED["implicit"]
        return {"planned": planned, "explicit": _PLANNED["explicit"], "implicit": _PLANNED["implicit"],
                "fallback": sum(_FALLBACKS.values()), "fallback_reasons": dict(_FALLBACKS)}


def reset_stats() -> None:
    """Sets every count of ``stats()`` to zero."""
    with _STATS_LOCK:
        _PLANNED.clear()
        _FALLBACKS.clear()


# --- running a planned transition --------------------------------------------------------------

def redistribute(dtensor, placements):
    """`dtensor` redistributed to `placements` on its own mesh by one chimera plan; equal in value
    and placements to DTensor's own result (see docs/torch.md for where reductions may differ).
    Falls back to DTensor's own redistribute for what chimera does not plan (counted in stats())."""
    autograd = dtensor.requires_grad and torch.is_grad_enabled()
    try:
        route, placements = plan(dtensor, placements)
        if autograd and (route.norm is not None or route.partition):
            raise Unplannable("a partial norm reduced or split under autograd")
    except Unplannable as why:
        _count_fallback(why)
        return _ORIGINAL_REDISTRIBUTE(dtensor, dtensor.device_mesh, placements)
    _count_planned(True)
    if route.idle:
        return dtensor
    if autograd:
        return _FusedRedistribute.apply(dtensor, placements, route)
    return _run(dtensor, placements, route)


def _run(dtensor, placements, route):
    out = route.run(dtensor._local_tensor)  # noqa: SLF001
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
    def forward(ctx, dtensor, placements, route):  # noqa: D102
        ctx.source_placements = tuple(dtensor.placements)
        return _run(dtensor, placements, route)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        back = _gradient_placements(grad.placements, ctx.source_placements)
        return redistribute(grad, back), None, None


def bytes_of(dtensor, placements) -> tuple[int, int, str]:
    """(bytes over all ranks, bytes of the busiest rank, plan text) chimera's plan sends for this
    transition. Raises Unplannable when chimera does not plan it."""
    route, _ = plan(dtensor, placements)
    return route.bytes


_ORIGINAL_REDISTRIBUTE = DTensor.redistribute


# --- routing every redistribution of DTensor ----------------------------------------------------

# The torch releases whose redistribute_local_tensor the hook was written against: its parameters
# (local_tensor, current_spec, target_spec, *, async_op, use_graph_based_transform, is_explicit)
# and the modules that import it by name.
HOOKED_TORCH = ("2.15",)
_HOOKED_PARAMETERS = ("local_tensor", "current_spec", "target_spec", "async_op", "use_graph_based_transform",
                      "is_explicit")
_CALLERS = ("torch.distributed.tensor._redistribute", "torch.distributed.tensor._api",
            "torch.distributed.tensor._dispatch", "torch.distributed.tensor.experimental._tp_transform")
_ORIGINAL_LOCAL = _dtensor_redistribute.redistribute_local_tensor
_ROUTING = {"depth": 0, "warned": False}
_ROUTING_LOCK = threading.Lock()


def hook_supported() -> str | None:
    """None when the hook fits this torch; else why not (another release, another signature)."""
    version = torch.__version__.split("+")[0]
    if not any(version == v or version.startswith(v + ".") for v in HOOKED_TORCH):
        return f"torch {version} (the hook is written for torch {', '.join(HOOKED_TORCH)})"
    names = tuple(inspect.signature(_ORIGINAL_LOCAL).parameters)
    if names != _HOOKED_PARAMETERS:
        return f"redistribute_local_tensor{names} differs from {_HOOKED_PARAMETERS}"
    return None


def _routed_local(local_tensor, current_spec, target_spec, *, async_op=False, use_graph_based_transform=None,
                  is_explicit=False):
    """redistribute_local_tensor through chimera when it plans the transition, else DTensor's own.
    The result is complete when returned (a valid answer to async_op=True, whose result may
    complete later)."""
    mesh = current_spec.mesh
    if not mesh._is_current_rank_part_of_mesh():  # noqa: SLF001 (DTensor's own returns the input)
        return _ORIGINAL_LOCAL(local_tensor, current_spec, target_spec, async_op=async_op,
                               use_graph_based_transform=use_graph_based_transform, is_explicit=is_explicit)
    try:
        if _dtensor_redistribute._are_we_tracing():  # noqa: SLF001
            raise Unplannable("traced (torch.compile): DTensor's own collectives are traceable")
        route = plan_specs(current_spec, target_spec, local_tensor.dtype)
    except Unplannable as why:
        _count_fallback(why)
        return _ORIGINAL_LOCAL(local_tensor, current_spec, target_spec, async_op=async_op,
                               use_graph_based_transform=use_graph_based_transform, is_explicit=is_explicit)
    _count_planned(is_explicit)
    if route.idle:
        return local_tensor
    return route.run(local_tensor)


def _unsupported_local(why: str):
    """The hook on a torch it was not written for: every call goes to DTensor's own, counted."""

    def counted(*args, **kwargs):
        _count_fallback(why)
        return _ORIGINAL_LOCAL(*args, **kwargs)

    return counted


def _install(replacement) -> None:
    import sys

    for name in _CALLERS:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "redistribute_local_tensor", None) is _ORIGINAL_LOCAL:
            module.redistribute_local_tensor = replacement


def _uninstall() -> None:
    import sys

    for name in _CALLERS:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "redistribute_local_tensor"):
            module.redistribute_local_tensor = _ORIGINAL_LOCAL


def _enter_routing() -> None:
    with _ROUTING_LOCK:
        _ROUTING["depth"] += 1
        if _ROUTING["depth"] > 1:
            return
        why = hook_supported()
        if why is None:
            _install(_routed_local)
            return
        if not _ROUTING["warned"]:
            _ROUTING["warned"] = True
            warnings.warn(f"chimera.torch.fused_redistribute: DTensor keeps its own redistributions on {why}; "
                          "chimera.torch.stats() counts them as fallbacks", RuntimeWarning, stacklevel=3)
        _install(_unsupported_local(why))


def _leave_routing() -> None:
    with _ROUTING_LOCK:
        _ROUTING["depth"] -= 1
        if _ROUTING["depth"] == 0:
            _uninstall()


@contextlib.contextmanager
def fused_redistribute():
    """Routes every DTensor redistribution (explicit, with any keyword, and implicit) through
    chimera for the duration; nests. See the module's documentation."""
    _enter_routing()
    try:
        yield
    finally:
        _leave_routing()


def route_process_wide() -> None:
    """Routes every DTensor redistribution through chimera from now until exit (idempotent): what
    CHIMERA_TORCH_REDISTRIBUTE=1 and ``chimera.torch.Options(redistribute=True)`` do."""
    if not _ROUTING.get("process_wide"):
        _ROUTING["process_wide"] = True
        _enter_routing()


def route_from_environment() -> bool:
    """Routes process-wide when CHIMERA_TORCH_REDISTRIBUTE is on (options.ENVIRONMENT); called at import."""
    from .options import ENVIRONMENT

    if ENVIRONMENT.redistribute:
        route_process_wide()
    return bool(ENVIRONMENT.redistribute)
