# SPDX-License-Identifier: Apache-2.0
"""The layers' collectives issued with torch.distributed (``ParallelContext(comm="torch")``): the
unfused reference the Session's results are compared with (e.g. on gloo).

What the Session records as an AllReduce read by rows is issued here as the ReduceScatter a
framework with sequence parallelism calls; a pipeline hand-off is a ReduceScatter over tp, then a
send of the rows to the same (dp, tp) rank of the next stage, and back a send of the rows and an
AllGather over tp on the receiving stage.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class TorchCollectives:
    """The collectives of a :class:`~chimera.torch.parallel_context.ParallelContext` on
    torch.distributed groups of its mesh axes (made by every rank at construction, as torch
    requires, so that a stage may make its first call while the other stage is elsewhere)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._groups = {axis: self._make_group(axis) for axis in ctx.names}

    def _make_group(self, axis: str):
        """This rank's group along `axis`; every rank creates every group, in the same order."""
        ctx = self.ctx
        stride = 1
        for name in ctx.names[ctx.names.index(axis) + 1:]:
            stride *= ctx.axes[name]
        mine = None
        seen = set()
        for r in range(dist.get_world_size()):
            base = r - ((r // stride) % ctx.axes[axis]) * stride
            if base in seen:
                continue
            seen.add(base)
            ranks = [base + i * stride for i in range(ctx.axes[axis])]
            group = dist.new_group(ranks)
            if ctx.rank in ranks:
                mine = group
        return mine

    def _scatter_rows(self, partial: torch.Tensor) -> torch.Tensor:
        rows = torch.empty((partial.shape[0] // self.ctx.size("tp"),) + tuple(partial.shape[1:]), dtype=partial.dtype)
        dist.reduce_scatter_tensor(rows, partial, group=self._groups["tp"])
        return rows

    def _gather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        out = torch.empty((rows.shape[0] * self.ctx.size("tp"),) + tuple(rows.shape[1:]), dtype=rows.dtype)
        dist.all_gather_into_tensor(out, rows, group=self._groups["tp"])
        return out

    def reduce_to_rows(self, partial: torch.Tensor) -> torch.Tensor:
        return self._scatter_rows(partial)

    def gather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        return self._gather_rows(rows)

    def all_reduce_(self, tensors: list[torch.Tensor], axes: list[str]) -> None:
        for axis in axes:
            for t in tensors:
                dist.all_reduce(t, group=self._groups[axis])

    def pipeline_send(self, partial, stage: int, shape, dtype):
        ctx = self.ctx
        if partial is not None:
            self.stage_send(partial)
            return None
        if ctx.coord("pp") == stage + 1:
            return self.stage_recv(shape, dtype)
        return None

    def pipeline_send_backward(self, grad_rows, stage: int, shape, dtype):
        ctx = self.ctx
        if grad_rows is not None:
            self.stage_send_backward(grad_rows)
            return None
        if ctx.coord("pp") == stage:
            return self.stage_recv_backward(shape, dtype)
        return None

    def stage_send(self, partial: torch.Tensor) -> None:
        rows = self._scatter_rows(partial) if self.ctx.size("tp") > 1 else partial
        dist.send(rows, self.ctx.pp_peer(1))

    def stage_recv(self, shape, dtype) -> torch.Tensor:
        rows = torch.empty((shape[0] // self.ctx.size("tp"),) + tuple(shape[1:]), dtype=dtype)
        dist.recv(rows, self.ctx.pp_peer(-1))
        return rows

    def stage_send_backward(self, grad_rows: torch.Tensor) -> None:
        dist.send(grad_rows, self.ctx.pp_peer(-1))

    def stage_recv_backward(self, shape, dtype) -> torch.Tensor:
        rows = torch.empty((shape[0] // self.ctx.size("tp"),) + tuple(shape[1:]), dtype=dtype)
        dist.recv(rows, self.ctx.pp_peer(1))
        return self._gather_rows(rows) if self.ctx.size("tp") > 1 else rows
