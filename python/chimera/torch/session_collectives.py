# SPDX-License-Identifier: Apache-2.0
"""The layers' collectives recorded on a chimera Session (``ParallelContext(comm="chimera")``).

Each call records what a framework without fusion writes (an AllReduce, an AllGather, a send
between stages) with a declaration of what the next computation reads, then flushes: the Session
fuses where its cost model says it pays (an AllReduce whose result is read by rows becomes a
ReduceScatter), or, with fusion off, runs the calls as recorded.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import chimera

from . import backend as _backend


class SessionCollectives:
    """The collectives of a :class:`~chimera.torch.parallel_context.ParallelContext` on a chimera
    Session over its mesh (``.session``)."""

    def __init__(self, ctx, fusion: bool, topology: str | None):
        self.ctx = ctx
        text = ",".join(f"{a}={s}" for a, s in ctx.axes.items())
        if dist.is_initialized():
            backend = _backend.mesh_backend(text, range(dist.get_world_size()))
        else:
            backend = chimera.mpi_backend(chimera.Mesh(text))
        if ctx.per_rank:
            # Per-rank recording cannot create a communicator later: every group of axes now.
            names = ctx.names
            groups = [[a for i, a in enumerate(names) if bits >> i & 1] for bits in range(1, 1 << len(names))]
            backend.create_groups(["+".join(g) for g in groups])
        self.session = chimera.Session(backend, fusion=fusion, per_rank=ctx.per_rank, topology=topology)

    def _tensor(self, t: torch.Tensor, shape, layout: str):
        """Records `t` (this rank's local tensor of the logical `shape`; empty on a rank that holds
        none) on the Session. Detached: the Session reads and writes it in place, by DLPack."""
        return self.session.tensor(t.detach(), layout, spec=_spec(shape, t.dtype))

    @staticmethod
    def _with(layout: str, more: str) -> str:
        return more if layout.endswith("=R") else f"{layout},{more}"

    def _stage_rows(self, stage: int, extra: str = "") -> str:
        rows = self.ctx.rows_layout(extra)
        return f"pp=@{stage}" if rows.endswith("=R") else f"pp=@{stage},{rows}"

    def reduce_to_rows(self, partial: torch.Tensor) -> torch.Tensor:
        ctx = self.ctx
        rows = partial.shape[0] // ctx.size("tp")
        t = ctx.coord("tp")
        h = self._tensor(partial, ctx.dp_rows_shape(partial.shape), self._with(ctx.rows_layout(), "tp=P"))
        h = self.session.all_reduce(h, "tp")
        self.session.declare_read(h, ctx.rows_layout("tp"))
        self.session.flush()
        return partial[t * rows:(t + 1) * rows].clone()

    def gather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        ctx = self.ctx
        tp = ctx.size("tp")
        out = torch.empty((rows.shape[0] * tp,) + tuple(rows.shape[1:]), dtype=rows.dtype)
        h = self._tensor(rows, ctx.dp_rows_shape(out.shape), ctx.rows_layout("tp"))
        self.session.all_gather(h, "tp", 0, out)
        self.session.flush()
        return out

    def all_reduce_(self, tensors: list[torch.Tensor], axes: list[str]) -> None:
        ctx = self.ctx
        joined = "+".join(a for a in ctx.names if a in axes)
        layout = f"pp=@{ctx.coord('pp')},{joined}=P" if ctx.on_stage() and "pp" not in axes else f"{joined}=P"
        for t in tensors:
            h = self._tensor(t, list(t.shape), layout)
            self.session.all_reduce(h, joined)
        self.session.flush()

    def pipeline_send(self, partial, stage: int, shape, dtype):
        ctx = self.ctx
        tp = ctx.size("tp")
        receives = ctx.coord("pp") == stage + 1
        buf = partial if partial is not None else torch.empty(0, dtype=dtype)
        recv = torch.empty(shape, dtype=dtype) if receives else None
        h = self._tensor(buf, ctx.dp_rows_shape(shape),
                         self._with(self._stage_rows(stage), "tp=P") if tp > 1 else self._stage_rows(stage))
        if tp > 1:
            h = self.session.all_reduce(h, "tp")
        h = self.session.send(h, "pp", recv)
        self.session.declare_read(h, self._stage_rows(stage + 1, "tp" if tp > 1 else ""))
        self.session.flush()
        if not receives:
            return None
        rows, t = shape[0] // tp, ctx.coord("tp")
        return recv[t * rows:(t + 1) * rows].clone()

    def pipeline_send_backward(self, grad_rows, stage: int, shape, dtype):
        ctx = self.ctx
        tp = ctx.size("tp")
        holds = grad_rows is not None
        receives = ctx.coord("pp") == stage
        buf = grad_rows if holds else torch.empty(0, dtype=dtype)
        gathered = torch.empty(shape, dtype=dtype) if holds else torch.empty(0, dtype=dtype)
        recv = torch.empty(shape, dtype=dtype) if receives else None
        h = self._tensor(buf, ctx.dp_rows_shape(shape), self._stage_rows(stage + 1, "tp" if tp > 1 else ""))
        if tp > 1:
            h = self.session.all_gather(h, "tp", 0, gathered)
        h = self.session.send_backward(h, "pp", recv)
        self.session.declare_read(h, self._stage_rows(stage))
        self.session.flush()
        return recv

    def stage_send(self, partial: torch.Tensor) -> None:
        ctx = self.ctx
        tp = ctx.size("tp")
        base = ctx.rows_layout()
        h = self._tensor(partial, ctx.dp_rows_shape(partial.shape), f"{base},tp=P" if tp > 1 else base)
        if tp > 1:
            h = self.session.all_reduce(h, "tp")
        self.session.send(h, "pp", None)
        self.session.flush()

    def stage_recv(self, shape, dtype) -> torch.Tensor:
        ctx = self.ctx
        tp, t = ctx.size("tp"), ctx.coord("tp")
        rows = shape[0] // tp
        full = torch.empty(tuple(shape), dtype=dtype)
        spec = _spec(ctx.dp_rows_shape(shape), dtype)
        h = self.session.recv(full, ctx.rows_layout(), "pp", spec=spec)
        self.session.declare_read(h, ctx.rows_layout("tp" if tp > 1 else ""))
        self.session.flush()
        return full[t * rows:(t + 1) * rows].clone()

    def stage_send_backward(self, grad_rows: torch.Tensor) -> None:
        ctx = self.ctx
        tp = ctx.size("tp")
        shape = [grad_rows.shape[0] * tp] + list(grad_rows.shape[1:])
        h = self._tensor(grad_rows, ctx.dp_rows_shape(shape), ctx.rows_layout("tp" if tp > 1 else ""))
        gathered = torch.empty(shape, dtype=grad_rows.dtype)  # written at the flush: alive until then
        if tp > 1:
            h = self.session.all_gather(h, "tp", 0, gathered)
        self.session.send_backward(h, "pp", None)
        self.session.flush()

    def stage_recv_backward(self, shape, dtype) -> torch.Tensor:
        ctx = self.ctx
        out = torch.empty(tuple(shape), dtype=dtype)
        spec = _spec(ctx.dp_rows_shape(shape), dtype)
        h = self.session.recv_backward(out, ctx.rows_layout(), "pp", spec=spec)
        self.session.declare_read(h, ctx.rows_layout())
        self.session.flush()
        return out


def _spec(shape, dtype) -> chimera.TensorSpec:
    return chimera.TensorSpec([int(n) for n in shape], dtype)
