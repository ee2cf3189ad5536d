# SPDX-License-Identifier: Apache-2.0
# A training script that ends holding its last step's graph through chimera.torch.moe: torch
# never frees that graph at exit, and the exchange, dispatch state and backend its contexts hold
# must not be reported as leaks of chimera's bindings (ctest fails on "nanobind: leaked").
import torch
import torch.distributed as dist

import chimera.torch as ct
from chimera.torch import moe

ct.init_process_group()
size = dist.get_world_size()
x = torch.ones((4, 8), requires_grad=True)
topk_idx = torch.arange(4).remainder(2 * size).unsqueeze(1)
topk_weights = torch.ones((4, 1), requires_grad=True)
recv_x, recv_expert, _, _, handle = moe.dispatch(x, topk_idx, topk_weights, 2 * size)
y = moe.combine(recv_x * 2, handle)
assert torch.equal(y.detach(), 2 * x.detach()), "combine of the doubled rows"
