# SPDX-License-Identifier: Apache-2.0
# The pipeline hand-off (pp=2,tp=2) on a chimera Session against values every rank computes
# locally; the hand-off is fused (fewer bytes sent than recorded) with fusion on and runs as
# recorded with fusion off. (Routed MoE: test_moe.py, test_moe_baselines.py.)
import pytest
import torch

from chimera.torch.layers import ParallelContext
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
    back = pctx.pipeline_send_back(grad_full[rows].clone() if stage == 1 else None, 0, (ROWS, F), torch.float64)
    ok = ok and (back is None if stage == 1 else torch.equal(back, grad_full))
    s = pctx.stats()
    ok = ok and (s["bytes_sent"] < s["bytes_as_recorded"] if fusion else s["bytes_sent"] == s["bytes_as_recorded"])
    agree(bool(ok), gloo, f"pipeline hand-off fusion={fusion}: {s}")
