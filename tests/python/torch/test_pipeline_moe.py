# SPDX-License-Identifier: Apache-2.0
# The pipeline hand-off (pp=2,tp=2) and MoE dispatch/combine (ep=4 and dp=2,ep=2) on a chimera
# Session against values every rank computes locally; the hand-off is fused (fewer bytes sent
# than recorded) with fusion on and runs as recorded with fusion off.
import pytest
import torch

from chimera.torch.layers import ParallelContext, moe_combine, moe_dispatch
from conftest import agree

ROWS, F = 8, 6


def partial_of(tp_rank):
    return (torch.arange(ROWS * F, dtype=torch.float64).reshape(ROWS, F) % 7 + tp_rank * 3)


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
def test_pipeline_handoff_forward_and_backward(world, fusion):
    rank, n, gloo = world
    pctx = ParallelContext({"pp": 2, "tp": 2}, fusion=fusion)
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


@pytest.mark.parametrize("axes", [{"ep": 4}, {"dp": 2, "ep": 2}], ids=["ep4", "dp2ep2"])
def test_moe_dispatch_combine_and_gradients(world, axes):
    rank, n, gloo = world
    pctx = ParallelContext(axes)
    ep, e, c = pctx.size("ep"), 4, 3
    token_rank = [pctx.coord(a) for a in pctx.names]

    def slots_of(r):  # rank r's slots: value = 100*expert + 10*slot + r
        return (torch.arange(e).view(e, 1, 1) * 100 + torch.arange(c).view(1, c, 1) * 10 + r).expand(e, c, 2).double()

    x = slots_of(rank).clone().requires_grad_(True)
    y = moe_dispatch(pctx, x)
    # Expected: my experts [g*e/ep, (g+1)*e/ep), slots of the ep group members in group order.
    g = pctx.coord("ep")
    group = [rank - (g - j) * (1 if pctx.names[-1] == "ep" else 0) for j in range(ep)]
    expect = torch.cat([slots_of(r)[g * e // ep:(g + 1) * e // ep] for r in group], dim=1)
    ok = torch.equal(y.detach(), expect)
    z = moe_combine(pctx, y * 2.0)
    ok = ok and torch.equal(z.detach(), x.detach() * 2.0)
    z.sum().backward()
    ok = ok and torch.equal(x.grad, torch.full_like(x, 2.0))
    agree(bool(ok), gloo, f"moe {axes} token {token_rank}: {y.detach()[..., 0]} vs {expect[..., 0]}")
