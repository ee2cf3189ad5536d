#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small GPT trained end to end with tensor + sequence parallelism (and pipeline stages) on
chimera's Session.

Run under MPI on CPU ranks (the mesh's product = the number of ranks)::

    mpirun -np 8 python examples/python/train_gpt.py --mesh dp=2,tp=4 --steps 10 --compare
    mpirun -np 8 python examples/python/train_gpt.py --mesh pp=2,tp=4 --microbatches 2 --compare

The model (``--layers`` blocks of pre-LN attention + MLP, ``--hidden``, ``--seq``, ``--vocab``)
uses chimera.torch.layers: QKV and MLP-in are column-parallel, the attention output and MLP-out
row-parallel, LayerNorms run on this rank's token rows (sequence parallelism), the batch is split
over ``dp``. Tokens are generated (a fixed affine recurrence from random starts, so the loss
falls). Every rank builds the same full initial parameters and keeps its shards.

With a ``pp`` axis (outermost: ``pp=2,dp=..,tp=..``) the blocks split evenly over the stages
(stage 0 also embeds, the last stage also has the final LayerNorm, head and loss) and each
step is a GPipe schedule: all microbatches forward, then all backward, stage by stage. The
Session records per rank (each stage only its own calls). A stage hands its last block's
output to the next one still partial over tp (the last row-parallel matmul's sum and the
residual not yet added), recorded as ``allreduce:tp`` + ``send:pp`` with the next stage reading
its own rows: fused, a ReduceScatter and a many-to-many of the shards; the gradient goes back
as ``allgather:tp`` + ``send:pp:backward``. The gloo reference runs the same schedule with
reduce_scatter, send/recv and all_gather.

``--moe-experts E --topk K`` (no pp axis) makes every block's MLP a mixture of experts: a
learned router (replicated) picks each token's top-K of E experts, spread E / ranks per rank over
the whole world, and the tokens (this rank's rows) go there and back through
``chimera.torch.moe`` (fusion on: each token once per destination rank; off: one row per
(token, expert)) or, with ``--comm torch``, through ``all_to_all_single`` with splits on gloo as
torchtitan issues it; each rank's experts' gradients stay local::

    mpirun -np 8 python examples/python/train_gpt.py --mesh dp=2,tp=4 --moe-experts 16 --topk 2 --compare

``--comm chimera`` (default) records every collective on a chimera Session with fusion per
``--fusion on|off``; ``--comm torch`` issues the same collectives with torch.distributed (gloo)
as the reference. ``--compare`` trains fusion off, fusion on and gloo from the same start,
interleaved step by step (so the three share the machine's load alike), and prints the losses side
by side. Per step: loss, step time, communication time, and
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
from chimera.torch.moe_baselines import ChimeraDispatcher, PerExpertDispatcher


def check_shapes(args, axes) -> None:
    """Exits naming the first size that does not split as the mesh needs."""
    pp, dp, tp = axes.get("pp", 1), axes.get("dp", 1), axes.get("tp", 1)
    micro = args.microbatches if pp > 1 else 1
    if args.batch % (dp * micro):
        raise SystemExit(f"--batch {args.batch} must divide by dp x microbatches = {dp * micro}")
    if (args.batch // (dp * micro) * args.seq) % tp:
        raise SystemExit(f"the rows of a microbatch ({args.batch // (dp * micro)} x {args.seq}) must divide by tp={tp}")
    if args.heads % tp or args.hidden % args.heads:
        raise SystemExit("--heads must divide by tp and --hidden by --heads")
    if args.layers % pp:
        raise SystemExit(f"--layers {args.layers} must divide by pp={pp}")
    if args.moe_experts:
        if pp > 1:
            raise SystemExit("--moe-experts: MoE layers are not supported with pipeline stages in this example")
        if args.moe_experts % (dp * tp) or not 1 <= args.topk <= args.moe_experts:
            raise SystemExit(f"--moe-experts {args.moe_experts} must divide by dp x tp = {dp * tp} ranks and "
                             f"1 <= --topk {args.topk} <= it")


def parse_mesh(text: str) -> dict[str, int]:
    axes = {}
    for part in text.split(","):
        name, _, size = part.partition("=")
        if not size.isdigit():
            raise SystemExit(f"--mesh: '{part}' is not NAME=SIZE")
        axes[name.strip()] = int(size)
    unknown = set(axes) - {"pp", "dp", "tp"}
    if unknown:
        raise SystemExit(f"--mesh: axes {sorted(unknown)} are not supported by this example (pp, dp, tp are)")
    order = [a for a in ("pp", "dp", "tp") if a in axes]
    if list(axes) != order:
        raise SystemExit(f"--mesh: axes must come in the order pp, dp, tp (got {','.join(axes)})")
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
        if args.moe_experts:
            e = args.moe_experts
            p[f"{i}.router_w"] = normal(e, h, scale=h ** -0.5)
            p[f"{i}.experts_w1"] = normal(e, 2 * h, h, scale=h ** -0.5)
            p[f"{i}.experts_w2"] = normal(e, h, 2 * h, scale=(4 * args.layers * h) ** -0.5)
        else:
            p[f"{i}.fc1_w"], p[f"{i}.fc1_b"] = normal(4 * h, h, scale=h ** -0.5), torch.zeros(4 * h)
            p[f"{i}.fc2_w"], p[f"{i}.fc2_b"] = normal(h, 4 * h, scale=(8 * args.layers * h) ** -0.5), torch.zeros(h)
    return p


class MoE(torch.nn.Module):
    """Top-k mixture of experts on this rank's token rows: a learned router (replicated), then
    the tokens routed to the experts of the expert group (the whole world, E / ranks experts on
    each rank, each an MLP h -> 2h -> h), combined with the router's top-k probabilities.
    ``dispatcher``: chimera.torch.moe (fusion on or off) or the per-(token, expert) all-to-all
    on gloo, as torchtitan issues it (chimera.torch.moe_baselines.PerExpertDispatcher)."""

    def __init__(self, args, p, i, dispatcher):
        super().__init__()
        e, rank, ranks = args.moe_experts, dist.get_rank(), dist.get_world_size()
        self.topk, self.dispatcher = args.topk, dispatcher
        self.local = e // ranks
        mine = slice(rank * self.local, (rank + 1) * self.local)
        self.router = torch.nn.Parameter(p[f"{i}.router_w"].clone())
        self.w1 = torch.nn.Parameter(p[f"{i}.experts_w1"][mine].clone())
        self.w2 = torch.nn.Parameter(p[f"{i}.experts_w2"][mine].clone())

    def forward(self, x_rows):
        probs = torch.softmax(x_rows @ self.router.t(), dim=-1)
        weights, idx = probs.topk(self.topk, dim=-1)
        recv_x, _, _, per_expert, handle = self.dispatcher.dispatch(x_rows, idx, weights)
        outs, first = [], 0
        for j, count in enumerate(per_expert.tolist()):
            rows = recv_x[first:first + count]
            outs.append(F.gelu(rows @ self.w1[j].t()) @ self.w2[j].t())
            first += count
        return self.dispatcher.combine(torch.cat(outs) if outs else recv_x[:0], handle)


class Block(torch.nn.Module):
    def __init__(self, pctx, args, p, i, dispatcher=None):
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
        self.moe = MoE(args, p, i, dispatcher) if args.moe_experts else None
        if self.moe is None:
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
        if self.moe is not None:
            return x_rows + self.moe(self.ln2(x_rows))
        return x_rows + self.fc2(F.gelu(self.fc1(self.ln2(x_rows))))

    def forward_partial(self, x_rows):
        """The block's output over all rows of the dp shard, partial over tp (its sum over tp is
        the output): the MLP's last matmul unreduced, plus this rank's residual rows in their
        place and the bias on tp rank 0. What a stage hands to the next one."""
        x_rows = x_rows + self.attention(self.ln1(x_rows))
        h = F.gelu(self.fc1(self.ln2(x_rows)))
        tp, t = self.pctx.size("tp"), self.pctx.coord("tp")
        rows = x_rows.shape[0]
        residual = F.pad(x_rows, (0, 0, t * rows, (tp - 1 - t) * rows))
        # The bias stays in the graph on every rank (a zero gradient off rank 0).
        return h @ self.fc2.weight.t() + residual + self.fc2.bias * (1.0 if t == 0 else 0.0)

    def replicated(self):
        """Parameters every tp rank holds whole (their gradients are sums over tp)."""
        mlp = [self.moe.router] if self.moe is not None else [self.fc2.bias]
        return [*self.ln1.parameters(), *self.ln2.parameters(), self.proj.bias, *mlp]

    def experts(self):
        """Parameters only this rank holds (its experts): no gradient reduction."""
        return [self.moe.w1, self.moe.w2] if self.moe is not None else []


class GPT(torch.nn.Module):
    def __init__(self, pctx, args, dispatcher=None):
        super().__init__()
        p = full_parameters(args)
        self.pctx, self.args = pctx, args
        self.embed = torch.nn.Parameter(p["embed"].clone())
        self.pos = torch.nn.Parameter(p["pos"].clone())
        self.blocks = torch.nn.ModuleList(Block(pctx, args, p, i, dispatcher) for i in range(args.layers))
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

    def experts(self):
        return [p for block in self.blocks for p in block.experts()]


class Stage(torch.nn.Module):
    """Pipeline stage `stage` of `stages`: its share of the blocks (the same initial values as
    GPT's); stage 0 embeds, the last stage returns logits, the others their last block's output
    partial over tp (Block.forward_partial)."""

    def __init__(self, pctx, args, stage, stages):
        super().__init__()
        p = full_parameters(args)
        self.pctx, self.args = pctx, args
        self.first, self.last = stage == 0, stage == stages - 1
        per = args.layers // stages
        self.blocks = torch.nn.ModuleList(Block(pctx, args, p, i) for i in range(stage * per, (stage + 1) * per))
        if self.first:
            self.embed = torch.nn.Parameter(p["embed"].clone())
            self.pos = torch.nn.Parameter(p["pos"].clone())
        if self.last:
            self.lnf = torch.nn.LayerNorm(args.hidden)
            with torch.no_grad():
                self.lnf.weight.copy_(p["lnf_w"]), self.lnf.bias.copy_(p["lnf_b"])
            self.head = torch.nn.Parameter(p["head"].clone())

    def forward(self, x_rows=None, tokens_rows=None, positions_rows=None):
        if self.first:
            x_rows = self.embed[tokens_rows] + self.pos[positions_rows]
        inner = self.blocks if self.last else self.blocks[:-1]
        for block in inner:
            x_rows = block(x_rows)
        if self.last:
            return self.lnf(x_rows) @ self.head.t()
        return self.blocks[-1].forward_partial(x_rows)

    def replicated(self):
        params = [self.embed, self.pos] if self.first else []
        if self.last:
            params += [*self.lnf.parameters(), self.head]
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


# What --compare trains: (name, comm, fusion).
SETTINGS = [("fusion_off", "chimera", False), ("fusion_on", "chimera", True), ("gloo", "torch", True)]


def moe_dispatcher(args, comm, fusion):
    """The MoE layers' exchange: chimera.torch.moe, or for ``comm="torch"`` the per-(token,
    expert) all_to_all_single with splits on the default (gloo) group, as torchtitan issues it.
    Backward exchanges are not counted in ``bytes_sent``."""
    if comm == "torch":
        return PerExpertDispatcher(args.moe_experts)
    # Fusion on: the planner's program (each token once per destination rank); off: one row per
    # (token, expert), as issued.
    return ChimeraDispatcher(args.moe_experts, "planned" if fusion else "per_expert")


class Trainer:
    """One model, optimizer and communication setting, stepped one step at a time (so that
    --compare can interleave the settings step by step and share the machine's load alike)."""

    def __init__(self, args, axes, comm, fusion):
        self.args, self.comm, self.fusion = args, comm, fusion
        self.pipeline = "pp" in axes
        self.moe = None
        self.pctx = ParallelContext(axes, fusion=fusion, comm=comm, per_rank=self.pipeline)
        pctx = self.pctx
        if self.pipeline:
            self.model = Stage(pctx, args, pctx.coord("pp"), pctx.size("pp"))
        else:
            self.moe = moe_dispatcher(args, comm, fusion) if args.moe_experts else None
            self.model = GPT(pctx, args, self.moe)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.0)
        own = {id(p) for p in self.model.replicated()}
        own |= {id(p) for p in self.model.experts()} if not self.pipeline else set()
        self.sharded = [p for p in self.model.parameters() if id(p) not in own]
        dp, tp = pctx.size("dp"), pctx.size("tp")
        self.microbatches = args.microbatches if self.pipeline else 1
        # Sequences per microbatch on one dp rank; its rows, and this rank's share over tp.
        self.sequences = args.batch // (dp * self.microbatches)
        self.rows = self.sequences * args.seq // tp
        self.steps = []

    @property
    def name(self):
        return "gloo" if self.comm == "torch" else f"fusion_{'on' if self.fusion else 'off'}"

    def _mine(self, micro):
        """This rank's token rows of microbatch `micro` (flat over [batch * seq])."""
        pctx, seq = self.pctx, self.args.seq
        first_sequence = pctx.coord("dp") * self.sequences * self.microbatches + micro * self.sequences
        first = first_sequence * seq + pctx.coord("tp") * self.rows
        return slice(first, first + self.rows)

    def _forward_backward(self, inputs, targets, positions):
        """Loss (summed over this rank's rows, / all targets) after its backward; the layers'
        collectives run inside."""
        mine = self._mine(0)
        logits = self.model(inputs[mine], positions[mine])
        loss = F.cross_entropy(logits, targets[mine], reduction="sum") / targets.numel()
        loss.backward()
        return loss.detach()

    def _pipeline(self, inputs, targets, positions):
        """GPipe over the microbatches: every forward (receiving from the previous stage, sending
        to the next), then every backward in the same order (gradients back the same way)."""
        pctx, model = self.pctx, self.model
        h = self.args.hidden
        handed = (self.rows * pctx.size("tp"), h)  # what crosses a stage boundary: [rows of the dp shard, h]
        kept, loss = [], torch.zeros(())
        for m in range(self.microbatches):
            mine = self._mine(m)
            x_in = None
            if model.first:
                out = model(tokens_rows=inputs[mine], positions_rows=positions[mine])
            else:
                x_in = pctx.stage_recv(handed).requires_grad_(True)
                out = model(x_rows=x_in)
            if model.last:
                out = F.cross_entropy(out, targets[mine], reduction="sum") / targets.numel()
                loss = loss + out.detach()
            else:
                pctx.stage_send(out)
            kept.append((x_in, out))
        for x_in, out in kept:
            if model.last:
                out.backward()
            else:
                out.backward(pctx.stage_recv_backward(handed))
            if not model.first:
                pctx.stage_send_backward(x_in.grad)
        return loss

    def step(self, step):
        args, pctx, model = self.args, self.pctx, self.model
        tokens = batch(args, step)
        inputs, targets = tokens[:, :-1].reshape(-1), tokens[:, 1:].reshape(-1)
        positions = torch.arange(args.seq).repeat(args.batch)
        before = dict(pctx.stats())
        moe_before = self.moe.bytes_sent if self.moe is not None else 0
        pctx.comm_seconds = 0.0
        dist.barrier()
        start = time.perf_counter()
        self.opt.zero_grad(set_to_none=False)
        if self.pipeline:
            loss = self._pipeline(inputs, targets, positions)
        else:
            loss = self._forward_backward(inputs, targets, positions)
        pctx.all_reduce_([p.grad for p in model.replicated()], ["dp", "tp"])
        pctx.all_reduce_([p.grad for p in self.sharded], ["dp"])
        self.opt.step()
        total = loss.reshape(1).clone()
        pctx.all_reduce_([total], ["pp", "dp", "tp"])  # only the last stage has a loss
        elapsed = time.perf_counter() - start
        row = {"step": step, "loss": total.item(), "step_ms": elapsed * 1e3, "comm_ms": pctx.comm_seconds * 1e3}
        after = pctx.stats()
        if after:
            row.update(self._bytes(before, after))
        if self.moe is not None:
            sent = torch.tensor([self.moe.bytes_sent - moe_before], dtype=torch.int64)
            dist.all_reduce(sent)
            row["moe_bytes_sent"] = int(sent.item())  # forward dispatch + combine, all ranks
        self.steps.append(row)
        if dist.get_rank() == 0:
            sent = f"  bytes recorded {row['bytes_as_recorded']:>10} sent {row['bytes_sent']:>10}" if after else ""
            sent += f"  moe forward bytes {row['moe_bytes_sent']:>10}" if self.moe is not None else ""
            print(f"[{self.name:<10}] step {step:3d}  loss {row['loss']:.6f}  step {row['step_ms']:8.1f} ms  "
                  f"comm {row['comm_ms']:8.1f} ms{sent}", flush=True)
        return row

    def _bytes(self, before, after):
        """Bytes of the step over all ranks: as recorded, as sent, fused chains. Per-rank
        recording counts each rank's share, summed here over the world."""
        keys = ["bytes_as_recorded", "bytes_sent", "fused_chains"]
        source = ["rank_bytes_as_recorded", "rank_bytes_sent", "fused_chains"] if self.pctx.per_rank else keys
        counts = torch.tensor([after[k] - before.get(k, 0) for k in source], dtype=torch.int64)
        if self.pctx.per_rank:
            dist.all_reduce(counts)  # fused chains too: summed over the ranks that ran them
        return dict(zip(keys, counts.tolist()))


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
    parser.add_argument("--mesh", default="dp=2,tp=4", help="[pp=P,][dp=D,]tp=T (product = MPI ranks)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2, help="sequences per step (divisible by dp x microbatches)")
    parser.add_argument("--microbatches", type=int, default=2, help="microbatches per step with a pp axis (GPipe)")
    parser.add_argument("--moe-experts", type=int, default=0,
                        help="E > 0: every block's MLP is a top-k MoE over E experts spread over all ranks")
    parser.add_argument("--topk", type=int, default=2, help="experts per token (with --moe-experts)")
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
    check_shapes(args, axes)
    ct.init_process_group("gloo")
    settings = [(comm, fusion) for _, comm, fusion in SETTINGS] if args.compare else [(args.comm, args.fusion == "on")]
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
