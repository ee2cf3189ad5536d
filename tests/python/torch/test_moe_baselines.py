# SPDX-License-Identifier: Apache-2.0
# Routed MoE dispatch and combine, bit for bit: the baselines of chimera.torch.moe_baselines
# (per-(token, expert) all-to-all, AllGather dispatcher, torchtitan's TP chain, on gloo) against
# what every rank computes locally from all ranks' seeded inputs (moe_expected.py), and
# chimera.torch.moe (every program, and the tp=S0 / tp=R token layouts) against the baselines:
# the rows received per local expert, the combine output and the gradients of x and of the
# routing weights. Groups of the whole world and of pairs, several E and K, tokens per rank
# from 0 up (with ranks that receive nothing from some peers). The data are exactly summable
# (moe_routings), so every summation order gives the same bits.
import pytest
import torch
import torch.distributed as dist

from chimera.torch import moe_routings
from chimera.torch.moe_baselines import AllGatherDispatcher, ChimeraDispatcher, PerExpertDispatcher, TPChainDispatcher

from conftest import agree
from moe_expected import combined, received

H = 8
# (E, K, routing, tokens of group rank j = TOKENS[j % 4])
CASES = [(8, 2, "uniform"), (8, 1, "zipf"), (16, 3, "uniform"), (4, 4, "uniform"), (8, 2, "one_expert")]
TOKENS = [5, 0, 3, 9]
BASELINES = {"per_expert": PerExpertDispatcher, "allgather": AllGatherDispatcher}


def _groups(n, size, gloo):
    """This rank's group of `size` consecutive ranks (the world when size == n) and its ranks."""
    if size == n:
        return gloo, list(range(n))
    mine = None
    for first in range(0, n, size):
        ranks = list(range(first, first + size))
        g = dist.new_group(ranks, backend="gloo")
        if dist.get_rank() in ranks:
            mine = (g, ranks)
    return mine


def _group_of_case(world, size, e):
    """A test's group for `size` ("world": all ranks; "pairs": groups of 2): its size, the group,
    its world ranks and this rank's index in it; skips when the ranks or the e experts do not split."""
    rank, n, gloo = world
    group_size = n if size == "world" else 2
    if n % group_size or e % group_size:
        pytest.skip(f"{e} experts or {n} ranks do not split into groups of {group_size}")
    group, ranks = _groups(n, group_size, gloo)
    return group_size, group, ranks, ranks.index(rank)


def inputs(ranks, j, e, k, kind, seed, tokens=None):
    """Group rank j's x, topk_idx, topk_weights and the gradient of its combine output."""
    t = TOKENS[j % 4] if tokens is None else tokens
    owner = ranks[j]
    idx, w = moe_routings.routing(kind, t, e, k, seed, owner)
    x = moe_routings.tokens(t, H, seed, owner)
    grad_y = moe_routings.tokens(t, H, seed + 1, owner)
    return x, idx, w, grad_y


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("baseline", sorted(BASELINES))
@pytest.mark.parametrize("size", ["world", "pairs"])
@pytest.mark.parametrize("case", CASES, ids=[f"e{e}k{k}-{r}" for e, k, r in CASES])
def test_baseline_matches_local_computation(world, baseline, size, case):
    gloo = world[2]
    e, k, kind = case
    group_size, group, ranks, me = _group_of_case(world, size, e)
    seed = 17 + e + k
    data = [inputs(ranks, j, e, k, kind, seed) for j in range(group_size)]
    *got_recv, got_y, got_dx, got_dw = moe_routings.forward_backward(BASELINES[baseline](e, group), *data[me])
    want_recv = received([d[0] for d in data], [d[1] for d in data], [d[2] for d in data], e, group_size, me)
    want_y, want_dx, want_dw = combined(*data[me])
    ok = all(same(a, b) for a, b in zip(got_recv, want_recv))
    ok = ok and same(got_y, want_y) and same(got_dx, want_dx) and same(got_dw, want_dw)
    agree(bool(ok), gloo, f"{baseline} {size} e{e} k{k} {kind}: recv {[tuple(a.shape) for a in got_recv]} vs "
          f"{[tuple(b.shape) for b in want_recv]}, y equal {same(got_y, want_y)}, dx {same(got_dx, want_dx)}, "
          f"dw {same(got_dw, want_dw)}")


def test_some_rank_receives_nothing_from_some_peer(world):
    """The cases above include (source, destination) pairs with no rows: not a vacuous claim."""
    rank, n, gloo = world
    e, k, kind = CASES[0]
    ranks = list(range(n))
    data = [inputs(ranks, j, e, k, kind, 17 + e + k) for j in range(n)]
    local = e // n if e % n == 0 else 0
    empty = any(not ((d[1] >= r * local) & (d[1] < (r + 1) * local)).any() for d in data for r in range(n))
    agree(local == 0 or empty, gloo, "no empty (source, destination) pair in the first case")


@pytest.mark.parametrize("case", [(8, 2, "uniform"), (8, 1, "one_expert"), (16, 4, "zipf")],
                         ids=["e8k2-uniform", "e8k1-one_expert", "e16k4-zipf"])
def test_tp_chain_matches_local_computation(world, case):
    """torchtitan's chain on tp=2 x ep=n/2 (EP folded over TP): AllGather over TP, dispatch of
    this TP rank's share, combine, ReduceScatter: the same output and gradients as routing the
    sequence shard directly."""
    rank, n, gloo = world
    e, k, kind = case
    if n % 2 or e % n:
        pytest.skip(f"needs an even world whose size divides {e}")
    tp_group, _ = _groups(n, 2, gloo)
    seed = 5 + e + k
    x, idx, w, grad_y = inputs(list(range(n)), rank, e, k, kind, seed, tokens=6)  # equal shards over TP
    got_y, got_dx, got_dw = moe_routings.forward_backward(TPChainDispatcher(e, gloo, tp_group), x, idx, w, grad_y)[4:]
    want_y, want_dx, want_dw = combined(x, idx, w, grad_y)
    ok = same(got_y, want_y) and same(got_dx, want_dx) and same(got_dw, want_dw)
    agree(bool(ok), gloo, f"tp chain e{e} k{k} {kind}")


def test_zipf_routing_is_skewed():
    """Zipf routings put >= 3x the mean rows on the most loaded expert at the benchmark's configs."""
    for e, k in [(8, 1), (8, 2), (64, 2), (64, 8)]:
        idx = [moe_routings.routing("zipf", 512, e, k, 3, r)[0] for r in range(8)]
        expert, _ = moe_routings.load_imbalance(idx, e, 8)
        assert expert >= 3, f"zipf e{e} k{k}: max/mean expert load {expert:.2f}"
        assert all(len(set(row.tolist())) == k for row in idx[0]), "experts of a token must be distinct"


@pytest.mark.parametrize("program", ["fused", "per_expert", "planned"])
@pytest.mark.parametrize("size", ["world", "pairs"])
@pytest.mark.parametrize("case", CASES, ids=[f"e{e}k{k}-{r}" for e, k, r in CASES])
def test_chimera_matches_the_per_expert_baseline(world, program, size, case):
    gloo = world[2]
    e, k, kind = case
    _, group, ranks, me = _group_of_case(world, size, e)
    data = inputs(ranks, me, e, k, kind, 31 + e + k)
    want = moe_routings.forward_backward(PerExpertDispatcher(e, group), *data)
    got = moe_routings.forward_backward(ChimeraDispatcher(e, program, group=None if size == "world" else group), *data)
    ok = all(same(a, b) for a, b in zip(got[:4], want[:4])) and all(same(a, b) for a, b in zip(got[4:], want[4:]))
    agree(bool(ok), gloo, f"chimera {program} {size} e{e} k{k} {kind}: "
          f"recv {[same(a, b) for a, b in zip(got[:4], want[:4])]}"
          f" y/dx/dw {[same(a, b) for a, b in zip(got[4:], want[4:])]}")


@pytest.mark.parametrize("case", [(8, 2, "uniform"), (8, 1, "one_expert"), (16, 4, "zipf")],
                         ids=["e8k2-uniform", "e8k1-one_expert", "e16k4-zipf"])
def test_chimera_sequence_shards_match_the_tp_chain(world, case):
    """tp=2 x ep=n/2 folded (mesh ep=n/2,tp=2, group ep+tp), tokens the tp=S0 shards: the same
    output and gradients as torchtitan's AllGather, dispatch, combine, ReduceScatter."""
    rank, n, gloo = world
    e, k, kind = case
    if n % 2 or e % n:
        pytest.skip(f"needs an even world whose size divides {e}")
    tp_group, _ = _groups(n, 2, gloo)
    data = inputs(list(range(n)), rank, e, k, kind, 9 + e + k, tokens=6)
    want = moe_routings.forward_backward(TPChainDispatcher(e, gloo, tp_group), *data)
    chimera_dispatcher = ChimeraDispatcher(e, "planned", mesh=f"ep={n // 2},tp=2", group="ep+tp", layout="tp=S0")
    got = moe_routings.forward_backward(chimera_dispatcher, *data)
    ok = all(same(a, b) for a, b in zip(got[4:], want[4:]))
    agree(bool(ok), gloo, f"chimera tp=S0 e{e} k{k} {kind}: y/dx/dw {[same(a, b) for a, b in zip(got[4:], want[4:])]}")


@pytest.mark.parametrize("program", ["fused", "per_expert"])
def test_chimera_replicated_tokens_combine_to_every_replica(world, program):
    """tp=R: both ranks of a TP pair hold the same tokens and routing (each replica dispatches
    a disjoint part when fused); every replica gets the whole combine output."""
    rank, n, gloo = world
    e, k = 8, 2
    if n % 2 or e % n:
        pytest.skip(f"needs an even world whose size divides {e}")
    pair = list(range(rank - rank % 2, rank - rank % 2 + 2))
    x, idx, w, grad_y = inputs(pair, 0, e, k, "uniform", 41, tokens=7)  # the pair's first rank's data on both
    y = ChimeraDispatcher(e, program, mesh=f"ep={n // 2},tp=2", group="ep+tp", layout="tp=R")
    recv_x, recv_expert, _, _, handle = y.dispatch(x, idx, w)
    got = y.combine(moe_routings.expert_fn(recv_x, recv_expert), handle)
    want, _, _ = combined(x, idx, w, grad_y)
    agree(same(got.detach(), want), gloo, f"chimera tp=R {program}: y differs")
