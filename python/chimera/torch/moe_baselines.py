# SPDX-License-Identifier: Apache-2.0
"""MoE token dispatchers as frameworks issue them without chimera, on torch.distributed.

The baselines of :mod:`chimera.torch.moe` (the benchmark ``benchmarks/python/moe_dispatch.py``,
the exactness tests and ``examples/python/train_gpt.py --moe-experts``), each with the same
interface as ``moe.dispatch`` / ``moe.combine``::

    recv_x, recv_expert, recv_weight, tokens_per_expert, handle = d.dispatch(x, topk_idx, topk_weights)
    y = d.combine(expert_out, handle)

* :class:`PerExpertDispatcher`: Megatron-core's alltoall dispatcher and torchtitan's expert
  parallel: per-expert counts exchanged with ``all_to_all_single`` and copied to the host, then
  one row per (token, expert) with ``all_to_all_single`` and splits (and the routing weight of
  each row), received rows sorted by local expert; combine mirrors it and sums a token's K rows,
  weighted, on its owner.
* :class:`AllGatherDispatcher`: Megatron-core's allgather dispatcher: AllGather of tokens, expert
  ids and weights over the group, each rank keeps its experts' rows; combine sums the weighted
  rows into the gathered token positions and ReduceScatters them back.
* :class:`TPChainDispatcher`: the chain torchtitan issues with tensor + sequence parallelism
  and EP folded over TP: AllGather of the sequence shards over TP (the MoE input is
  ``Shard(1) -> Replicate``), each TP rank dispatches its 1/tp of the tokens per (token,
  expert) over the whole expert group, combine, the output scattered into the replicated
  positions (``Partial``) and ReduceScattered over TP (``Partial -> Shard(1)``).
* :class:`ChimeraDispatcher`: :mod:`chimera.torch.moe` itself behind the same interface, so
  that it runs side by side with the others.

Conventions shared with ``moe.dispatch``: experts sit in contiguous blocks of E / n over the n
ranks of the group; ``recv_x`` holds one row per (received token, local expert), grouped by
local expert, then by source rank, then by token; a token's combine output is
``sum_k topk_weights[t, k] * expert_out[row of (t, k)]``, summed in k order. All are autograd
functions (gradients to ``x`` and ``topk_weights``; the backward of each exchange is the
exchange the other way). ``group`` is a torch.distributed process group (None: the default
one; the dispatchers call ``all_to_all_single`` with splits, ``all_gather_into_tensor`` and
``reduce_scatter_tensor`` on it) or an :class:`MpiComm` (the same collectives on MPI).
``bytes_sent`` counts what this rank passed to its collectives for other ranks: the splits given
to ``all_to_all_single``, (n-1) x its shard for an AllGather, (n-1)/n of the input for a
ReduceScatter (the bandwidth-optimal algorithms).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


class TorchComm:
    """The collectives the dispatchers issue, on a torch.distributed process group (None: the
    default group); ``all_to_all_single`` with splits, as torchtitan and Megatron call it."""

    def __init__(self, group=None):
        self.group = group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)

    def all_to_all(self, out, inp, out_splits, in_splits):
        dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group)

    def all_gather(self, out, inp):
        dist.all_gather_into_tensor(out, inp, group=self.group)

    def reduce_scatter(self, out, inp):
        dist.reduce_scatter_tensor(out, inp, group=self.group)


class MpiComm:
    """The same collectives on an mpi4py communicator (MPI_Alltoallv, MPI_Allgather,
    MPI_Reduce_scatter_block over host tensors): the transport chimera's MPI backend uses, so a
    benchmark compares the exchanges rather than the transports."""

    def __init__(self, comm):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    @staticmethod
    def _counts(t, splits):
        row = math.prod(t.shape[1:])
        counts = [s * row for s in splits]
        displs = [sum(counts[:i]) for i in range(len(counts))]
        return counts, displs

    def all_to_all(self, out, inp, out_splits, in_splits):
        self.comm.Alltoallv([inp.numpy(), self._counts(inp, in_splits)], [out.numpy(), self._counts(out, out_splits)])

    def all_gather(self, out, inp):
        self.comm.Allgather(inp.numpy(), out.numpy())

    def reduce_scatter(self, out, inp):
        from mpi4py import MPI

        self.comm.Reduce_scatter_block(inp.numpy(), out.numpy(), op=MPI.SUM)


def as_comm(group_or_comm):
    """A TorchComm or MpiComm as given, else a TorchComm over the process group (None: default)."""
    return group_or_comm if isinstance(group_or_comm, (TorchComm, MpiComm)) else TorchComm(group_or_comm)


class _AllToAll(torch.autograd.Function):
    """All-to-all with splits; the backward sends the gradient back the other way."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, comm):
        ctx.splits, ctx.comm = (out_splits, in_splits), comm
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        comm.all_to_all(out, x.detach().contiguous(), out_splits, in_splits)
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits),) + tuple(grad.shape[1:]))
        ctx.comm.all_to_all(back, grad.contiguous(), in_splits, out_splits)
        return back, None, None, None


class _AllGather(torch.autograd.Function):
    """AllGather along dim 0 (equal shards); backward: ReduceScatter of the gradient."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        out = x.new_empty((comm.size * x.shape[0],) + tuple(x.shape[1:]))
        comm.all_gather(out, x.detach().contiguous())
        return out

    @staticmethod
    def backward(ctx, grad):
        out = grad.new_empty((grad.shape[0] // ctx.comm.size,) + tuple(grad.shape[1:]))
        ctx.comm.reduce_scatter(out, grad.contiguous())
        return out, None


class _ReduceScatter(torch.autograd.Function):
    """Sum over the group, each rank keeps its 1/n along dim 0; backward: AllGather."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        out = x.new_empty((x.shape[0] // comm.size,) + tuple(x.shape[1:]))
        comm.reduce_scatter(out, x.detach().contiguous())
        return out

    @staticmethod
    def backward(ctx, grad):
        return _AllGather.apply(grad, ctx.comm), None


def _check_routing(x, topk_idx, topk_weights, num_experts, n):
    if num_experts % n:
        raise ValueError(f"{num_experts} experts do not split into contiguous blocks over {n} ranks")
    if x.dim() != 2 or topk_idx.dim() != 2 or topk_idx.shape[0] != x.shape[0] or \
            tuple(topk_weights.shape) != tuple(topk_idx.shape):
        raise ValueError(f"x {tuple(x.shape)}, topk_idx {tuple(topk_idx.shape)} and topk_weights "
                         f"{tuple(topk_weights.shape)} must be [T, H], [T, K], [T, K]")


def weighted_sum(weights, rows):
    """``sum_k weights[:, k] * rows[:, k]`` over [T, K] weights and [T, K, H] rows, added in k
    order (the summation order every dispatcher here and the exactness tests share)."""
    y = weights[:, 0:1] * rows[:, 0]
    for k in range(1, rows.shape[1]):
        y = y + weights[:, k:k + 1] * rows[:, k]
    return y


class _Dispatcher:
    """What both flat-group dispatchers hold: the group, its size, E, the experts per rank and the
    bytes sent so far."""

    def __init__(self, num_experts: int, group=None):
        self.comm = as_comm(group)
        self.rank, self.n = self.comm.rank, self.comm.size
        self.num_experts = num_experts
        self.local = num_experts // self.n
        self.bytes_sent = 0


class PerExpertDispatcher(_Dispatcher):
    """One row per (token, expert) in an uneven all-to-all, as Megatron-core's alltoall
    dispatcher and torchtitan issue it (see the module docstring)."""

    def dispatch(self, x, topk_idx, topk_weights):
        _check_routing(x, topk_idx, topk_weights, self.num_experts, self.n)
        t, k = topk_idx.shape
        flat = topk_idx.reshape(-1)
        order = torch.argsort(flat, stable=True)  # (token, k) rows grouped by expert, tokens in order
        counts = torch.bincount(flat, minlength=self.num_experts)
        recv_counts = torch.empty_like(counts)
        self.comm.all_to_all(recv_counts, counts, [self.local] * self.n, [self.local] * self.n)  # the count exchange
        send = counts.view(self.n, self.local).sum(1).tolist()  # device-to-host
        recv = recv_counts.view(self.n, self.local).sum(1).tolist()
        rows = x[order // k]
        recv_x = _AllToAll.apply(rows, recv, send, self.comm)
        recv_w = _AllToAll.apply(topk_weights.reshape(-1)[order], recv, send, self.comm)
        others = sum(s for j, s in enumerate(send) if j != self.rank)
        self.bytes_sent += counts.element_size() * self.local * (self.n - 1)
        self.bytes_sent += others * (x.shape[1] * x.element_size() + topk_weights.element_size())
        # Received blocks are [source rank][local expert]: sort rows by local expert (stable).
        local_ids = torch.arange(self.local).repeat(self.n).repeat_interleave(recv_counts)
        perm = torch.argsort(local_ids, stable=True)
        recv_expert = local_ids[perm] + self.rank * self.local
        tokens_per_expert = recv_counts.view(self.n, self.local).sum(0)
        handle = (order, send, recv, perm, t, k, topk_weights)
        return recv_x[perm], recv_expert, recv_w[perm], tokens_per_expert, handle

    def combine(self, expert_out, handle):
        order, send, recv, perm, t, k, topk_weights = handle
        rows = expert_out[torch.argsort(perm)]  # back to [source rank][local expert] blocks
        back = _AllToAll.apply(rows, send, recv, self.comm)
        others = sum(s for j, s in enumerate(recv) if j != self.rank)
        self.bytes_sent += others * expert_out.shape[1] * expert_out.element_size()
        per_token = back[torch.argsort(order)].view(t, k, expert_out.shape[1])
        return weighted_sum(topk_weights, per_token)


class AllGatherDispatcher(_Dispatcher):
    """AllGather of every token over the group, each rank keeps its experts' rows; combine is a
    ReduceScatter, as Megatron-core's allgather dispatcher issues it. Ranks with fewer tokens
    pad to the group's largest T (the padding is sent and counted)."""

    def dispatch(self, x, topk_idx, topk_weights):
        _check_routing(x, topk_idx, topk_weights, self.num_experts, self.n)
        t, k = topk_idx.shape
        sizes = torch.empty(self.n, dtype=torch.int64)
        self.comm.all_gather(sizes, torch.tensor([t], dtype=torch.int64))
        most = int(sizes.max())
        pad = most - t
        xp = torch.nn.functional.pad(x, (0, 0, 0, pad))
        wp = torch.nn.functional.pad(topk_weights, (0, 0, 0, pad))
        ip = torch.nn.functional.pad(topk_idx, (0, 0, 0, pad), value=-1)
        gx = _AllGather.apply(xp, self.comm)
        gw = _AllGather.apply(wp, self.comm)
        gi = ip.new_empty((self.n * most, k))
        self.comm.all_gather(gi, ip.contiguous())
        self.bytes_sent += (self.n - 1) * (sizes.element_size() + most * (
            x.shape[1] * x.element_size() + k * (topk_weights.element_size() + topk_idx.element_size())))
        first = self.rank * self.local
        mine = (gi >= first) & (gi < first + self.local)
        tok, kk = mine.nonzero(as_tuple=True)  # (source rank, token) order, then k
        expert = gi[tok, kk] - first
        perm = torch.argsort(expert, stable=True)
        tok, kk, expert = tok[perm], kk[perm], expert[perm]
        tokens_per_expert = torch.bincount(expert, minlength=self.local)
        handle = (tok, kk, gw, most, t, k)
        return gx[tok], expert + first, gw[tok, kk], tokens_per_expert, handle

    def combine(self, expert_out, handle):
        tok, kk, gw, most, t, k = handle
        partial = expert_out.new_zeros((self.n * most, expert_out.shape[1]))
        for j in range(k):  # k order, as weighted_sum adds
            sel = kk == j
            rows = tok[sel]
            partial = partial.index_add(0, rows, gw[rows, j:j + 1] * expert_out[sel])
        self.bytes_sent += (self.n - 1) * most * expert_out.shape[1] * expert_out.element_size()
        return _ReduceScatter.apply(partial, self.comm)[:t]


class TPChainDispatcher:
    """torchtitan's chain with tensor + sequence parallelism and EP folded over TP (see the
    module docstring). ``x`` and the routing are this rank's sequence shard (what chimera's
    ``tp=S0`` layout dispatches straight from); ``group`` is the expert group (ep x tp ranks),
    ``tp_group`` this rank's TP group, of equal shards."""

    def __init__(self, num_experts: int, group, tp_group):
        self.tp_comm = as_comm(tp_group)
        self.tp_rank, self.tp = self.tp_comm.rank, self.tp_comm.size
        self.inner = PerExpertDispatcher(num_experts, group)
        self.tp_bytes = 0

    @property
    def bytes_sent(self):
        return self.tp_bytes + self.inner.bytes_sent

    def dispatch(self, x, topk_idx, topk_weights):
        t = x.shape[0]
        replicated = _AllGather.apply(x, self.tp_comm)  # Shard(1) -> Replicate: the router's input
        self.tp_bytes += (self.tp - 1) * x.numel() * x.element_size()
        mine = replicated[self.tp_rank * t:(self.tp_rank + 1) * t]  # this TP rank's 1/tp of the tokens
        out = self.inner.dispatch(mine, topk_idx, topk_weights)
        return out[:4] + ((out[4], t),)

    def combine(self, expert_out, handle):
        inner, t = handle
        y = self.inner.combine(expert_out, inner)
        partial = torch.nn.functional.pad(y, (0, 0, self.tp_rank * t, (self.tp - 1 - self.tp_rank) * t))
        self.tp_bytes += (self.tp - 1) * t * y.shape[1] * y.element_size()
        return _ReduceScatter.apply(partial, self.tp_comm)  # Partial -> Shard(1)


class ChimeraDispatcher:
    """:mod:`chimera.torch.moe` behind the dispatcher interface: ``program`` and ``where``
    (``group``, ``mesh``, ``layout``) are ``moe.dispatch``'s keywords; ``bytes_sent`` adds up
    the exchange's own counters (payload, headers, counts) of each dispatch and combine."""

    def __init__(self, num_experts: int, program: str = "planned", **where):
        from chimera.torch import moe  # here, not at the top: the baselines run without it

        self.moe, self.num_experts, self.program, self.where = moe, num_experts, program, where
        self.bytes_sent = 0

    def dispatch(self, x, topk_idx, topk_weights):
        out = self.moe.dispatch(x, topk_idx, topk_weights, self.num_experts, program=self.program, **self.where)
        self.bytes_sent += out[4].stats["bytes_sent"]
        return out

    def combine(self, expert_out, handle):
        y = self.moe.combine(expert_out, handle)
        self.bytes_sent += handle.combine_stats["bytes_sent"]
        return y
