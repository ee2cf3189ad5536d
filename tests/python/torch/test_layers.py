# SPDX-License-Identifier: Apache-2.0
# The Megatron-style layers against a single-process reference: a column- then row-parallel MLP
# with sequence parallelism on meshes tp=4 and dp=2,tp=2 (4 ranks), on a chimera Session with
# fusion on and off and on torch.distributed (comm="torch", the reference path). Every rank
# computes the unsplit model locally and checks its outputs and its shards of the gradients. The
# pipeline hand-offs on pp=2,tp=2, SPMD (pipeline_send and its backward) and per rank (stage_send /
# stage_recv and their backwards), against values every rank computes locally, for the same three:
# fused (fewer bytes sent than recorded) with fusion on, as recorded with it off.
import pytest
import torch
import torch.distributed as dist

import chimera
from chimera.torch.layers import ColumnParallelLinear, RowParallelLinear
from chimera.torch.parallel_context import ParallelContext

from conftest import agree

TOKENS, HIDDEN, FFN = 16, 8, 16
ROWS, F = 8, 6  # the pipeline hand-off's [rows, features]


def reference(x, w1, b1, w2, b2):
    x = x.clone().requires_grad_(True)
    w1, b1, w2, b2 = (t.clone().requires_grad_(True) for t in (w1, b1, w2, b2))
    y = torch.nn.functional.gelu(x @ w1.t() + b1) @ w2.t() + b2
    (y * torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape).sin()).sum().backward()
    return y.detach(), x.grad, w1.grad, b1.grad, w2.grad, b2.grad


# (comm, fusion): chimera's Session fused and unfused, and torch.distributed.
COMMS = [("chimera", True), ("chimera", False), ("torch", False)]
COMM_IDS = ["fused", "unfused", "torch"]


def bytes_ok(pctx, comm, fusion, gloo=None) -> bool:
    """Fusion on sends less than recorded, fusion off exactly that; torch has no Session. With
    `gloo`, a per-rank Session's counts of its own calls (rank_bytes_*), summed over the ranks."""
    if comm == "torch":
        return pctx.session is None and pctx.stats() == {}
    s = pctx.stats()
    prefix = "rank_" if gloo is not None else ""
    counts = torch.tensor([s[prefix + "bytes_sent"], s[prefix + "bytes_as_recorded"]], dtype=torch.int64)
    if gloo is not None:
        dist.all_reduce(counts, group=gloo)
    sent, recorded = counts.tolist()
    return sent < recorded if fusion else sent == recorded


@pytest.mark.parametrize("axes", [{"tp": 4}, {"dp": 2, "tp": 2}], ids=["tp4", "dp2tp2"])
@pytest.mark.parametrize("comm,fusion", COMMS, ids=COMM_IDS)
def test_mlp_matches_single_process(world, axes, comm, fusion):
    rank, n, gloo = world
    g = torch.Generator().manual_seed(7)
    x = torch.randn(TOKENS, HIDDEN, generator=g, dtype=torch.float64)
    w1 = torch.randn(FFN, HIDDEN, generator=g, dtype=torch.float64)
    b1 = torch.randn(FFN, generator=g, dtype=torch.float64)
    w2 = torch.randn(HIDDEN, FFN, generator=g, dtype=torch.float64)
    b2 = torch.randn(HIDDEN, generator=g, dtype=torch.float64)
    y_ref, gx_ref, gw1_ref, gb1_ref, gw2_ref, gb2_ref = reference(x, w1, b1, w2, b2)

    pctx = ParallelContext(axes, fusion=fusion, comm=comm, topology="bytes")  # fuses these small activations
    tp, dp = pctx.size("tp"), pctx.size("dp")
    col = ColumnParallelLinear(pctx, HIDDEN, FFN, w1, b1)
    row = RowParallelLinear(pctx, FFN, HIDDEN, w2, b2)
    rows = TOKENS // (dp * tp)
    first = (pctx.coord("dp") * tp + pctx.coord("tp")) * rows
    mine = slice(first, first + rows)
    x_rows = x[mine].clone().requires_grad_(True)
    y_rows = row(torch.nn.functional.gelu(col(x_rows)))
    weights = torch.arange(y_ref.numel(), dtype=y_ref.dtype).reshape(y_ref.shape).sin()
    (y_rows * weights[mine]).sum().backward()
    # Gradients of parameters: sharded ones over dp, replicated ones (row bias) over dp and tp.
    pctx.all_reduce_([col.weight.grad, col.bias.grad, row.weight.grad], ["dp"])
    pctx.all_reduce_([row.bias.grad], ["dp", "tp"])

    f, t = FFN // tp, pctx.coord("tp")
    ok = torch.allclose(y_rows.detach(), y_ref[mine], rtol=1e-12, atol=1e-12)
    ok &= torch.allclose(x_rows.grad, gx_ref[mine], rtol=1e-12, atol=1e-12)
    ok &= torch.allclose(col.weight.grad, gw1_ref[t * f:(t + 1) * f], rtol=1e-12, atol=1e-12)
    ok &= torch.allclose(col.bias.grad, gb1_ref[t * f:(t + 1) * f], rtol=1e-12, atol=1e-12)
    ok &= torch.allclose(row.weight.grad, gw2_ref[:, t * f:(t + 1) * f], rtol=1e-12, atol=1e-12)
    ok &= torch.allclose(row.bias.grad, gb2_ref, rtol=1e-12, atol=1e-12)
    # Fusion on: the row-parallel forward and column-parallel backward ran as ReduceScatters,
    # which send less than the recorded AllReduces.
    fused_ok = bytes_ok(pctx, comm, fusion) and (pctx.stats()["fused_chains"] > 0 if fusion else True)
    ok &= pctx.comm_seconds > 0
    agree(bool(ok) and fused_ok, gloo, f"layers {axes} {comm} fusion={fusion}: stats {pctx.stats()}")


def partial_of(tp_rank):
    return (torch.arange(ROWS * F, dtype=torch.float64).reshape(ROWS, F) % 7 + tp_rank * 3)


@pytest.mark.parametrize("comm,fusion", COMMS, ids=COMM_IDS)
def test_pipeline_handoff_forward_and_backward(world, comm, fusion):
    rank, n, gloo = world
    pctx = ParallelContext({"pp": 2, "tp": 2}, fusion=fusion, comm=comm, topology="bytes")
    stage, t = pctx.coord("pp"), pctx.coord("tp")
    total = partial_of(0) + partial_of(1)
    got = pctx.pipeline_send(partial_of(t) if stage == 0 else None, 0, (ROWS, F), torch.float64)
    rows = slice(t * ROWS // 2, (t + 1) * ROWS // 2)
    ok = got is None if stage == 0 else torch.equal(got, total[rows])
    grad_full = torch.arange(ROWS * F, dtype=torch.float64).reshape(ROWS, F) * 0.5
    back = pctx.pipeline_send_backward(grad_full[rows].clone() if stage == 1 else None, 0, (ROWS, F), torch.float64)
    ok = ok and (back is None if stage == 1 else torch.equal(back, grad_full))
    ok = ok and bytes_ok(pctx, comm, fusion)
    agree(bool(ok), gloo, f"pipeline hand-off {comm} fusion={fusion}: {pctx.stats()}")


@pytest.mark.parametrize("comm,fusion", COMMS, ids=COMM_IDS)
def test_stage_handoff_per_rank(world, comm, fusion):
    """The per-rank hand-offs a pipeline schedule makes: stage 0 sends its partial output and
    receives the gradient back, stage 1 receives its rows and sends their gradient."""
    rank, n, gloo = world
    pctx = ParallelContext({"pp": 2, "tp": 2}, fusion=fusion, comm=comm, per_rank=True, topology="bytes")
    stage, t = pctx.coord("pp"), pctx.coord("tp")
    total = partial_of(0) + partial_of(1)
    rows = slice(t * ROWS // 2, (t + 1) * ROWS // 2)
    grad_full = torch.arange(ROWS * F, dtype=torch.float64).reshape(ROWS, F) * 0.5
    if stage == 0:
        pctx.stage_send(partial_of(t))
        ok = torch.equal(pctx.stage_recv_backward((ROWS, F), torch.float64), grad_full)
    else:
        ok = torch.equal(pctx.stage_recv((ROWS, F), torch.float64), total[rows])
        pctx.stage_send_backward(grad_full[rows].clone())
    ok = ok and bytes_ok(pctx, comm, fusion, gloo)
    agree(bool(ok), gloo, f"per-rank hand-off {comm} fusion={fusion} stage {stage}: {pctx.stats()}")


def test_wrong_calls_are_named(world):
    """A hand-off on the wrong kind of context or stage is an InvalidArgument naming the call."""
    rank, n, gloo = world
    spmd = ParallelContext({"pp": 2, "tp": 2})
    per_rank = ParallelContext({"pp": 2, "tp": 2}, per_rank=True)
    flat = ParallelContext({"tp": 4})
    errors = []
    for call, text in [(lambda: flat.pipeline_send(None, 0, (ROWS, F)), "needs a 'pp' mesh axis"),
                       (lambda: spmd.pipeline_send(None, 1, (ROWS, F)), "stage 1 has no next stage"),
                       (lambda: per_rank.pipeline_send(None, 0, (ROWS, F)), "per_rank=True uses stage_send"),
                       (lambda: spmd.stage_send(partial_of(0)), "needs per_rank=True")]:
        try:
            call()
            errors.append(f"no error for {text!r}")
        except chimera.InvalidArgument as error:
            if text not in str(error):
                errors.append(f"{error} does not say {text!r}")
    agree(not errors, gloo, f"wrong calls: {errors}")
