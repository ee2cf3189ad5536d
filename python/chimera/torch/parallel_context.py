# SPDX-License-Identifier: Apache-2.0
"""The mesh the layers of :mod:`chimera.torch.layers` run on, and the collectives they issue.

A :class:`ParallelContext` knows the mesh (its axes, this rank's coordinates, the layouts of token
rows) and hands each collective to one of two implementations of the same calls:
:class:`~chimera.torch.session_collectives.SessionCollectives` (``comm="chimera"``, recorded on a
chimera Session, which fuses) or :class:`~chimera.torch.torch_collectives.TorchCollectives`
(``comm="torch"``, the same collectives issued with torch.distributed: the unfused reference).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

import chimera

from .session_collectives import SessionCollectives
from .torch_collectives import TorchCollectives


class ParallelContext:
    """A mesh (e.g. ``{"dp": 2, "tp": 4}``, row-major over the world: torch.distributed's when it
    is initialised, else the MPI world's) and the collectives the layers need on it.

    ``comm="chimera"`` records them on a chimera Session (``.session``: on the world's host
    backend, the tensors crossing by DLPack: ``chimera.torch.backend.mesh_backend``, so MPI under
    an MPI launch and gloo under torchrun; ``chimera.mpi_backend`` without torch.distributed);
    ``fusion=False`` runs them exactly as recorded. ``comm="torch"`` issues the same collectives
    with torch.distributed on groups of the current default backend instead (the unfused
    reference, e.g. gloo; it needs torch.distributed initialised, and ``.session`` is None).

    ``per_rank=True`` records per rank (``SessionOptions::perRank``), what a pipeline schedule
    needs: on a mesh with a ``pp`` axis each stage records only its own calls, its tensors placed
    on its stage (``pp=@k``), and the stage hand-offs are :meth:`stage_send` / :meth:`stage_recv`
    and their backward :meth:`stage_send_backward` / :meth:`stage_recv_backward`. The default
    (SPMD) has every rank record every call, as :meth:`pipeline_send` does.

    ``topology`` names the Session's cost model (``chimera.Session``'s ``cost``): ``None`` takes the
    backend's own (``host:N`` on the host backends, whose margin keeps windows with little to gain
    as recorded), ``"bytes"`` fuses whenever fewer bytes move, or a preset or profile file.

    ``comm_seconds`` adds up the wall time spent in the collectives."""

    def __init__(self, axes: dict[str, int], fusion: bool = True, comm: str = "chimera", per_rank: bool = False,
                 topology: str | None = None):
        if comm not in ("chimera", "torch"):
            raise chimera.InvalidArgument(f"comm must be 'chimera' or 'torch', not {comm!r}")
        if comm == "torch" and not dist.is_initialized():
            raise chimera.InvalidArgument("comm='torch' needs torch.distributed initialised")
        self.axes = dict(axes)
        self.names = list(self.axes)
        self.comm = comm
        self.per_rank = per_rank
        rank, size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else chimera.world()
        total = 1
        for s in self.axes.values():
            total *= s
        if total != size:
            raise chimera.InvalidArgument(f"mesh {self.axes} has {total} ranks but the world has {size}")
        self.rank = rank
        self.coords = {}
        rest = rank
        for name in reversed(self.names):
            self.coords[name] = rest % self.axes[name]
            rest //= self.axes[name]
        if comm == "chimera":
            self._collectives = SessionCollectives(self, fusion, topology)
            self.session = self._collectives.session
        else:
            self._collectives = TorchCollectives(self)
            self.session = None
        self.comm_seconds = 0.0

    # --- mesh facts --------------------------------------------------------------------------
    def size(self, axis: str) -> int:
        return self.axes.get(axis, 1)

    def coord(self, axis: str) -> int:
        return self.coords.get(axis, 0)

    def on_stage(self) -> bool:
        """Whether this rank records per rank on a pipeline stage (``per_rank`` and a ``pp`` axis)."""
        return self.per_rank and "pp" in self.axes

    def rows_layout(self, extra: str = "") -> str:
        """Layout of token rows: split over dp (if any), then over `extra` axes inside it; per
        rank on a pp mesh, placed on this rank's stage."""
        parts = [a for a in ("dp",) if a in self.axes] + ([extra] if extra else [])
        rows = "+".join(parts) + "=S0" if parts else ""
        if self.on_stage():
            return f"pp=@{self.coord('pp')}" + (f",{rows}" if rows else "")
        return rows or f"{self.names[0]}=R"

    def dp_rows_shape(self, local_rows_shape) -> list[int]:
        """The logical [rows over dp, f] of a [rows of this dp shard, f] tensor."""
        return [local_rows_shape[0] * self.size("dp")] + list(local_rows_shape[1:])

    def pp_peer(self, step: int) -> int:
        """The world rank `step` stages on (negative: back) at this rank's other coordinates."""
        stride = 1
        for name in self.names[self.names.index("pp") + 1:]:
            stride *= self.axes[name]
        return self.rank + step * stride

    # --- the collectives the layers use ------------------------------------------------------
    def reduce_to_rows(self, partial: torch.Tensor) -> torch.Tensor:
        """`partial` ([rows of this dp shard, f], partial over tp) summed over tp; returns this
        rank's rows of the sum (sequence parallel). Recorded as allreduce:tp + a read of the rows."""
        if self.size("tp") == 1:
            return partial
        return self._timed(self._collectives.reduce_to_rows, partial.contiguous())

    def gather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's rows gathered over tp into the rows of its dp shard (allgather:tp:0)."""
        if self.size("tp") == 1:
            return rows
        return self._timed(self._collectives.gather_rows, rows.contiguous())

    def all_reduce_(self, tensors: list[torch.Tensor], axes: list[str]) -> None:
        """Sums each tensor over the mesh axes `axes` in place (gradients of parameters replicated
        over those axes, e.g. the row-parallel bias over dp and tp), as one Session window."""
        axes = [a for a in axes if self.size(a) > 1]
        if not axes or not tensors:
            return
        for t in tensors:
            if not t.is_contiguous():
                raise chimera.InvalidArgument("all_reduce_ sums in place: every tensor must be contiguous")
        self._timed(self._collectives.all_reduce_, tensors, axes)

    # --- pipeline hand-off (SPMD) -------------------------------------------------------------
    def pipeline_send(self, partial, stage: int, shape, dtype=torch.float32):
        """Stage `stage` hands its output, partial over tp (``partial``: [rows of the dp shard, f]
        on its ranks, None elsewhere), to stage+1, which reads only its rows (sequence parallel).
        Recorded as allreduce:tp + send:pp; the Session fuses that into a ReduceScatter and a
        many-to-many of shards. Call on every rank (SPMD); returns this rank's rows on stage+1,
        None on the other ranks. `shape` is the local [rows, f] of `partial`."""
        self._require_spmd_stages("pipeline_send", stage)
        holds = self.coord("pp") == stage
        buf = partial.detach().contiguous() if holds else None
        return self._timed(self._collectives.pipeline_send, buf, stage, list(shape), dtype)

    def pipeline_send_backward(self, grad_rows, stage: int, shape, dtype=torch.float32):
        """The backward of :meth:`pipeline_send`: stage+1's ranks pass the gradient of their rows,
        stage `stage` receives the full gradient of its partial input ([rows, f], every tp rank
        alike). Recorded as allgather:tp + send:pp:backward with stage reading it whole; call on
        every rank; returns the gradient on stage's ranks, None elsewhere."""
        self._require_spmd_stages("pipeline_send_backward", stage)
        holds = self.coord("pp") == stage + 1
        buf = grad_rows.detach().contiguous() if holds else None
        return self._timed(self._collectives.pipeline_send_backward, buf, stage, list(shape), dtype)

    # --- per-rank pipeline stage hand-offs (per_rank=True) -------------------------------------
    def stage_send(self, partial: torch.Tensor) -> None:
        """Forward hand-off, sending side: this stage's output `partial` ([rows of the dp shard,
        f], partial over tp: the sum over tp is the activation) goes to the next stage, whose
        ranks read their own rows (sequence parallel). Recorded as allreduce:tp + send:pp; fused,
        a ReduceScatter and a many-to-many of the shards. `torch` comm: reduce_scatter over tp,
        then a send of the rows to the same (dp, tp) rank of the next stage."""
        self._require_stage("stage_send", last_ok=False, first_ok=True)
        self._timed(self._collectives.stage_send, partial.detach().contiguous())

    def stage_recv(self, shape, dtype=torch.float32) -> torch.Tensor:
        """Forward hand-off, receiving side: returns this rank's rows ([shape[0] / tp, f]) of the
        activation the previous stage sent with :meth:`stage_send` (`shape`: its [rows, f])."""
        self._require_stage("stage_recv", last_ok=True, first_ok=False)
        return self._timed(self._collectives.stage_recv, list(shape), dtype)

    def stage_send_backward(self, grad_rows: torch.Tensor) -> None:
        """Backward hand-off, sending side: the gradient of the rows :meth:`stage_recv` returned
        goes back to the previous stage, which needs it whole over tp. Recorded as allgather:tp
        + send:pp:backward. `torch` comm: a send of the rows (the receiver gathers over tp)."""
        self._require_stage("stage_send_backward", last_ok=True, first_ok=False)
        self._timed(self._collectives.stage_send_backward, grad_rows.detach().contiguous())

    def stage_recv_backward(self, shape, dtype=torch.float32) -> torch.Tensor:
        """Backward hand-off, receiving side: the gradient of the `partial` this stage sent with
        :meth:`stage_send` ([rows, f] = `shape`, the same on every tp rank)."""
        self._require_stage("stage_recv_backward", last_ok=False, first_ok=True)
        return self._timed(self._collectives.stage_recv_backward, list(shape), dtype)

    def stats(self) -> dict:
        """The Session's counters (bytes as recorded vs sent, fused chains, windows); empty for
        ``comm="torch"``."""
        return dict(self.session.stats()) if self.session is not None else {}

    # --- checks and timing ---------------------------------------------------------------------
    def _require_spmd_stages(self, what: str, stage: int) -> None:
        if "pp" not in self.axes:
            raise chimera.InvalidArgument(f"{what} needs a 'pp' mesh axis")
        if self.per_rank:
            raise chimera.InvalidArgument(f"{what} is the SPMD hand-off: per_rank=True uses stage_send / stage_recv")
        if not 0 <= stage < self.size("pp") - 1:
            raise chimera.InvalidArgument(f"{what}: stage {stage} has no next stage (pp={self.size('pp')})")

    def _require_stage(self, what: str, last_ok: bool, first_ok: bool) -> None:
        if not self.on_stage():
            raise chimera.InvalidArgument(f"{what} needs per_rank=True and a 'pp' mesh axis")
        stage, stages = self.coord("pp"), self.size("pp")
        if (stage == stages - 1 and not last_ok) or (stage == 0 and not first_ok):
            raise chimera.InvalidArgument(f"{what} is not a call of stage {stage} of {stages}")

    def _timed(self, call, *args):
        start = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.comm_seconds += time.perf_counter() - start
