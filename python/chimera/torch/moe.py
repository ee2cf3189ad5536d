# SPDX-License-Identifier: Apache-2.0
"""Routed MoE dispatch and combine on chimera's routed exchange (docs/moe.md).

    from chimera.torch import moe
    recv_x, recv_expert, recv_weight, tokens_per_expert, handle = moe.dispatch(x, topk_idx, topk_weights, E)
    y = moe.combine(experts(recv_x, tokens_per_expert), handle)

``dispatch`` sends each token once to every rank that holds one of its top-k experts (experts
in contiguous blocks of E/R over the R ranks of the group); the receiver expands it to one row
per local expert, grouped by local expert in order. ``combine`` sums a token's weighted expert
outputs on the expert rank first and sends one row back per (token, rank):
``y[t] = sum_k topk_weights[t, k] * expert_out[row of (t, topk_idx[t, k])]``. Both are autograd
functions: gradients reach ``x`` and ``topk_weights``, and each backward runs the routed
exchange the other way on the dispatch's handle (no second count exchange). CPU tensors on
the launch's host backend (chimera.torch.backend.mesh_backend: MPI under mpirun, the gloo mesh
backend under torchrun); chimera is reached through ``chimera._chimera`` (DLPack, no copies
besides making inputs contiguous).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.distributed as dist

import chimera

from .backend import mesh_backend

_BACKENDS: dict = {}
_EXCHANGES: dict = {}
# The exchange of the last dispatch per (mesh, group): where a rank whose call is bad takes
# part when its stand-in options name no cached exchange (its peers are most likely there).
_LAST: dict = {}


def _group_mesh(group) -> tuple[str, str]:
    """(mesh text over the world, axis of the group) for a process group: its ranks must be
    base + i * stride (contiguous or strided), which every EP group of a row-major mesh is."""
    world = dist.get_world_size()
    ranks = list(range(world)) if group is None else sorted(dist.get_process_group_ranks(group))
    n = len(ranks)
    stride = ranks[1] - ranks[0] if n > 1 else 1
    if any(b - a != stride for a, b in zip(ranks, ranks[1:])) or world % (n * stride) != 0 or \
            (ranks[0] % (n * stride)) >= stride:
        raise chimera.Unsupported(f"moe: group ranks {ranks} are not base + i * stride inside blocks of the world "
                                  f"{world}: chimera cannot map them to a mesh axis (pass mesh= and group= axes)")
    outer = world // (n * stride)
    axes = [f"{name}={size}" for name, size in (("o", outer), ("ep", n), ("i", stride)) if size > 1 or name == "ep"]
    return ",".join(axes), "ep"


def _backend(mesh: str):
    """chimera's host backend laid out as `mesh` over the world (the MPI backend under an MPI
    launch, the gloo mesh backend otherwise: chimera.torch.backend.mesh_backend); made once per
    mesh, collectively over the world."""
    if mesh not in _BACKENDS:
        _BACKENDS[mesh] = mesh_backend(mesh, range(dist.get_world_size()))
    return _BACKENDS[mesh]


@dataclass(eq=False)
class Handle:
    """What combine and the backwards reuse: the routed exchange, the dispatch's state and the
    received weights. ``stats`` and ``combine_stats`` are the bytes this rank sent (dicts:
    payload_bytes, header_bytes, count_bytes, padding_bytes, reduce_bytes, dropped_tokens,
    rounds, cross_host_bytes, bytes_sent)."""

    exchange: object
    state: object
    recv_weight: torch.Tensor
    tokens: int
    hidden: int
    num_experts: int
    stats: dict = field(default_factory=dict)
    combine_stats: dict = field(default_factory=dict)

    @property
    def explain(self) -> list:
        """One line per fusion rule: its predicted price with and without, and whether it was taken."""
        return list(self.exchange.explain)


def _exchange(x, topk_idx, topk_weights, num_experts, mesh, group, layout, capacity, overflow, program, topology,
              scratch_limit):
    key = (mesh, group, num_experts, topk_idx.shape[1], x.shape[1], x.dtype, topk_weights.dtype, layout, capacity,
           overflow, program, topology, scratch_limit)
    if key not in _EXCHANGES:
        # Made collectively; a bad option on this rank fails it here and on every peer at once.
        _EXCHANGES[key] = chimera._chimera.RoutedExchange(
            _backend(mesh), num_experts, int(topk_idx.shape[1]), int(x.shape[1]), dtype=x.dtype,
            weight_dtype=topk_weights.dtype, group=group, layout=layout, capacity=capacity, overflow=overflow,
            program=program, topology=topology, scratch_limit=scratch_limit)
    _LAST[(mesh, group)] = _EXCHANGES[key]
    return _EXCHANGES[key]


_ROW_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _problem(x, topk_idx, topk_weights, num_experts, layout, mesh, capacity, overflow, program) -> Optional[str]:
    """What is wrong with one rank's dispatch arguments, or None."""
    if x.dim() != 2 or topk_idx.dim() != 2 or topk_weights.shape != topk_idx.shape or x.shape[0] != topk_idx.shape[0]:
        return (f"moe.dispatch: x {tuple(x.shape)}, topk_idx {tuple(topk_idx.shape)} and topk_weights "
                f"{tuple(topk_weights.shape)} must be [T, H], [T, K], [T, K]")
    if topk_idx.dtype != torch.int64:
        return f"moe.dispatch: topk_idx must be int64, not {topk_idx.dtype}"
    if x.dtype not in _ROW_DTYPES or topk_weights.dtype not in _ROW_DTYPES:
        return (f"moe.dispatch: x ({x.dtype}) and topk_weights ({topk_weights.dtype}) must be float32, float64, "
                f"float16 or bfloat16")
    if layout and mesh is None:
        return "moe.dispatch: a token layout names mesh axes: pass mesh= (e.g. 'tp=2,ep=4') too"
    if not 1 <= topk_idx.shape[1] <= num_experts:
        return f"moe.dispatch: topk_idx has K = {topk_idx.shape[1]} columns, outside 1..{num_experts} (num_experts)"
    if program not in ("planned", "fused", "per_expert"):
        return f"moe.dispatch: unknown program '{program}' (planned, fused, per_expert)"
    if overflow not in ("drop", "error"):
        return f"moe.dispatch: unknown overflow '{overflow}' (drop, error)"
    if capacity < 0:
        return f"moe.dispatch: capacity {capacity} < 0 (0 for dropless)"
    return None


def _fail_collectively(problem, x, topk_idx, topk_weights, num_experts, mesh, group, layout, capacity, overflow,
                       program, topology, scratch_limit):
    """Takes part in the dispatch with `problem` as this rank's failure and raises: InvalidArgument
    here, Mismatch naming this rank on the peers (replicas learn it in their agreement before any
    row moves, the others in the count exchange). It dispatches on the exchange of the call's
    options where they are well-formed and cached (its peers' when only a tensor was wrong), else
    on the exchange of the last dispatch over the same mesh and group (where its peers are in a
    steady loop), else it creates the exchange with the failure, which fails its peers' creation."""
    if x.dim() == 2 and x.shape[1] > 0:
        rows = x if x.dtype in _ROW_DTYPES else torch.empty(x.shape)
    else:
        rows = torch.empty((0, 1))
    k = topk_idx.shape[1] if topk_idx.dim() == 2 and 1 <= topk_idx.shape[1] <= num_experts else 1
    weights = torch.empty((0, k), dtype=topk_weights.dtype if topk_weights.dtype in _ROW_DTYPES else rows.dtype)
    program = program if program in ("planned", "fused", "per_expert") else "planned"
    overflow = overflow if overflow in ("drop", "error") else "drop"
    capacity = max(capacity, 0)
    key = (mesh, group, num_experts, k, rows.shape[1], rows.dtype, weights.dtype, layout, capacity, overflow, program,
           topology, scratch_limit)
    try:
        exchange = _EXCHANGES.get(key) or _LAST.get((mesh, group))
        if exchange is None:
            chimera._chimera.RoutedExchange(
                _backend(mesh), num_experts, k, int(rows.shape[1]), dtype=rows.dtype, weight_dtype=weights.dtype,
                group=group, layout=layout, capacity=capacity, overflow=overflow, program=program, topology=topology,
                scratch_limit=scratch_limit, error=problem)
        elif exchange.role != "outside":
            exchange.dispatch(None, None, None, 0, error=problem)
    except chimera.InvalidArgument:
        raise
    except chimera.Error as e:
        raise chimera.InvalidArgument(problem) from e
    raise chimera.InvalidArgument(problem)  # the exchange raises InvalidArgument first; no bad call goes on


class _Dispatch(torch.autograd.Function):
    """Dispatch and, backward, the dispatch backward. With a stage's tokens ("pp=@k") each stage
    runs its side: stage k sends x (its recv tensors are empty) and, backward, receives grad x
    and grad topk_weights; stage k+1 passes no tokens, receives the rows and, backward, sends
    their gradients back. ``anchor`` (an empty tensor that requires grad) lets stage k+1's
    backward run although its own x and weights need none."""

    @staticmethod
    def forward(ctx, x, topk_weights, topk_idx, exchange, box, anchor):  # noqa: D102
        tokens, hidden = x.shape
        role = exchange.role
        if role == "experts":
            state = exchange.dispatch(None, None, None, 0)
        else:
            state = exchange.dispatch(x, topk_idx, topk_weights, tokens)
        rows = state.rows
        recv_x = x.new_empty((rows, hidden))
        recv_expert = torch.empty(rows, dtype=torch.int64)
        recv_weight = topk_weights.new_empty(rows)
        if role != "source":
            exchange.receive(state, recv_x, recv_expert, recv_weight)
        ctx.exchange, ctx.state, ctx.shape, ctx.role = exchange, state, (tokens, hidden, topk_weights.shape[1]), role
        ctx.dtypes = (x.dtype, topk_weights.dtype)
        ctx.mark_non_differentiable(recv_expert)
        box.append(state)
        return recv_x, recv_expert, recv_weight

    @staticmethod
    def backward(ctx, grad_recv_x, _grad_expert, grad_recv_weight):  # noqa: D102
        tokens, hidden, k = ctx.shape
        if ctx.role == "source":  # the gradients come from stage k+1
            grad_x = torch.empty((tokens, hidden), dtype=ctx.dtypes[0])
            grad_w = torch.empty((tokens, k), dtype=ctx.dtypes[1]) if ctx.needs_input_grad[1] else None
            ctx.exchange.dispatch_backward(None, None, ctx.state, grad_x, grad_w)
            return grad_x, grad_w, None, None, None, None
        if grad_recv_x is None:
            grad_recv_x = torch.zeros((ctx.state.rows, hidden), dtype=ctx.dtypes[0])
        grad_recv_weight = None if grad_recv_weight is None else grad_recv_weight.contiguous()
        if ctx.role == "experts":  # the gradients go to stage k, which forms grad x
            ctx.exchange.dispatch_backward(grad_recv_x.contiguous(), grad_recv_weight, ctx.state, None, None)
            return None, None, None, None, None, None
        grad_x = grad_recv_x.new_empty((tokens, hidden))
        grad_w = None if grad_recv_weight is None else grad_recv_weight.new_empty((tokens, k))
        ctx.exchange.dispatch_backward(grad_recv_x.contiguous(), grad_recv_weight, ctx.state, grad_x, grad_w)
        return grad_x, grad_w, None, None, None, None


class _Combine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, expert_out, recv_weight, handle):  # noqa: D102
        y = expert_out.new_empty((handle.tokens, handle.hidden))
        handle.combine_stats = handle.exchange.combine(expert_out, recv_weight, handle.state, y)
        ctx.save_for_backward(expert_out, recv_weight)
        ctx.handle = handle
        return y

    @staticmethod
    def backward(ctx, grad_y):  # noqa: D102
        expert_out, recv_weight = ctx.saved_tensors
        grad_out = torch.empty_like(expert_out)
        grad_w = torch.empty_like(recv_weight) if ctx.needs_input_grad[1] else None
        ctx.handle.exchange.combine_backward(grad_y.contiguous(), expert_out, recv_weight, ctx.handle.state,
                                             grad_out, grad_w)
        return grad_out, grad_w, None


def dispatch(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor, num_experts: int, *,
             group=None, mesh: Optional[str] = None, layout: str = "", capacity: int = 0, overflow: str = "drop",
             program: str = "planned", topology: Optional[str] = None, scratch_limit: int = 0):
    """Dispatches this rank's tokens to the ranks of their top-k experts.

    x: [T, H] (T may differ per rank, may be 0); topk_idx: [T, K] int64 global expert ids,
    distinct per token; topk_weights: [T, K]; num_experts: E, placed in contiguous blocks of E/R
    over the R ranks of the group. group: a process group (default: the world) whose ranks are
    base + i * stride; or, with ``mesh="tp=2,ep=4"``, the dispatch axes ("ep", "ep+tp"). layout:
    where the tokens come from over the token axes of ``mesh``: "" or "tp=S0"/"sp=S0" (owned
    shards: dispatched from and combined back to the owner), "tp=R" (replicas: each dispatches a
    disjoint part when the cost model says it pays), "tp=P" (partial sums: ReduceScatter, then
    each dispatches its shard). capacity: tokens per (source, destination rank) pair, 0 for
    dropless; overflow: "drop" (counted) or "error". program: "planned", "fused" or
    "per_expert" (one row per (token, expert), the chain as frameworks issue it). topology: the
    cost model the planned program is priced with ("bytes", a preset or a profile); None:
    ``CHIMERA_TOPOLOGY``, else the backend's own (``host:N`` on the host backends).

    Returns (recv_x, recv_expert, recv_weight, tokens_per_expert, handle): recv_x one row per
    (received token, local expert), grouped by local expert in order; recv_expert their global
    ids; recv_weight their routing weights; tokens_per_expert rows per local expert (int64).

    A malformed call on one rank (shapes, dtypes, K outside 1..E, an unknown program or overflow,
    a negative capacity, a bad layout, E not divisible by the group, a cost model that does not
    load, an expert id out of range, on any replica of "tp=R" / "tp=P") raises ValueError
    (chimera.InvalidArgument) there and chimera.Mismatch naming that rank on every other rank of
    the group, in the call's first round: the rank still takes part in the exchange (or in its
    creation) with its failure, so that no peer waits for it, and the next good call works.

    A pipeline stage's tokens (``layout="pp=@k"`` with ``mesh="pp=P,ep=N"``, the group the
    dispatch axes within a stage): stage k passes its tokens and gets empty recv tensors; stage
    k+1 passes empty ones (x [0, H], topk_idx and topk_weights [0, K]) and gets the rows of its
    stage-k peer's tokens, whose ``combine`` gives that peer's y on stage k+1. Backward, stage
    k+1's gradients of the received rows go back to stage k when its backward reaches this
    dispatch; stage k receives grad x and grad topk_weights when it runs the backward of its
    empty ``recv_x`` (``recv_x.backward(torch.zeros_like(recv_x))``, in the schedule's order, as
    torch.distributed.pipelining runs a stage's backward). The ranks of other stages get empty
    tensors and make no exchange. Every rank of the mesh makes the first call of a configuration
    (it creates the exchange). Rule 5 (straight to stage k+1's experts) is priced as in
    docs/moe.md.
    """
    problem = _problem(x, topk_idx, topk_weights, num_experts, layout, mesh, capacity, overflow, program)
    if mesh is None:
        mesh, group = _group_mesh(group)
        layout = ""
    if problem is not None:
        _fail_collectively(problem, x, topk_idx, topk_weights, num_experts, mesh, group, layout, capacity, overflow,
                           program, topology, scratch_limit)
    exchange = _exchange(x, topk_idx, topk_weights, num_experts, mesh, group, layout, capacity, overflow, program,
                         topology, scratch_limit)
    if exchange.role == "outside":  # a stage that neither holds the tokens nor the experts
        recv_weight = topk_weights.new_empty(0)
        handle = Handle(exchange, None, recv_weight, 0, int(x.shape[1]), num_experts)
        return x.new_empty((0, x.shape[1])), torch.empty(0, dtype=torch.int64), recv_weight, \
            torch.empty(0, dtype=torch.int64), handle
    # Stage k+1 of "pp=@k" has no input that needs a gradient, yet its backward sends one.
    anchor = torch.empty(0, requires_grad=True) if exchange.role == "experts" else None
    box: list = []
    recv_x, recv_expert, recv_weight = _Dispatch.apply(x.contiguous(), topk_weights.contiguous(),
                                                       topk_idx.contiguous(), exchange, box, anchor)
    state = box[0]
    handle = Handle(exchange, state, recv_weight, int(state.tokens), int(x.shape[1]), num_experts, stats=state.stats)
    tokens_per_expert = torch.tensor(state.tokens_per_expert, dtype=torch.int64)
    return recv_x, recv_expert, recv_weight, tokens_per_expert, handle


def combine(expert_out: torch.Tensor, handle: Handle) -> torch.Tensor:
    """y [T, H] with y[t] = sum_k topk_weights[t, k] * expert_out[row of (t, topk_idx[t, k])];
    expert_out rows align with recv_x. Dropped pairs (capacity mode) contribute 0. With a
    stage's tokens ("pp=@k") stage k+1 combines (y of its stage-k peer's tokens); stage k and
    the other stages raise chimera.InvalidArgument without communicating."""
    if handle.state is None:
        raise chimera.InvalidArgument("moe.combine: this rank's pipeline stage takes no part in the exchange "
                                      "(a stage's tokens 'pp=@k' move from stage k to stage k+1 only)")
    return _Combine.apply(expert_out.contiguous(), handle.recv_weight, handle)


__all__ = ["Handle", "combine", "dispatch"]
