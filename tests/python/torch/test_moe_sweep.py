# SPDX-License-Identifier: Apache-2.0
# chimera.torch.moe on seeded random cases (8 or 4 ranks) over meshes, mesh orders, dispatch groups and token
# layouts (owned shards, tp replicas, tp partial sums, a pipeline stage at any position), expert
# counts, top-k, hidden sizes, dtypes, programs and per-rank token counts (0 included): y and
# the gradients of x and of the routing weights equal a one-process reference bit for bit (small
# integers and halves, so every sum is exact). Every rank draws the same cases.
import random

import pytest
import torch

import chimera
from chimera.torch import moe

from conftest import agree

# (mesh, dispatch group, token layout) per world size: the tokens' owner is the rank, its tp
# replicas share them.
SETUPS = {
    8: [(None, None, ""), ("ep=8", "ep", ""), ("tp=2,ep=4", "ep+tp", "tp=S0"), ("tp=2,ep=4", "ep", "tp=S0"),
        ("ep=2,tp=4", "ep", "tp=S0"), ("tp=2,ep=4", "ep", "tp=R"), ("ep=4,tp=2", "ep+tp", "tp=R"),
        ("ep=2,tp=4", "ep+tp", "tp=R"), ("ep=4,tp=2", "ep+tp", "tp=P"), ("tp=2,ep=4", "ep+tp", "tp=P"),
        ("tp=4,ep=2", "ep", "tp=P"), ("pp=2,ep=4", "ep", "pp=@0"), ("pp=4,ep=2", "ep", "pp=@2"),
        ("ep=2,pp=4", "ep", "pp=@1")],
    4: [(None, None, ""), ("ep=4", "ep", ""), ("tp=2,ep=2", "ep+tp", "tp=S0"), ("ep=2,tp=2", "ep", "tp=S0"),
        ("tp=2,ep=2", "ep", "tp=R"), ("ep=2,tp=2", "ep+tp", "tp=R"), ("ep=2,tp=2", "ep+tp", "tp=P"),
        ("tp=2,ep=2", "ep", "tp=P"), ("pp=2,ep=2", "ep", "pp=@0"), ("ep=2,pp=2", "ep", "pp=@0"),
        ("pp=4,ep=1", "ep", "pp=@1")],
}
CASES = 24
SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def _coords(mesh, rank):
    """{axis: coordinate} of `rank` on `mesh` (a chimera.Mesh)."""
    return dict(zip(mesh.axis_names, mesh.coordinates(rank)))


def _rank_of(mesh, coords):
    return mesh.rank_of([coords[a] for a in mesh.axis_names])


def _factor(experts, dtype):
    return ((experts % 2 if dtype in SIXTEEN_BIT else experts % 5) + 1).to(dtype)


def _tokens(seed, owner, experts, topk, hidden, dtype):
    """The owner's T (0..12), x, distinct top-k ids (a third of the cases all on experts 0..K-1),
    weights and grad y, from a generator seeded by the case and the owner."""
    g = torch.Generator().manual_seed(seed * 7919 + owner)
    t = int(torch.randint(0, 13, (1,), generator=g))
    small = dtype in SIXTEEN_BIT
    x = torch.randint(-2, 3, (t, hidden), generator=g) if small else torch.randint(-8, 8, (t, hidden), generator=g)
    skewed = seed % 3 == 0
    idx = torch.stack([torch.arange(topk) if skewed else torch.randperm(experts, generator=g)[:topk]
                       for _ in range(t)]) if t else torch.empty((0, topk), dtype=torch.int64)
    w = torch.randint(1, 3, (t, topk), generator=g) / 2 if small else torch.randint(1, 5, (t, topk), generator=g) / 4
    grad_y = torch.randint(-2, 3, (t, hidden), generator=g)
    return x.to(dtype), idx, w.to(dtype), grad_y.to(dtype), g


def _reference(x, idx, w, grad_y):
    """y, grad x and grad w of sum_k w[:, k] * factor(idx[:, k]) * x, loss sum(y * grad_y)."""
    xr = x.detach().clone().requires_grad_(True)
    wr = w.detach().clone().requires_grad_(True)
    y = torch.zeros_like(xr)
    for k in range(idx.shape[1]):
        y = y + wr[:, k:k + 1] * (xr * _factor(idx[:, k:k + 1], x.dtype))
    (y * grad_y).sum().backward()
    return y.detach(), xr.grad, wr.grad


@pytest.mark.parametrize("case", range(CASES))
def test_random_case_matches_reference(world, case):
    rank, size, gloo = world
    if size not in SETUPS:
        pytest.skip(f"setups for {sorted(SETUPS)} ranks")
    rnd = random.Random(1000 + case)
    mesh, group, layout = SETUPS[size][case % len(SETUPS[size])]
    grid = chimera.Mesh(mesh or f"w={size}")
    coords = _coords(grid, rank)
    ranks = grid.group_size(group)
    experts = ranks * rnd.choice([1, 2, 3, 4])
    topk = rnd.randint(1, min(experts, 6))
    hidden = rnd.choice([1, 3, 8, 17])
    dtype = rnd.choice([torch.float32, torch.float64, torch.bfloat16])
    program = rnd.choice(["planned", "fused", "per_expert"])
    replicas = layout in ("tp=R", "tp=P")
    owner = _rank_of(grid, {**coords, "tp": 0}) if replicas else rank
    stage = int(layout[4:]) if layout.startswith("pp=@") else None
    what = f"case {case}: {mesh} group {group} layout '{layout}' E={experts} K={topk} H={hidden} {dtype} {program}"

    x, idx, w, grad_y, g = _tokens(case, owner, experts, topk, hidden, dtype)
    if stage is not None and coords["pp"] != stage:
        x, idx, w = x[:0], idx[:0], w[:0]
    mine = x
    if layout == "tp=P":  # partial sums over tp whose sum is x
        parts = [torch.randint(-3, 4, x.shape, generator=g).to(dtype) for _ in range(grid.group_size("tp") - 1)]
        parts.append(x - sum(parts) if parts else x)
        mine = parts[coords["tp"]].clone()
    mine = mine.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    where = {} if mesh is None else {"mesh": mesh, "group": group, "layout": layout}
    recv_x, recv_expert, _, per_expert, handle = moe.dispatch(mine, idx, w, experts, program=program, **where)
    ok = recv_x.shape[0] == int(per_expert.sum())
    if stage is None:
        y = moe.combine(recv_x * _factor(recv_expert, dtype).unsqueeze(1), handle)
        (y * grad_y).sum().backward()
        want_y, want_gx, want_gw = _reference(x, idx, w, grad_y)
        ok = ok and torch.equal(y.detach(), want_y) and torch.equal(mine.grad, want_gx) and \
            torch.equal(w.grad, want_gw)
    elif coords["pp"] == stage + 1:  # the experts of the peer's tokens: its y
        peer = _rank_of(grid, {**coords, "pp": stage})
        px, pidx, pw, pgrad_y, _ = _tokens(case, peer, experts, topk, hidden, dtype)
        y = moe.combine(recv_x * _factor(recv_expert, dtype).unsqueeze(1), handle)
        (y * pgrad_y).sum().backward()
        ok = ok and torch.equal(y.detach(), _reference(px, pidx, pw, pgrad_y)[0])
    elif coords["pp"] == stage:  # the tokens' stage: its gradients come back
        recv_x.backward(torch.zeros_like(recv_x))
        _, want_gx, want_gw = _reference(x, idx, w, grad_y)
        ok = ok and recv_x.shape[0] == 0 and torch.equal(mine.grad, want_gx) and torch.equal(w.grad, want_gw)
    agree(ok, gloo, what)
