# SPDX-License-Identifier: Apache-2.0
# A 3-step run of examples/python/train_gpt.py's training loop on 8 ranks (a small model; dp=2,
# tp=4, and with pipeline stages pp=2,tp=4 and pp=2,dp=2,tp=2, GPipe over 2 microbatches with
# per-rank recording): fusion on and off give the same losses (relative 1e-5), close to the same
# model with torch.distributed collectives, the loss falls, and fusion sends fewer bytes than
# recorded. The pipeline runs start from the same parameters as an unpipelined run and must
# match its losses too.
import argparse

import pytest

import train_gpt
from conftest import agree


def small(batch=2, microbatches=1, heads=4, moe_experts=0, topk=2):
    return argparse.Namespace(layers=2, hidden=64, heads=heads, seq=32, vocab=128, batch=batch, steps=3, lr=3e-3,
                              microbatches=microbatches, moe_experts=moe_experts, topk=topk)


@pytest.mark.parametrize("mesh", ["dp=2,tp=4", "pp=2,tp=4", "pp=2,dp=2,tp=2"])
def test_three_steps_fusion_on_off_and_reference(world, mesh):
    rank, n, gloo = world
    if n != 8:
        pytest.skip("needs 8 ranks")
    args = small(batch=4, microbatches=2) if mesh.startswith("pp") else small()
    axes = train_gpt.parse_mesh(mesh)
    train_gpt.check_shapes(args, axes)
    off = train_gpt.train(args, axes, "chimera", False)
    on = train_gpt.train(args, axes, "chimera", True)
    ref = train_gpt.train(args, axes, "torch", True)
    same = all(abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]) for a, b in zip(off, on))
    close = all(abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]) for a, b in zip(on, ref))
    falls = on[-1]["loss"] < on[0]["loss"]
    fused = all(s["bytes_sent"] < s["bytes_as_recorded"] for s in on) and all(
        s["bytes_sent"] == s["bytes_as_recorded"] for s in off)
    agree(same and close and falls and fused, gloo,
          f"losses off {[s['loss'] for s in off]} on {[s['loss'] for s in on]} ref {[s['loss'] for s in ref]}; "
          f"bytes on {[(s['bytes_as_recorded'], s['bytes_sent']) for s in on]}")


def test_pipeline_matches_the_unpipelined_model(world):
    """pp=2,tp=4 (2 microbatches) against dp=1,tp=8 on the same 4 sequences: the same model and
    data, so the losses agree up to summation order."""
    rank, n, gloo = world
    if n != 8:
        pytest.skip("needs 8 ranks")
    piped = train_gpt.train(small(batch=4, microbatches=2, heads=8), train_gpt.parse_mesh("pp=2,tp=4"), "chimera", True)
    flat = train_gpt.train(small(batch=4, heads=8), train_gpt.parse_mesh("tp=8"), "chimera", True)
    close = all(abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]) for a, b in zip(piped, flat))
    agree(close, gloo, f"pipelined {[s['loss'] for s in piped]} vs unpipelined {[s['loss'] for s in flat]}")


def test_moe_layers_train_alike_on_every_exchange(world):
    """--moe-experts 16 --topk 2 on dp=2,tp=4: a learned router and each rank's 2 experts, the
    tokens routed by chimera.torch.moe (fusion on and off) and by all_to_all_single on gloo (as
    torchtitan issues it): the same losses (relative 1e-5), and the loss falls."""
    rank, n, gloo = world
    if n != 8:
        pytest.skip("needs 8 ranks")
    args = small(moe_experts=16, topk=2)
    axes = train_gpt.parse_mesh("dp=2,tp=4")
    train_gpt.check_shapes(args, axes)
    runs = {name: train_gpt.train(args, axes, comm, fusion) for name, comm, fusion in train_gpt.SETTINGS}
    losses = {name: [s["loss"] for s in steps] for name, steps in runs.items()}
    ref = losses["gloo"]
    same = all(abs(a - b) <= 1e-5 * abs(b) for name in losses for a, b in zip(losses[name], ref))
    agree(same and ref[-1] < ref[0], gloo, f"moe losses {losses}")
