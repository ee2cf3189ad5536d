# SPDX-License-Identifier: Apache-2.0
# What a routed dispatch and combine must produce, computed on one rank from every rank's
# inputs (rebuilt from their seeds): the rows a rank receives, grouped by local expert, then by
# source rank, then by token; each token's combine output and the gradients of x and of the
# routing weights, by autograd on one process (no communication).
import torch

from chimera.torch.moe_baselines import weighted_sum
from chimera.torch.moe_routings import expert_fn


def received(xs, idxs, ws, num_experts, n, me):
    """(recv_x, recv_expert, recv_weight, tokens_per_expert) of group rank `me`, given every
    group rank's x, topk_idx and topk_weights (lists indexed by group rank)."""
    local = num_experts // n
    rows, experts, weights, counts = [], [], [], []
    for e in range(me * local, (me + 1) * local):
        count = 0
        for src in range(n):
            tok, kk = (idxs[src] == e).nonzero(as_tuple=True)
            rows.append(xs[src][tok])
            weights.append(ws[src][tok, kk])
            experts.append(torch.full((len(tok),), e, dtype=torch.int64))
            count += len(tok)
        counts.append(count)
    h = xs[0].shape[1]
    cat = lambda parts, empty: torch.cat(parts) if parts else empty  # noqa: E731
    return (cat(rows, torch.empty(0, h)), cat(experts, torch.empty(0, dtype=torch.int64)),
            cat(weights, torch.empty(0)), torch.tensor(counts, dtype=torch.int64))


def combined(x, idx, w, grad_y):
    """(y, grad x, grad topk_weights) of one owner's tokens through expert_fn, loss = sum(y * grad_y)."""
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    t, k = idx.shape
    out = expert_fn(x[:, None, :].expand(t, k, x.shape[1]).reshape(t * k, x.shape[1]), idx.reshape(-1))
    y = weighted_sum(w, out.view(t, k, x.shape[1]))
    (y * grad_y).sum().backward()
    return y.detach(), x.grad, w.grad
