# SPDX-License-Identifier: Apache-2.0
"""Megatron-style tensor + sequence parallel layers whose collectives go through a chimera Session.

Every collective a layer needs, forward and backward, is recorded on the Session of a
:class:`ParallelContext`, written the way a framework without fusion writes it, with a
declaration of what the next computation reads; the Session fuses where that pays:

* the partial output of a row-parallel matmul: ``allreduce:tp`` + "the next op reads my rows"
  (sequence parallelism) runs as one ReduceScatter; the backward of a column-parallel matmul
  (its partial input gradient) likewise;
* the sequence-parallel input of a column-parallel matmul (and the backward of a row-parallel
  one): ``allgather:tp``;
* the pipeline hand-off ``allreduce:tp`` + ``send:pp`` with the next stage reading its rows:
  ReduceScatter + a many-to-many of the shards (:meth:`ParallelContext.pipeline_send`, and per
  rank :meth:`ParallelContext.stage_send` / :meth:`ParallelContext.stage_recv`).

MoE token dispatch and combine are :mod:`chimera.torch.moe` (the routed exchange).

With ``fusion=False`` the same calls run exactly as recorded (an AllReduce, then a local slice).
Tokens are rows of 2-D activations ``[tokens, features]``, sharded over ``dp`` (when the mesh has
it) and, in sequence-parallel regions, over ``tp`` inside it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import chimera

from . import backend as _backend


class ParallelContext:
    """A mesh (e.g. ``{"dp": 2, "tp": 4}``, row-major over the world: torch.distributed's when it
    is initialised, else the MPI world's) and the chimera Session the layers record on
    (``.session``: a ``chimera.Session`` on the world's host backend, the tensors crossing by
    DLPack: ``chimera.torch.backend.mesh_backend``, so MPI under an MPI launch and gloo under
    torchrun; ``chimera.mpi_backend`` without torch.distributed). ``comm="torch"`` issues the same collectives with
    torch.distributed on groups of the current default backend instead (the unfused reference,
    e.g. gloo).

    ``per_rank=True`` records per rank (``SessionOptions::perRank``), what a pipeline schedule
    needs: on a mesh with a ``pp`` axis each stage records only its own calls, its tensors placed
    on its stage (``pp=@k``), and the stage hand-offs are :meth:`stage_send` / :meth:`stage_recv`
    and their backward :meth:`stage_send_backward` / :meth:`stage_recv_backward`. The default (SPMD) has
    every rank record every call, as :meth:`pipeline_send` does.

    ``topology`` names the Session's cost model (``chimera.Session``'s ``cost``): ``None`` takes the
    backend's own (``host:N`` on the host backends, whose margin keeps windows with little to gain
    as recorded), ``"bytes"`` fuses whenever fewer bytes move, or a preset or profile file."""

    def __init__(self, axes: dict[str, int], fusion: bool = True, comm: str = "chimera", per_rank: bool = False,
                 topology: str | None = None):
        if comm not in ("chimera", "torch"):
            raise chimera.InvalidArgument(f"comm must be 'chimera' or 'torch', not {comm!r}")
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
        self.session = self._session(fusion, topology) if comm == "chimera" else None
        self._groups = {}
        if comm == "torch" and per_rank:
            # A stage makes its first call on a group while the other stage is elsewhere, but
            # torch creates groups collectively over the world: create them all now.
            for axis in self.names:
                self._torch_group(axis)
        self.comm_seconds = 0.0

    def _session(self, fusion: bool, topology: str | None):
        text = ",".join(f"{a}={s}" for a, s in self.axes.items())
        if dist.is_initialized():
            backend = _backend.mesh_backend(text, range(dist.get_world_size()))
        else:
            backend = chimera.mpi_backend(chimera.Mesh(text))
        if self.per_rank:
            # Per-rank recording cannot create a communicator later: every group of axes now.
            groups = [[a for i, a in enumerate(self.names) if bits >> i & 1] for bits in range(1, 1 << len(self.names))]
            backend.create_groups(["+".join(g) for g in groups])
        return chimera.Session(backend, fusion=fusion, per_rank=self.per_rank, cost=topology)

    @staticmethod
    def _spec(shape, dtype) -> chimera.TensorSpec:
        return chimera.TensorSpec([int(n) for n in shape], dtype)

    def _tensor(self, t: torch.Tensor, shape, layout: str):
        """Records `t` (this rank's local tensor of the logical `shape`; empty on a rank that holds
        none) on the Session. Detached: the Session reads and writes it in place, by DLPack."""
        return self.session.tensor(t.detach(), layout, spec=self._spec(shape, t.dtype))

    # --- mesh facts --------------------------------------------------------------------------
    def size(self, axis: str) -> int:
        return self.axes.get(axis, 1)

    def coord(self, axis: str) -> int:
        return self.coords.get(axis, 0)

    def _rows_layout(self, extra: str = "") -> str:
        """Layout of token rows: split over dp (if any), then over `extra` axes inside it; per
        rank on a pp mesh, placed on this rank's stage."""
        parts = [a for a in ("dp",) if a in self.axes] + ([extra] if extra else [])
        rows = "+".join(parts) + "=S0" if parts else ""
        if self._on_stage():
            return f"pp=@{self.coord('pp')}" + (f",{rows}" if rows else "")
        return rows or f"{self.names[0]}=R"

    def _on_stage(self) -> bool:
        return self.per_rank and "pp" in self.axes

    def _with(self, layout: str, more: str) -> str:
        return more if layout.endswith("=R") else f"{layout},{more}"

    def _torch_group(self, axis: str):

        if axis not in self._groups:
            mine = None
            idx = self.names.index(axis)
            stride = 1
            for name in self.names[idx + 1:]:
                stride *= self.axes[name]
            # Every rank creates every group of `axis`, in the same order (torch requires it).
            seen = set()
            for r in range(dist.get_world_size()):
                base = r - ((r // stride) % self.axes[axis]) * stride
                if base in seen:
                    continue
                seen.add(base)
                ranks = [base + i * stride for i in range(self.axes[axis])]
                g = dist.new_group(ranks)
                if self.rank in ranks:
                    mine = g
            self._groups[axis] = mine
        return self._groups[axis]

    # --- the collectives the layers use ------------------------------------------------------
    def reduce_to_rows(self, partial: torch.Tensor) -> torch.Tensor:
        """`partial` ([rows of this dp shard, f], partial over tp) summed over tp; returns this
        rank's rows of the sum (sequence parallel). Recorded as allreduce:tp + a read of the rows."""
        tp = self.size("tp")
        rows = partial.shape[0] // tp
        mine = slice(self.coord("tp") * rows, (self.coord("tp") + 1) * rows)
        if tp == 1:
            return partial
        partial = partial.contiguous()
        start = _now()
        if self.session is None:

            out = torch.empty((rows,) + tuple(partial.shape[1:]), dtype=partial.dtype)
            dist.reduce_scatter_tensor(out, partial, group=self._torch_group("tp"))
        else:
            shape = [partial.shape[0] * self.size("dp")] + list(partial.shape[1:])
            base = self._rows_layout()
            h = self._tensor(partial, shape, self._with(base, "tp=P"))
            h = self.session.all_reduce(h, "tp")
            self.session.declare_read(h, self._rows_layout("tp"))
            self.session.flush()
            out = partial[mine].clone()
        self.comm_seconds += _now() - start
        return out

    def gather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's rows gathered over tp into the rows of its dp shard (allgather:tp:0)."""
        tp = self.size("tp")
        if tp == 1:
            return rows
        rows = rows.contiguous()
        out = torch.empty((rows.shape[0] * tp,) + tuple(rows.shape[1:]), dtype=rows.dtype)
        start = _now()
        if self.session is None:

            dist.all_gather_into_tensor(out, rows, group=self._torch_group("tp"))
        else:
            shape = [rows.shape[0] * tp * self.size("dp")] + list(rows.shape[1:])
            h = self._tensor(rows, shape, self._rows_layout("tp"))
            self.session.all_gather(h, "tp", 0, out)
            self.session.flush()
        self.comm_seconds += _now() - start
        return out

    def all_reduce_(self, tensors: list[torch.Tensor], axes: list[str]) -> None:
        """Sums each tensor over the mesh axes `axes` in place (gradients of replicated
        parameters), as one Session window."""
        axes = [a for a in axes if self.size(a) > 1]
        if not axes or not tensors:
            return
        start = _now()
        if self.session is None:

            for axis in axes:
                group = self._torch_group(axis)
                for t in tensors:
                    dist.all_reduce(t, group=group)
        else:
            joined = "+".join(a for a in self.names if a in axes)
            layout = f"pp=@{self.coord('pp')},{joined}=P" if self._on_stage() and "pp" not in axes else f"{joined}=P"
            for t in tensors:
                assert t.is_contiguous()
                h = self._tensor(t, list(t.shape), layout)
                self.session.all_reduce(h, joined)
            self.session.flush()
        self.comm_seconds += _now() - start

    # --- pipeline hand-off ----------------------------------------------------------------------
    def _stage_rows(self, stage: int, extra: str = "") -> str:
        return f"pp=@{stage}," + self._rows_layout(extra) if not self._rows_layout(extra).endswith("=R") \
            else f"pp=@{stage}"

    def pipeline_send(self, partial, stage: int, shape, dtype=torch.float32):
        """Stage `stage` hands its output, partial over tp (``partial``: [rows of the dp shard, f]
        on its ranks, None elsewhere), to stage+1, which reads only its rows (sequence parallel).
        Recorded as allreduce:tp + send:pp; the Session fuses that into a ReduceScatter and a
        many-to-many of shards. Call on every rank (SPMD); returns this rank's rows on stage+1,
        None on the other ranks. `shape` is the local [rows, f] of `partial`."""
        if "pp" not in self.axes:
            raise chimera.InvalidArgument("pipeline_send needs a 'pp' mesh axis")
        mine_stage = self.coord("pp")
        tp = self.size("tp")
        rows = shape[0] // tp
        full = [shape[0] * self.size("dp")] + list(shape[1:])
        holds = mine_stage == stage
        receives = mine_stage == stage + 1
        buf = partial.contiguous() if holds else torch.empty(0, dtype=dtype)
        recv = torch.empty(list(shape), dtype=dtype) if receives else None
        start = _now()
        h = self._tensor(buf, full, self._with(self._stage_rows(stage), "tp=P") if tp > 1 else
                                self._stage_rows(stage))
        if tp > 1:
            h = self.session.all_reduce(h, "tp")
        h = self.session.send(h, "pp", recv)
        self.session.declare_read(h, self._stage_rows(stage + 1, "tp" if tp > 1 else ""))
        self.session.flush()
        self.comm_seconds += _now() - start
        if not receives:
            return None
        t = self.coord("tp")
        return recv[t * rows:(t + 1) * rows].clone()

    def pipeline_send_backward(self, grad_rows, stage: int, shape, dtype=torch.float32):
        """The backward of :meth:`pipeline_send`: stage+1's ranks pass the gradient of their rows,
        stage `stage` receives the full gradient of its partial input ([rows, f], every tp rank
        alike). Recorded as allgather:tp + send:pp:backward with stage reading it whole; call on every
        rank; returns the gradient on stage's ranks, None elsewhere."""
        tp = self.size("tp")
        full = [shape[0] * self.size("dp")] + list(shape[1:])
        mine_stage = self.coord("pp")
        holds = mine_stage == stage + 1
        receives = mine_stage == stage
        buf = grad_rows.contiguous() if holds else torch.empty(0, dtype=dtype)
        gathered = torch.empty(list(shape), dtype=dtype) if holds else None
        recv = torch.empty(list(shape), dtype=dtype) if receives else None
        start = _now()
        h = self._tensor(buf, full, self._stage_rows(stage + 1, "tp" if tp > 1 else ""))
        if tp > 1:
            h = self.session.all_gather(h, "tp", 0, gathered if gathered is not None else torch.empty(0, dtype=dtype))
        h = self.session.send_backward(h, "pp", recv)
        self.session.declare_read(h, self._stage_rows(stage))
        self.session.flush()
        self.comm_seconds += _now() - start
        return recv

    # --- per-rank pipeline stage hand-offs (per_rank=True) -------------------------------------
    def _pp_peer(self, step: int) -> int:
        stride = 1
        for name in self.names[self.names.index("pp") + 1:]:
            stride *= self.axes[name]
        return self.rank + step * stride

    def _dp_rows_shape(self, local_rows_shape) -> list[int]:
        """The logical [rows over dp, f] of a [rows of this dp shard, f] tensor."""
        return [local_rows_shape[0] * self.size("dp")] + list(local_rows_shape[1:])

    def _require_stage(self, what: str, last_ok: bool, first_ok: bool) -> None:
        if not self._on_stage():
            raise chimera.InvalidArgument(f"{what} needs per_rank=True and a 'pp' mesh axis")
        stage, stages = self.coord("pp"), self.size("pp")
        if (stage == stages - 1 and not last_ok) or (stage == 0 and not first_ok):
            raise chimera.InvalidArgument(f"{what} is not a call of stage {stage} of {stages}")

    def stage_send(self, partial: torch.Tensor) -> None:
        """Forward hand-off, sending side: this stage's output `partial` ([rows of the dp shard,
        f], partial over tp: the sum over tp is the activation) goes to the next stage, whose
        ranks read their own rows (sequence parallel). Recorded as allreduce:tp + send:pp; fused,
        a ReduceScatter and a many-to-many of the shards. `torch` comm: reduce_scatter over tp,
        then a send of the rows to the same (dp, tp) rank of the next stage."""
        self._require_stage("stage_send", last_ok=False, first_ok=True)
        partial = partial.detach().contiguous()
        tp = self.size("tp")
        start = _now()
        if self.session is None:

            rows = partial
            if tp > 1:
                rows = torch.empty((partial.shape[0] // tp,) + tuple(partial.shape[1:]), dtype=partial.dtype)
                dist.reduce_scatter_tensor(rows, partial, group=self._torch_group("tp"))
            dist.send(rows, self._pp_peer(1))
        else:
            base = self._rows_layout()
            h = self._tensor(partial, self._dp_rows_shape(partial.shape), f"{base},tp=P" if tp > 1 else base)
            if tp > 1:
                h = self.session.all_reduce(h, "tp")
            self.session.send(h, "pp", None)
            self.session.flush()
        self.comm_seconds += _now() - start

    def stage_recv(self, shape, dtype=torch.float32) -> torch.Tensor:
        """Forward hand-off, receiving side: returns this rank's rows ([shape[0] / tp, f]) of the
        activation the previous stage sent with :meth:`stage_send` (`shape`: its [rows, f])."""
        self._require_stage("stage_recv", last_ok=True, first_ok=False)
        tp, t = self.size("tp"), self.coord("tp")
        rows = shape[0] // tp
        start = _now()
        if self.session is None:

            out = torch.empty((rows,) + tuple(shape[1:]), dtype=dtype)
            dist.recv(out, self._pp_peer(-1))
        else:
            full = torch.empty(tuple(shape), dtype=dtype)
            h = self.session.recv(full, self._rows_layout(), "pp", spec=self._spec(self._dp_rows_shape(shape), dtype))
            self.session.declare_read(h, self._rows_layout("tp" if tp > 1 else ""))
            self.session.flush()
            out = full[t * rows:(t + 1) * rows].clone()
        self.comm_seconds += _now() - start
        return out

    def stage_send_backward(self, grad_rows: torch.Tensor) -> None:
        """Backward hand-off, sending side: the gradient of the rows :meth:`stage_recv` returned
        goes back to the previous stage, which needs it whole over tp. Recorded as allgather:tp
        + send:pp:backward. `torch` comm: a send of the rows (the receiver gathers over tp)."""
        self._require_stage("stage_send_backward", last_ok=True, first_ok=False)
        grad_rows = grad_rows.detach().contiguous()
        tp = self.size("tp")
        shape = [grad_rows.shape[0] * tp] + list(grad_rows.shape[1:])
        start = _now()
        if self.session is None:

            dist.send(grad_rows, self._pp_peer(-1))
        else:
            h = self._tensor(grad_rows, self._dp_rows_shape(shape), self._rows_layout("tp" if tp > 1 else ""))
            gathered = torch.empty(shape, dtype=grad_rows.dtype)  # written at the flush: alive until then
            if tp > 1:
                h = self.session.all_gather(h, "tp", 0, gathered)
            self.session.send_backward(h, "pp", None)
            self.session.flush()
        self.comm_seconds += _now() - start

    def stage_recv_backward(self, shape, dtype=torch.float32) -> torch.Tensor:
        """Backward hand-off, receiving side: the gradient of the `partial` this stage sent with
        :meth:`stage_send` ([rows, f] = `shape`, the same on every tp rank)."""
        self._require_stage("stage_recv_backward", last_ok=False, first_ok=True)
        tp = self.size("tp")
        start = _now()
        if self.session is None:

            rows = torch.empty((shape[0] // tp,) + tuple(shape[1:]), dtype=dtype)
            dist.recv(rows, self._pp_peer(1))
            out = rows
            if tp > 1:
                out = torch.empty(tuple(shape), dtype=dtype)
                dist.all_gather_into_tensor(out, rows, group=self._torch_group("tp"))
        else:
            out = torch.empty(tuple(shape), dtype=dtype)
            spec = self._spec(self._dp_rows_shape(shape), dtype)
            h = self.session.recv_backward(out, self._rows_layout(), "pp", spec=spec)
            self.session.declare_read(h, self._rows_layout())
            self.session.flush()
        self.comm_seconds += _now() - start
        return out

    def stats(self) -> dict:
        """The Session's counters (bytes as recorded vs sent, fused chains, windows)."""
        return dict(self.session.stats()) if self.session is not None else {}


def _now() -> float:
    import time

    return time.perf_counter()


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
    The bias is replicated over tp (its gradient needs a sum over tp: ``replicated_parameters``)."""

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
