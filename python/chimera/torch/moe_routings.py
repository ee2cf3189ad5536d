# SPDX-License-Identifier: Apache-2.0
"""Seeded top-k routings and token data for MoE benchmarks and tests.

A routing is what a router hands to ``moe.dispatch``: ``topk_idx`` [T, K] (int64, K distinct
global expert ids per token) and ``topk_weights`` [T, K]. Every generator is a function of
(kind, seed, owner rank, T, E, K), so any rank can rebuild any other rank's routing locally.

* ``uniform``: K distinct experts per token, uniformly at random;
* ``zipf``: K distinct experts drawn without replacement from a Zipf law over the experts
  (P(e) proportional to 1 / (e + 1)^s, s = ``ZIPF_EXPONENT``: expert 0 is the hottest, so the
  first ranks are the most loaded); its load skew is measured by :func:`load_imbalance`;
* ``one_expert``: every token to expert 0 (and, for K > 1, to experts 1 .. K-1 as well): all
  rows land on the ranks of the first K experts.

Weights and token values are multiples of powers of two small enough that every sum and dot
product the dispatchers form (a token's K weighted rows, the gradient of a weight over H
features, up to H = 2^14) is exact in f32 in any order: results of differently ordered but
equivalent computations can be compared bit for bit (as nccl-tests checks its results).
"""

from __future__ import annotations

import torch

ROUTINGS = ("uniform", "zipf", "one_expert")
ZIPF_EXPONENT = 2.0


def _generator(seed: int, rank: int, salt: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + rank * 7919 + salt)


def routing(kind: str, tokens: int, num_experts: int, topk: int, seed: int, rank: int):
    """(topk_idx [T, K] int64, topk_weights [T, K] f32) of `rank`'s `tokens` tokens."""
    if not 1 <= topk <= num_experts:
        raise ValueError(f"top-{topk} of {num_experts} experts")
    g = _generator(seed, rank, 1)
    if kind == "uniform":
        idx = torch.rand(tokens, num_experts, generator=g).argsort(dim=1)[:, :topk]
    elif kind == "zipf":
        p = 1.0 / torch.arange(1, num_experts + 1, dtype=torch.float64) ** ZIPF_EXPONENT
        idx = torch.multinomial(p.expand(tokens, num_experts), topk, replacement=False, generator=g) \
            if tokens else torch.empty(0, topk, dtype=torch.int64)
    elif kind == "one_expert":
        idx = torch.arange(topk).expand(tokens, topk).clone()
    else:
        raise ValueError(f"routing {kind!r} is not one of {', '.join(ROUTINGS)}")
    # Weights in {1/8, ..., 4/8}: exact products and sums.
    weights = torch.randint(1, 5, (tokens, topk), generator=g).float() / 8
    return idx.to(torch.int64).contiguous(), weights


def tokens(count: int, hidden: int, seed: int, rank: int, dtype=torch.float32):
    """Token activations [count, hidden] of `rank`: multiples of 1/4 in [-1, 1]."""
    g = _generator(seed, rank, 2)
    return (torch.randint(-4, 5, (count, hidden), generator=g).float() / 4).to(dtype)


def expert_fn(recv_x, recv_expert):
    """A stand-in for the expert MLPs that keeps values exact: row times (1 + expert id mod 4)."""
    return recv_x * (1 + recv_expert % 4).to(recv_x.dtype).unsqueeze(1)


def forward_backward(dispatcher, x, topk_idx, topk_weights, grad_y):
    """One step through ``dispatcher`` (the interface of :mod:`chimera.torch.moe_baselines`):
    dispatch, :func:`expert_fn`, combine, and the backward of ``sum(y * grad_y)``. Returns
    ``[recv_x, recv_expert, recv_weight, tokens_per_expert, y, grad_x, grad_weights]`` (a
    gradient that did not flow reads as zeros), for comparing dispatchers bit for bit."""
    x = x.clone().requires_grad_(True)
    w = topk_weights.clone().requires_grad_(True)
    recv_x, recv_expert, recv_w, per_expert, handle = dispatcher.dispatch(x, topk_idx, w)
    y = dispatcher.combine(expert_fn(recv_x, recv_expert), handle)
    (y * grad_y).sum().backward()
    grad = lambda t: t.grad if t.grad is not None else torch.zeros_like(t)  # noqa: E731
    return [recv_x.detach(), recv_expert, recv_w.detach(), per_expert, y.detach(), grad(x), grad(w)]


def load_imbalance(topk_idx_per_rank, num_experts: int, ranks: int):
    """(expert, rank) max / mean load, the load counted in (token, expert) rows over all the
    owners' routings given (a list of [T, K] tensors), experts in contiguous blocks over
    `ranks` ranks."""
    counts = torch.zeros(num_experts, dtype=torch.float64)
    for idx in topk_idx_per_rank:
        counts += torch.bincount(idx.reshape(-1), minlength=num_experts).double()
    if counts.sum() == 0:
        return 1.0, 1.0
    per_rank = counts.view(ranks, -1).sum(1)
    return (counts.max() / counts.mean()).item(), (per_rank.max() / per_rank.mean()).item()
