# SPDX-License-Identifier: Apache-2.0
# The Megatron-style layers on a chimera Session against a single-process reference: a column-
# then row-parallel MLP with sequence parallelism on meshes tp=4 and dp=2,tp=2 (4 ranks),
# fusion on and off. Every rank computes the unsplit model locally and checks its outputs and
# its shards of the gradients. The SPMD pipeline hand-off (pp=2,tp=2) against values every rank
# computes locally: fused (fewer bytes sent than recorded) with fusion on, as recorded with it off.
import pytest
import torch

from chimera.torch.layers import ColumnParallelLinear, ParallelContext, RowParallelLinear

from conftest import agree

TOKENS, HIDDEN, FFN = 16, 8, 16
ROWS, F = 8, 6  # the pipeline hand-off's [rows, features]


def reference(x, w1, b1, w2, b2):
    x = x.clone().requires_grad_(True)
    w1, b1, w2, b2 = (t.clone().requires_grad_(True) for t in (w1, b1, w2, b2))
    y = torch.nn.functional.gelu(x @ w1.t() + b1) @ w2.t() + b2
    (y * torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape).sin()).sum().backward()
    return y.detach(), x.grad, w1.grad, b1.grad, w2.grad, b2.grad


@pytest.mark.parametrize("axes", [{"tp": 4}, {"dp": 2, "tp": 2}], ids=["tp4", "dp2tp2"])
@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
def test_mlp_matches_single_process(world, axes, fusion):
    rank, n, gloo = world
    g = torch.Generator().manual_seed(7)
    x = torch.randn(TOKENS, HIDDEN, generator=g, dtype=torch.float64)
    w1 = torch.randn(FFN, HIDDEN, generator=g, dtype=torch.float64)
    b1 = torch.randn(FFN, generator=g, dtype=torch.float64)
    w2 = torch.randn(HIDDEN, FFN, generator=g, dtype=torch.float64)
    b2 = torch.randn(HIDDEN, generator=g, dtype=torch.float64)
    y_ref, gx_ref, gw1_ref, gb1_ref, gw2_ref, gb2_ref = reference(x, w1, b1, w2, b2)

    pctx = ParallelContext(axes, fusion=fusion, topology="bytes")  # fuses these small activations
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
    stats = pctx.stats()
    # Fusion on: the row-parallel forward and column-parallel backward ran as ReduceScatters,
    # which send less than the recorded AllReduces.
    fused_ok = (stats["bytes_sent"] < stats["bytes_as_recorded"] and stats["fused_chains"] > 0) if fusion else \
        stats["bytes_sent"] == stats["bytes_as_recorded"]
    agree(bool(ok) and fused_ok, gloo, f"layers {axes} fusion={fusion}: stats {stats}")


def partial_of(tp_rank):
    return (torch.arange(ROWS * F, dtype=torch.float64).reshape(ROWS, F) % 7 + tp_rank * 3)


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
def test_pipeline_handoff_forward_and_backward(world, fusion):
    rank, n, gloo = world
    pctx = ParallelContext({"pp": 2, "tp": 2}, fusion=fusion, topology="bytes")
    stage, t = pctx.coord("pp"), pctx.coord("tp")
    total = partial_of(0) + partial_of(1)
    got = pctx.pipeline_send(partial_of(t) if stage == 0 else None, 0, (ROWS, F), torch.float64)
    rows = slice(t * ROWS // 2, (t + 1) * ROWS // 2)
    ok = got is None if stage == 0 else torch.equal(got, total[rows])
    grad_full = torch.arange(ROWS * F, dtype=torch.float64).reshape(ROWS, F) * 0.5
    back = pctx.pipeline_send_backward(grad_full[rows].clone() if stage == 1 else None, 0, (ROWS, F), torch.float64)
    ok = ok and (back is None if stage == 1 else torch.equal(back, grad_full))
    s = pctx.stats()
    ok = ok and (s["bytes_sent"] < s["bytes_as_recorded"] if fusion else s["bytes_sent"] == s["bytes_as_recorded"])
    agree(bool(ok), gloo, f"pipeline hand-off fusion={fusion}: {s}")
