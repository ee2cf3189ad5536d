# SPDX-License-Identifier: Apache-2.0
# chimera.torch.moe: dispatch / combine forward and backward against a plain torch reference
# computed locally from all-gathered inputs (one row per (token, expert), summed in k order),
# bit for bit on values whose sums are exact (in f32, and in bf16 / f16 on smaller values);
# bytes, caching, token layouts and errors. Under mpirun on chimera's MPI backend, under torchrun
# on its gloo mesh backend (CHIMERA_EXPECT_TRANSPORT=gloo).
import os
import re
import time

import pytest
import torch
import torch.distributed as dist

import chimera
from chimera.torch import moe

from conftest import agree

SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def _inputs(rank, world, experts, topk, hidden, seed, routing="uniform", dtype=torch.float32):
    """This rank's tokens: T in 0..10 (0 on every third rank), small-integer x, weights in
    quarters, distinct top-k ids; 16-bit: x in -2..2 and weights 1/2 or 1, so that every sum
    is exact in the row type."""
    small = dtype in SIXTEEN_BIT
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    tokens = 0 if rank % 3 == 1 else int(torch.randint(3, 11, (1,), generator=g))
    x = torch.randint(-2, 3, (tokens, hidden), generator=g) if small else torch.randint(-8, 8, (tokens, hidden),
                                                                                          generator=g)
    if routing == "one_expert":
        rest = torch.stack([torch.randperm(experts - 1, generator=g)[: topk - 1] + 1 for _ in range(tokens)]) \
            if topk > 1 and tokens else torch.empty((tokens, topk - 1), dtype=torch.int64)
        idx = torch.cat([torch.zeros((tokens, 1), dtype=torch.int64), rest], dim=1)
    else:
        idx = torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(tokens)]) if tokens \
            else torch.empty((0, topk), dtype=torch.int64)
    w = torch.randint(1, 3, (tokens, topk), generator=g) / 2 if small else \
        torch.randint(1, 5, (tokens, topk), generator=g) / 4
    return x.to(dtype), idx.to(torch.int64), w.to(dtype)


def _gather(obj, gloo):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj, group=gloo)
    return out


def _factor(experts, dtype):
    """The stand-in expert's factor per expert id: id + 1 (16-bit: id % 2 + 1)."""
    return ((experts % 2 if dtype in SIXTEEN_BIT else experts) + 1).to(dtype)


def _expert(rows, experts):
    return rows * _factor(experts, rows.dtype).unsqueeze(1)


def _timed_error(call):
    """(the chimera.Error `call` raised or None, the seconds it took)."""
    start = time.monotonic()
    try:
        call()
        raised = None
    except chimera.Error as error:
        raised = error
    return raised, time.monotonic() - start


def _check_case(world, experts, topk, hidden, seed, program="planned", routing="uniform", dtype=torch.float32):
    rank, size, gloo = world
    x, idx, w = _inputs(rank, size, experts, topk, hidden, seed, routing, dtype)
    x.requires_grad_(True)
    w.requires_grad_(True)
    recv_x, recv_e, recv_w, per_expert, handle = moe.dispatch(x, idx, w, experts, program=program)
    out = _expert(recv_x, recv_e)
    y = moe.combine(out, handle)
    grad_y = torch.randint(-2 if dtype in SIXTEEN_BIT else -4, 3 if dtype in SIXTEEN_BIT else 4, y.shape,
                           generator=torch.Generator().manual_seed(seed + rank)).to(dtype)
    (y * grad_y).sum().backward()

    # The reference: every rank's inputs, one row per (token, expert).
    every = _gather((x.detach(), idx, w.detach()), gloo)
    local = experts // size
    rows = [(e, src, t) for e in range(rank * local, (rank + 1) * local)
            for src in range(size) for t in range(every[src][0].shape[0]) if e in every[src][1][t].tolist()]
    ok = recv_x.shape[0] == len(rows) and per_expert.tolist() == [sum(1 for r in rows if r[0] == e)
                                                                  for e in range(rank * local, (rank + 1) * local)]
    for i, (e, src, t) in enumerate(rows if ok else []):
        k = every[src][1][t].tolist().index(e)
        ok = ok and recv_e[i].item() == e and torch.equal(recv_x[i], every[src][0][t]) and \
            recv_w[i].item() == every[src][2][t, k].item()
    xr = x.detach().clone().requires_grad_(True)
    wr = w.detach().clone().requires_grad_(True)
    yr = torch.zeros_like(xr)
    for k in range(topk):
        yr = yr + wr[:, k:k + 1] * (xr * _factor(idx[:, k:k + 1], dtype))
    (yr * grad_y).sum().backward()
    ok = ok and y.dtype == dtype and torch.equal(y.detach(), yr.detach()) and torch.equal(x.grad, xr.grad) and \
        torch.equal(w.grad, wr.grad)
    agree(ok, gloo, f"moe E={experts} K={topk} program={program} routing={routing} dtype={dtype}")
    return handle, idx


@pytest.mark.parametrize("program", ["planned", "fused", "per_expert"])
@pytest.mark.parametrize("experts_per_rank,topk", [(1, 1), (2, 2), (8, 8), (4, 3)])
def test_dispatch_combine_match_reference(world, program, experts_per_rank, topk):
    _, size, _ = world
    _check_case(world, experts_per_rank * size, topk, 6, seed=experts_per_rank * 10 + topk, program=program)


@pytest.mark.parametrize("dtype", SIXTEEN_BIT)
@pytest.mark.parametrize("program", ["fused", "per_expert"])
def test_sixteen_bit_rows_match_reference(world, program, dtype):
    _, size, _ = world
    _check_case(world, 4 * size, 3, 6, seed=17, program=program, dtype=dtype)


def test_one_expert_routing(world):
    _, size, _ = world
    _check_case(world, 2 * size, 2, 5, seed=3, routing="one_expert")


def test_bytes_are_pairs_times_rows(world):
    rank, size, gloo = world
    experts, topk, hidden = 8 * size, 8, 1024
    handle, idx = _check_case(world, experts, topk, hidden, seed=11, program="fused")
    dest = idx // (experts // size)
    pairs = sum(len(set(row.tolist()) - {rank}) for row in dest)
    stats = handle.stats
    ok = stats["payload_bytes"] == pairs * hidden * 4 and stats["count_bytes"] == 4 * (size - 1) and \
        stats["header_bytes"] <= 0.03 * max(1, stats["payload_bytes"]) + 8 * (size - 1) and stats["rounds"] == 2 and \
        handle.combine_stats["payload_bytes"] > 0 or pairs == 0
    agree(ok, gloo, f"bytes {stats}, {pairs} pairs")


def test_fresh_routings_create_nothing_new(world):
    rank, size, gloo = world
    _check_case(world, 2 * size, 2, 4, seed=21)
    before = len(moe._EXCHANGES)
    for step in range(100):
        x, idx, w = _inputs(rank, size, 2 * size, 2, 4, seed=1000 + step)
        _, _, _, _, handle = moe.dispatch(x, idx, w, 2 * size)
        moe.combine(torch.zeros((handle.state.rows, 4)), handle)
    agree(len(moe._EXCHANGES) == before, gloo, "100 fresh routings made new exchanges")


def test_replicated_tokens_split_over_tp(world):
    rank, size, gloo = world
    if size % 2:
        pytest.skip("needs an even world")
    mesh = f"ep={size // 2},tp=2"
    # Replicas (the two tp ranks of an ep coordinate) hold the same tokens.
    x, idx, w = _inputs(rank // 2 * 2, size, 2 * size, 2, 4, seed=31)
    x.requires_grad_(True)
    w.requires_grad_(True)
    recv_x, recv_e, recv_w, _, handle = moe.dispatch(x, idx, w, 2 * size, mesh=mesh, group="ep+tp", layout="tp=R",
                                                     program="fused")
    y = moe.combine(_expert(recv_x, recv_e), handle)
    y.sum().backward()
    xr = x.detach().clone().requires_grad_(True)
    wr = w.detach().clone().requires_grad_(True)
    yr = sum(wr[:, k:k + 1] * (xr * (idx[:, k:k + 1] + 1).float()) for k in range(2)) if x.shape[0] else \
        torch.zeros_like(xr)
    yr.sum().backward() if x.shape[0] else None
    ok = torch.equal(y.detach(), yr.detach()) and (x.shape[0] == 0 or (torch.equal(x.grad, xr.grad) and
                                                                     torch.equal(w.grad, wr.grad)))
    agree(ok and handle.exchange.splits_replicas, gloo, "tp=R split")


def test_out_of_range_expert_fails_every_rank(world):
    rank, size, gloo = world
    x, idx, w = _inputs(0, size, 2 * size, 2, 4, seed=41)  # same shapes everywhere (rank 0's T > 0)
    if rank == size - 1:
        idx[0, 0] = 2 * size
    try:
        moe.dispatch(x, idx, w, 2 * size)
        raised = None
    except chimera.Error as error:
        raised = type(error)
    want = chimera.InvalidArgument if rank == size - 1 else chimera.Mismatch
    agree(raised is want, gloo, f"raised {raised}, wanted {want}")


@pytest.mark.parametrize("fault", ["x_rows", "weights_shape", "idx_dtype", "row_dtype"])
@pytest.mark.parametrize("layout", ["", "tp=P"])
def test_malformed_call_on_one_rank_fails_every_rank(world, fault, layout):
    """One rank's arguments fail moe.dispatch's checks: it raises ValueError, every peer Mismatch
    naming it, at once (no peer waits for the timeout), also when its replicas reduce over tp."""
    rank, size, gloo = world
    if layout and size % 2:
        pytest.skip("needs an even world")
    x, idx, w = _inputs(0, size, 2 * size, 2, 4, seed=43)  # the same tokens on every rank
    odd = size - 1
    if rank == odd:
        if fault == "x_rows":
            x = x[1:]
        elif fault == "weights_shape":
            w = w[:, :1]
        elif fault == "idx_dtype":
            idx = idx.to(torch.int32)
        else:
            x = x.to(torch.int32)
    where = {"mesh": f"tp=2,ep={size // 2}", "group": "ep", "layout": layout} if layout else {}
    try:
        moe.dispatch(x, idx, w, 2 * size, **where)
        raised = None
    except chimera.Error as error:
        raised = error
    except ValueError as error:
        raised = error
    if rank == odd:
        ok = isinstance(raised, ValueError)
    else:
        ok = isinstance(raised, chimera.Mismatch) and f"rank {odd}" in str(raised)
    agree(ok, gloo, f"{fault} {layout}: raised {type(raised).__name__}: {raised}")


@pytest.mark.parametrize("fault", ["top_k_zero", "program"])
def test_bad_option_on_one_rank_fails_every_rank_at_once(world, fault):
    """One rank's options are bad (K = 0 against its peers' K = 2, an unknown program) while its
    peers' exchange is cached: every rank fails in the dispatch's first round,
    InvalidArgument on that rank and Mismatch naming it on the others, well within a second
    (not the timeout), and the next good call works."""
    rank, size, gloo = world
    if size % 2:
        pytest.skip("needs an even world")
    odd = size - 1
    x, idx, w = _inputs(0, size, 2 * size, 2, 4, seed=45)  # the same tokens on every rank
    where = {"mesh": f"tp=2,ep={size // 2}", "group": "ep+tp", "layout": "tp=R", "program": "fused"}
    bad = dict(where)
    bad_idx, bad_w = idx, w
    if rank == odd:
        if fault == "top_k_zero":
            bad_idx, bad_w = idx[:, :0], w[:, :0]
        else:
            bad["program"] = "fuzed"
    raised, seconds = _timed_error(lambda: moe.dispatch(x, bad_idx, bad_w, 2 * size, **bad))
    if rank == odd:
        ok = isinstance(raised, chimera.InvalidArgument)
    else:
        ok = isinstance(raised, chimera.Mismatch) and f"rank {odd}" in str(raised)
    recv_x, recv_e, _, _, handle = moe.dispatch(x, idx, w, 2 * size, **where)
    y = moe.combine(_expert(recv_x, recv_e), handle)
    yr = sum(w[:, k:k + 1] * (x * (idx[:, k:k + 1] + 1).float()) for k in range(2))
    agree(ok and seconds < 1.0 and torch.equal(y, yr), gloo,
          f"{fault}: raised {type(raised).__name__}: {raised} after {seconds:.2f} s")


@pytest.mark.parametrize("layout", ["tp=R", "tp=P"])
def test_replicated_routing_with_a_bad_id_fails_every_rank(world, layout):
    """A bad expert id in a routing replicated over tp (the same on both replicas, fused: the
    replicas split their tokens): every rank raises, not only the replica that dispatches the
    token; the next good call works."""
    rank, size, gloo = world
    if size % 2:
        pytest.skip("needs an even world")
    where = {"mesh": f"tp=2,ep={size // 2}", "group": "ep", "layout": layout, "program": "fused"}
    x, idx, w = _inputs(0, size, 2 * size, 2, 4, seed=47)  # the same tokens on every rank
    bad = idx.clone()
    bad[-1, 0] = 2 * size  # the last token: dispatched by the second replica
    raised, seconds = _timed_error(lambda: moe.dispatch(x, bad, w, 2 * size, **where))
    ok = isinstance(raised, chimera.InvalidArgument) and "outside" in str(raised)
    moe.dispatch(x, idx, w, 2 * size, **where)
    agree(ok and seconds < 1.0, gloo, f"{layout}: raised {type(raised).__name__}: {raised} after {seconds:.2f} s")


@pytest.mark.parametrize("layout", ["tp=R", "tp=P"])
def test_bad_id_on_one_replica_is_named_on_every_rank(world, layout):
    """A bad expert id on one replica alone (the last rank): it raises InvalidArgument, every
    other rank Mismatch naming it (its replica through the replicas' agreement, the rest of the
    mesh through the count exchange, passed on by that replica), at once; the next call works."""
    rank, size, gloo = world
    if size % 2:
        pytest.skip("needs an even world")
    odd = size - 1
    where = {"mesh": f"tp=2,ep={size // 2}", "group": "ep", "layout": layout, "program": "fused"}
    x, idx, w = _inputs(0, size, 2 * size, 2, 4, seed=51)  # the same tokens on every rank
    bad = idx.clone()
    if rank == odd:
        bad[0, 0] = 2 * size
    raised, seconds = _timed_error(lambda: moe.dispatch(x, bad, w, 2 * size, **where))
    if rank == odd:
        ok = isinstance(raised, chimera.InvalidArgument) and "outside" in str(raised)
    else:
        ok = isinstance(raised, chimera.Mismatch) and re.search(rf"\brank {odd}\b", str(raised)) is not None
    moe.dispatch(x, idx, w, 2 * size, **where)
    agree(ok and seconds < 1.0, gloo, f"{layout}: raised {type(raised).__name__}: {raised} after {seconds:.2f} s")


def test_handle_of_another_exchange_is_refused(world):
    """A dispatch's handle belongs to its exchange: another exchange's receive and combine raise
    InvalidArgument (they would index its tables with their own sizes), its own still works."""
    rank, size, gloo = world
    x, idx, w = _inputs(0, size, 2 * size, 2, 4, seed=49)
    _, _, _, _, first = moe.dispatch(x, idx[:, :1], w[:, :1], 2 * size, program="per_expert")
    recv_x, recv_e, _, _, second = moe.dispatch(x, idx, w, 2 * size, program="fused")
    rows = first.state.rows
    refused = []
    for call in (lambda: second.exchange.receive(first.state, torch.empty((rows, 4)), torch.empty(rows,
                                                                                                   dtype=torch.int64),
                                                 torch.empty(rows)),
                 lambda: second.exchange.combine(torch.empty((rows, 4)), None, first.state, torch.empty((x.shape[0],
                                                                                                        4)))):
        try:
            call()
            refused.append(False)
        except chimera.InvalidArgument as error:
            refused.append("another routed exchange" in str(error))
    y = moe.combine(_expert(recv_x, recv_e), second)
    yr = sum(w[:, k:k + 1] * (x * (idx[:, k:k + 1] + 1).float()) for k in range(2))
    agree(all(refused) and torch.equal(y, yr), gloo, f"refused {refused}")


def test_backend_of_the_launch(world):
    """moe's backend is the launch's host transport: MPI under mpirun, the gloo mesh backend
    under torchrun; one per mesh, made once."""
    rank, size, gloo = world
    x, idx, w = _inputs(rank, size, size, 1, 4, seed=51)
    moe.dispatch(x, idx, w, size)
    made = len(moe._BACKENDS)
    moe.dispatch(x, idx, w, size)
    names = {b.name for b in moe._BACKENDS.values()}
    want = "gloo" if os.environ.get("CHIMERA_EXPECT_TRANSPORT") == "gloo" else "mpi"
    agree(names == {want} and len(moe._BACKENDS) == made, gloo, f"moe backends {names}, wanted {want}")


def test_ranks_creating_different_groups_fail_every_rank(world):
    """The first dispatch over a mesh makes the groups it needs (gloo groups, MPI communicators);
    a rank whose layout needs another group than its peers' (here the token axis sp) fails with
    every peer at once: Mismatch on every rank, naming the groups, no wait for the timeout; no
    group is made, so a consistent call afterwards works."""
    rank, size, gloo = world
    if size % 2:
        pytest.skip("needs an even world")
    mesh = f"ep={size // 2},sp=2"  # a mesh no other test uses: none of its groups exists yet
    x, idx, w = _inputs(rank // 2 * 2, size, 2 * size, 2, 4, seed=53)
    layout = "sp=R" if rank == size - 1 else ""
    raised, seconds = _timed_error(lambda: moe.dispatch(x, idx, w, 2 * size, mesh=mesh, group="ep", layout=layout))
    ok = isinstance(raised, chimera.Mismatch) and "create different" in str(raised) and seconds < 10
    recv_x, recv_e, _, _, handle = moe.dispatch(x, idx, w, 2 * size, mesh=mesh, group="ep", layout="sp=R")
    y = moe.combine(_expert(recv_x, recv_e), handle)
    yr = sum(w[:, k:k + 1] * (x * (idx[:, k:k + 1] + 1).float()) for k in range(2)) if x.shape[0] else y
    agree(ok and torch.equal(y, yr), gloo, f"raised {type(raised).__name__}: {raised} after {seconds:.1f} s")


@pytest.mark.parametrize("capacity", [0, 2])
@pytest.mark.parametrize("program", ["fused", "per_expert"])
@pytest.mark.parametrize("stages,stage", [(2, 0), (4, 1)])
def test_stage_tokens_through_autograd(world, program, stages, stage, capacity):
    """A pipeline stage's tokens ("pp=@k"): stage k dispatches x, stage k+1 receives the rows of
    its peer's tokens, combines them into that peer's y and runs the backward; stage k's backward
    (of its empty recv_x) receives grad x and grad topk_weights. y and both gradients equal the
    one-process reference, straight ("fused") and through the hand-off ("per_expert"); the other
    stages get empty tensors and their combine raises. With a capacity, the reference drops the
    (token, k) pairs past it in token order: they add nothing to y, and their gradients are 0."""
    rank, size, gloo = world
    if size % stages:
        pytest.skip(f"needs a world of a multiple of {stages}")
    n = size // stages
    experts, topk, hidden = 2 * n, min(2, 2 * n), 6
    mine = rank // n  # "pp=P,ep=N": ep innermost

    def tokens(owner):
        return _inputs(owner, size, experts, topk, hidden, seed=71)

    def grad_y_of(owner, t):
        return torch.randint(-4, 4, (t, hidden), generator=torch.Generator().manual_seed(72 + owner)).float()

    def kept(idx):
        """1 where (token, k) survives the capacity of its (source, destination rank) pair: records
        open in token order, one per destination rank ("fused") or per expert ("per_expert")."""
        mask = torch.ones(idx.shape)
        sent = [0] * n
        for t in range(idx.shape[0] if capacity else 0):
            opened = {}
            for k in range(topk):
                d = int(idx[t, k]) // (experts // n)
                if program == "fused" and d in opened:
                    mask[t, k] = opened[d]
                    continue
                opened[d] = float(sent[d] < capacity)
                sent[d] += int(opened[d])
                mask[t, k] = opened[d]
        return mask

    def reference(x, idx, w, grad_y):
        xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
        mask = kept(idx)
        yr = sum(mask[:, k:k + 1] * wr[:, k:k + 1] * (xr * _factor(idx[:, k:k + 1], torch.float32))
                 for k in range(topk))
        (yr * grad_y).sum().backward()
        return yr.detach(), xr.grad, wr.grad

    if mine == stage:
        x, idx, w = tokens(rank)
        x.requires_grad_(True)
        w.requires_grad_(True)
    else:
        x, idx, w = torch.empty((0, hidden)), torch.empty((0, topk), dtype=torch.int64), torch.empty((0, topk))
    recv_x, recv_e, _, _, handle = moe.dispatch(x, idx, w, experts, mesh=f"pp={stages},ep={n}", group="ep",
                                                layout=f"pp=@{stage}", program=program, capacity=capacity)
    if mine == stage + 1:
        y = moe.combine(_expert(recv_x, recv_e), handle)
        px, pidx, pw = tokens(rank - n)
        (y * grad_y_of(rank - n, y.shape[0])).sum().backward()
        ok = torch.equal(y.detach(), reference(px, pidx, pw, grad_y_of(rank - n, px.shape[0]))[0])
    elif mine == stage:
        ok = recv_x.shape[0] == 0
        recv_x.backward(torch.zeros_like(recv_x))
        _, gx, gw = reference(x, idx, w, grad_y_of(rank, x.shape[0]))
        ok = ok and torch.equal(x.grad, gx) and torch.equal(w.grad, gw)
    else:
        ok = recv_x.shape[0] == 0
        with pytest.raises(chimera.InvalidArgument, match="takes no part"):
            moe.combine(recv_x, handle)
    agree(ok, gloo, f"pp=@{stage} of {stages} stages, {program}, capacity {capacity}: stage {mine}")
