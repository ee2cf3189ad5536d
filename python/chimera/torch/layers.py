# SPDX-License-Identifier: Apache-2.0
"""Megatron-style tensor + sequence parallel layers whose collectives go through a chimera Session.

Every collective a layer needs, forward and backward, is issued through a
:class:`~chimera.torch.parallel_context.ParallelContext`, which records it on its Session the way
a framework without fusion writes it, with a declaration of what the next computation reads; the
Session fuses where that pays:

* the partial output of a row-parallel matmul: ``allreduce:tp`` + "the next op reads my rows"
  (sequence parallelism) runs as one ReduceScatter; the backward of a column-parallel matmul
  (its partial input gradient) likewise;
* the sequence-parallel input of a column-parallel matmul (and the backward of a row-parallel
  one): ``allgather:tp``;
* the pipeline hand-off ``allreduce:tp`` + ``send:pp`` with the next stage reading its rows:
  ReduceScatter + a many-to-many of the shards (``ParallelContext.pipeline_send``, and per rank
  ``ParallelContext.stage_send`` / ``ParallelContext.stage_recv``).

MoE token dispatch and combine are :mod:`chimera.torch.moe` (the routed exchange).

With ``fusion=False`` the same calls run exactly as recorded (an AllReduce, then a local slice).
Tokens are rows of 2-D activations ``[tokens, features]``, sharded over ``dp`` (when the mesh has
it) and, in sequence-parallel regions, over ``tp`` inside it.
"""

from __future__ import annotations

import torch

import chimera


class _ColumnParallel(torch.autograd.Function):
    """y = allgather_tp(x_rows) @ W_cols^T (+ b_cols); backward reduces dx over tp to rows."""

    @staticmethod
    def forward(ctx, x_rows, weight, bias, pctx):
        x = pctx.gather_rows(x_rows)
        ctx.save_for_backward(x, weight)
        ctx.pctx = pctx
        y = x @ weight.t()
        return y + bias if bias is not None else y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        grad_x = ctx.pctx.reduce_to_rows(grad_y @ weight)
        return grad_x, grad_y.t() @ x, grad_y.sum(0), None


class _RowParallel(torch.autograd.Function):
    """y_rows = reduce_tp(x_cols @ W_rows^T) restricted to this rank's rows; backward gathers dy."""

    @staticmethod
    def forward(ctx, x, weight, pctx):
        ctx.save_for_backward(x, weight)
        ctx.pctx = pctx
        return pctx.reduce_to_rows(x @ weight.t())

    @staticmethod
    def backward(ctx, grad_rows):
        x, weight = ctx.saved_tensors
        grad_y = ctx.pctx.gather_rows(grad_rows)
        return grad_y @ weight, grad_y.t() @ x, None


class ColumnParallelLinear(torch.nn.Module):
    """Linear ``in -> out`` with the output features split over tp; input: this rank's token
    rows (sequence parallel), output: all rows of the dp shard, this rank's feature columns.
    ``full_weight``/``full_bias`` (optional) initialise the shard from the unsplit parameters."""

    def __init__(self, pctx, in_features, out_features, full_weight=None, full_bias=None):
        super().__init__()
        tp, g = pctx.size("tp"), pctx.coord("tp")
        if out_features % tp:
            raise chimera.InvalidArgument(f"out_features {out_features} does not split over tp={tp}")
        n = out_features // tp
        w = full_weight if full_weight is not None else torch.randn(out_features, in_features) * in_features ** -0.5
        b = full_bias if full_bias is not None else torch.zeros(out_features)
        self.weight = torch.nn.Parameter(w[g * n:(g + 1) * n].clone())
        self.bias = torch.nn.Parameter(b[g * n:(g + 1) * n].clone())
        self.pctx = pctx

    def forward(self, x_rows):
        return _ColumnParallel.apply(x_rows, self.weight, self.bias, self.pctx)


class RowParallelLinear(torch.nn.Module):
    """Linear ``in -> out`` with the input features split over tp; input: all rows of the dp
    shard, this rank's feature columns; output: this rank's token rows (sequence parallel).
    The bias is replicated over tp: its gradient needs a sum over tp (and dp), e.g.
    ``pctx.all_reduce_([layer.bias.grad], ["dp", "tp"])``."""

    def __init__(self, pctx, in_features, out_features, full_weight=None, full_bias=None):
        super().__init__()
        tp, g = pctx.size("tp"), pctx.coord("tp")
        if in_features % tp:
            raise chimera.InvalidArgument(f"in_features {in_features} does not split over tp={tp}")
        n = in_features // tp
        w = full_weight if full_weight is not None else torch.randn(out_features, in_features) * in_features ** -0.5
        b = full_bias if full_bias is not None else torch.zeros(out_features)
        self.weight = torch.nn.Parameter(w[:, g * n:(g + 1) * n].clone())
        self.bias = torch.nn.Parameter(b.clone())
        self.pctx = pctx

    def forward(self, x_cols):
        return _RowParallel.apply(x_cols, self.weight, self.pctx) + self.bias
