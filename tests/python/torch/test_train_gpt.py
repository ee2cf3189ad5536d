# SPDX-License-Identifier: Apache-2.0
# A 3-step run of examples/python/train_gpt.py's training loop on 8 ranks (dp=2, tp=4, a small
# model): fusion on and off give the same losses (relative 1e-5), close to the same model with
# torch.distributed collectives, the loss falls, and fusion sends fewer bytes than recorded.
import argparse

import pytest

import train_gpt
from conftest import agree


@pytest.mark.parametrize("mesh", ["dp=2,tp=4"])
def test_three_steps_fusion_on_off_and_reference(world, mesh):
    rank, n, gloo = world
    if n != 8:
        pytest.skip("needs 8 ranks")
    args = argparse.Namespace(layers=2, hidden=64, heads=4, seq=32, vocab=128, batch=2, steps=3, lr=3e-3)
    axes = train_gpt.parse_mesh(mesh)
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
