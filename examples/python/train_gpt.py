#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small GPT trained end to end with tensor + sequence parallelism on chimera's Session.

Run under MPI on CPU ranks (the mesh's product = the number of ranks)::

    mpirun -np 8 python examples/python/train_gpt.py --mesh dp=2,tp=4 --steps 10 --compare

The model (``--layers`` blocks of pre-LN attention + MLP, ``--hidden``, ``--seq``, ``--vocab``)
uses chimera.torch.layers: QKV and MLP-in are column-parallel, the attention output and MLP-out
row-parallel, LayerNorms run on this rank's token rows (sequence parallelism), the batch is split
over ``dp``. Tokens are generated (a fixed affine recurrence from random starts, so the loss
falls). Every rank builds the same full initial parameters and keeps its shards.

``--comm chimera`` (default) records every collective on a chimera Session with fusion per
``--fusion on|off``; ``--comm torch`` issues the same collectives with torch.distributed (gloo)
as the reference. ``--compare`` trains fusion off, fusion on and gloo from the same start, interleaved
step by step (so the three share the machine's load alike), and prints the losses side by side. Per step: loss, step time, communication time, and
the bytes the recorded collectives would send vs the bytes chimera sent. ``--json FILE`` writes
all of it (rank 0).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import chimera.torch as ct
from chimera.torch.layers import ColumnParallelLinear, ParallelContext, RowParallelLinear


def parse_mesh(text: str) -> dict[str, int]:
    axes = {}
    for part in text.split(","):
        name, _, size = part.partition("=")
        if not size.isdigit():
            raise SystemExit(f"--mesh: '{part}' is not NAME=SIZE")
        axes[name.strip()] = int(size)
    unknown = set(axes) - {"dp", "tp"}
    if unknown:
        raise SystemExit(f"--mesh: axes {sorted(unknown)} are not supported by this example (dp, tp are; "
                         "pipeline stages are not implemented here)")
    return axes


def full_parameters(args) -> dict[str, torch.Tensor]:
    """The unsplit initial parameters, identical on every rank."""
    g = torch.Generator().manual_seed(0)
    h, v = args.hidden, args.vocab

    def normal(*shape, scale):
        return torch.randn(*shape, generator=g) * scale

    p = {"embed": normal(v, h, scale=0.02), "pos": normal(args.seq, h, scale=0.02),
         "lnf_w": torch.ones(h), "lnf_b": torch.zeros(h), "head": normal(v, h, scale=h ** -0.5)}
    for i in range(args.layers):
        p[f"{i}.ln1_w"], p[f"{i}.ln1_b"] = torch.ones(h), torch.zeros(h)
        p[f"{i}.ln2_w"], p[f"{i}.ln2_b"] = torch.ones(h), torch.zeros(h)
        # QKV output features ordered [head, (q|k|v), head_dim] so a tp shard holds whole heads.
        p[f"{i}.qkv_w"], p[f"{i}.qkv_b"] = normal(3 * h, h, scale=h ** -0.5), torch.zeros(3 * h)
        p[f"{i}.proj_w"], p[f"{i}.proj_b"] = normal(h, h, scale=(2 * args.layers * h) ** -0.5), torch.zeros(h)
        p[f"{i}.fc1_w"], p[f"{i}.fc1_b"] = normal(4 * h, h, scale=h ** -0.5), torch.zeros(4 * h)
        p[f"{i}.fc2_w"], p[f"{i}.fc2_b"] = normal(h, 4 * h, scale=(8 * args.layers * h) ** -0.5), torch.zeros(h)
    return p


class Block(torch.nn.Module):
    def __init__(self, pctx, args, p, i):
        super().__init__()
        h = args.hidden
        self.pctx, self.args = pctx, args
        self.ln1 = torch.nn.LayerNorm(h)
        self.ln2 = torch.nn.LayerNorm(h)
        with torch.no_grad():
            self.ln1.weight.copy_(p[f"{i}.ln1_w"]), self.ln1.bias.copy_(p[f"{i}.ln1_b"])
            self.ln2.weight.copy_(p[f"{i}.ln2_w"]), self.ln2.bias.copy_(p[f"{i}.ln2_b"])
        self.qkv = ColumnParallelLinear(pctx, h, 3 * h, p[f"{i}.qkv_w"], p[f"{i}.qkv_b"])
        self.proj = RowParallelLinear(pctx, h, h, p[f"{i}.proj_w"], p[f"{i}.proj_b"])
        self.fc1 = ColumnParallelLinear(pctx, h, 4 * h, p[f"{i}.fc1_w"], p[f"{i}.fc1_b"])
        self.fc2 = RowParallelLinear(pctx, 4 * h, h, p[f"{i}.fc2_w"], p[f"{i}.fc2_b"])

    def attention(self, x_rows):
        a = self.args
        heads = a.heads // self.pctx.size("tp")
        hd = a.hidden // a.heads
        qkv = self.qkv(x_rows)  # [batch_dp * seq, heads_local * 3 * hd]
        batch = qkv.shape[0] // a.seq
        qkv = qkv.view(batch, a.seq, heads, 3, hd).permute(3, 0, 2, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch * a.seq, heads * hd))

    def forward(self, x_rows):
        x_rows = x_rows + self.attention(self.ln1(x_rows))
        return x_rows + self.fc2(F.gelu(self.fc1(self.ln2(x_rows))))

    def replicated(self):
        """Parameters every tp rank holds whole (their gradients are sums over tp)."""
        return [*self.ln1.parameters(), *self.ln2.parameters(), self.proj.bias, self.fc2.bias]


class GPT(torch.nn.Module):
    def __init__(self, pctx, args):
        super().__init__()
        p = full_parameters(args)
        self.pctx, self.args = pctx, args
        self.embed = torch.nn.Parameter(p["embed"].clone())
        self.pos = torch.nn.Parameter(p["pos"].clone())
        self.blocks = torch.nn.ModuleList(Block(pctx, args, p, i) for i in range(args.layers))
        self.lnf = torch.nn.LayerNorm(args.hidden)
        with torch.no_grad():
            self.lnf.weight.copy_(p["lnf_w"]), self.lnf.bias.copy_(p["lnf_b"])
        self.head = torch.nn.Parameter(p["head"].clone())

    def forward(self, tokens_rows, positions_rows):
        x = self.embed[tokens_rows] + self.pos[positions_rows]
        for block in self.blocks:
            x = block(x)
        return self.lnf(x) @ self.head.t()

    def replicated(self):
        params = [self.embed, self.pos, *self.lnf.parameters(), self.head]
        for block in self.blocks:
            params += block.replicated()
        return params


def batch(args, step):
    """Tokens [batch, seq+1]: random starts, then t' = (5 t + 3) mod vocab (learnable)."""
    g = torch.Generator().manual_seed(1000 + step)
    t = torch.empty(args.batch, args.seq + 1, dtype=torch.int64)
    t[:, 0] = torch.randint(0, args.vocab, (args.batch,), generator=g)
    for i in range(1, args.seq + 1):
        t[:, i] = (5 * t[:, i - 1] + 3) % args.vocab
    noise = torch.rand(t.shape, generator=g) < 0.1
    return torch.where(noise, torch.randint(0, args.vocab, t.shape, generator=g), t)


class Trainer:
    """One model, optimizer and communication setting, stepped one step at a time (so that
    --compare can interleave the settings step by step and share the machine's load alike)."""

    def __init__(self, args, axes, comm, fusion):
        self.args, self.comm, self.fusion = args, comm, fusion
        self.pctx = ParallelContext(axes, fusion=fusion, comm=comm)
        self.model = GPT(self.pctx, args)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.0)
        replicated = {id(p) for p in self.model.replicated()}
        self.sharded = [p for p in self.model.parameters() if id(p) not in replicated]
        dp, tp = self.pctx.size("dp"), self.pctx.size("tp")
        self.rows = args.batch * args.seq // (dp * tp)
        self.first = (self.pctx.coord("dp") * tp + self.pctx.coord("tp")) * self.rows
        self.steps = []

    @property
    def name(self):
        return "gloo" if self.comm == "torch" else f"fusion_{'on' if self.fusion else 'off'}"

    def step(self, step):
        args, pctx, model = self.args, self.pctx, self.model
        tokens = batch(args, step)
        inputs, targets = tokens[:, :-1].reshape(-1), tokens[:, 1:].reshape(-1)
        positions = torch.arange(args.seq).repeat(args.batch)
        mine = slice(self.first, self.first + self.rows)
        before = dict(pctx.stats())
        pctx.comm_seconds = 0.0
        dist.barrier()
        start = time.perf_counter()
        logits = model(inputs[mine], positions[mine])
        loss = F.cross_entropy(logits, targets[mine], reduction="sum") / targets.numel()
        self.opt.zero_grad(set_to_none=False)
        loss.backward()
        pctx.all_reduce_([p.grad for p in model.replicated()], ["dp", "tp"])
        pctx.all_reduce_([p.grad for p in self.sharded], ["dp"])
        self.opt.step()
        total = loss.detach().reshape(1).clone()
        pctx.all_reduce_([total], ["dp", "tp"])
        elapsed = time.perf_counter() - start
        after = pctx.stats()
        row = {"step": step, "loss": total.item(), "step_ms": elapsed * 1e3, "comm_ms": pctx.comm_seconds * 1e3}
        if after:
            row["bytes_as_recorded"] = after["bytes_as_recorded"] - before.get("bytes_as_recorded", 0)
            row["bytes_sent"] = after["bytes_sent"] - before.get("bytes_sent", 0)
            row["fused_chains"] = after["fused_chains"] - before.get("fused_chains", 0)
        self.steps.append(row)
        if dist.get_rank() == 0:
            sent = f"  bytes recorded {row['bytes_as_recorded']:>10} sent {row['bytes_sent']:>10}" if after else ""
            print(f"[{self.name:<10}] step {step:3d}  loss {row['loss']:.6f}  step {row['step_ms']:8.1f} ms  "
                  f"comm {row['comm_ms']:8.1f} ms{sent}", flush=True)
        return row


def train(args, axes, comm, fusion):
    """Trains one setting for args.steps steps; returns the per-step rows."""
    trainer = Trainer(args, axes, comm, fusion)
    for step in range(args.steps):
        trainer.step(step)
    return trainer.steps


def summary(steps):
    later = steps[1:] if len(steps) > 1 else steps  # the first step plans and warms caches
    return {"final_loss": steps[-1]["loss"], "median_step_ms": statistics.median(s["step_ms"] for s in later),
            "median_comm_ms": statistics.median(s["comm_ms"] for s in later)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mesh", default="dp=2,tp=4", help="dp=D,tp=T (product = MPI ranks)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2, help="sequences per step (divisible by dp)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--comm", choices=["chimera", "torch"], default="chimera")
    parser.add_argument("--fusion", choices=["on", "off"], default="on")
    parser.add_argument("--compare", action="store_true", help="fusion off, fusion on and gloo, interleaved per step")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    parser.add_argument("--json", help="write the per-step rows and summaries here (rank 0)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    axes = parse_mesh(args.mesh)
    dp, tp = axes.get("dp", 1), axes.get("tp", 1)
    if args.batch % dp or (args.batch * args.seq) % (dp * tp) or args.heads % tp or args.hidden % args.heads:
        raise SystemExit("--batch must divide by dp, batch*seq by dp*tp, --heads by tp and --hidden by --heads")
    ct.init_process_group("gloo")
    settings = [("chimera", False), ("chimera", True), ("torch", True)] if args.compare else \
        [(args.comm, args.fusion == "on")]
    trainers = [Trainer(args, axes, comm, fusion) for comm, fusion in settings]
    for step in range(args.steps):
        for trainer in trainers:  # interleaved: each setting sees the machine's load alike
            trainer.step(step)
    result = {"config": vars(args), "torch": torch.__version__, "ranks": dist.get_world_size(), "runs": {}}
    for trainer in trainers:
        result["runs"][trainer.name] = {"steps": trainer.steps, **summary(trainer.steps)}
    if args.compare and dist.get_rank() == 0:
        off, on, gloo = (result["runs"][k]["steps"] for k in ("fusion_off", "fusion_on", "gloo"))
        worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(off, on))
        worst_gloo = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(on, gloo))
        result["max_rel_loss_diff_on_vs_off"] = worst
        result["max_rel_loss_diff_on_vs_gloo"] = worst_gloo
        print(f"max relative loss difference: fusion on vs off {worst:.2e}, fusion on vs gloo {worst_gloo:.2e}")
        for k in ("fusion_off", "fusion_on", "gloo"):
            r = result["runs"][k]
            print(f"{k:<11} final loss {r['final_loss']:.6f}  median step {r['median_step_ms']:.1f} ms  "
                  f"median comm {r['median_comm_ms']:.1f} ms")
        if not math.isfinite(worst) or worst > 1e-5:
            print("WARNING: fusion on and off differ by more than 1e-5 (relative)")
    if args.json and dist.get_rank() == 0:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
