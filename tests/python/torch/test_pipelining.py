# SPDX-License-Identifier: Apache-2.0
# torch.distributed.pipelining schedules on the chimera process group (the default group) and
# on gloo (the reference), one rank per pipeline rank: the same model, microbatches and loss
# give the same losses and gradients, bit for bit (both run the same arithmetic; only the
# transport of activations and gradients differs).
import pytest
import torch
import torch.distributed as dist
from torch.distributed import pipelining

from conftest import agree

WIDTH = 16
BATCH = 16
MICROBATCHES = 8


def _stage_module(stage_index: int) -> torch.nn.Module:
    torch.manual_seed(1000 + stage_index)
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh())


def _loss(output, target):
    return torch.nn.functional.mse_loss(output, target)


def _run(schedule_name: str, stages_per_rank: int, group, rank: int, world: int):
    """Runs one step of the schedule over `group`; returns (losses, gradients of this rank)."""
    num_stages = world * stages_per_rank
    if schedule_name == "ScheduleZBVZeroBubble":
        indices = [rank, num_stages - 1 - rank]  # the V: rank r holds stages r and 2W-1-r
    else:
        indices = [rank + k * world for k in range(stages_per_rank)]
    modules = [_stage_module(i) for i in indices]
    stages = [pipelining.PipelineStage(m, i, num_stages, torch.device("cpu"), group=group)
              for m, i in zip(modules, indices)]
    schedule_class = getattr(pipelining, schedule_name)
    schedule = schedule_class(stages[0] if stages_per_rank == 1 else stages, MICROBATCHES, loss_fn=_loss)
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(BATCH, WIDTH, generator=generator)
    target = torch.randn(BATCH, WIDTH, generator=generator)
    losses = []
    kwargs = {}
    if 0 in indices:
        kwargs["x"] = x
    if num_stages - 1 in indices:
        kwargs["target"] = target
        kwargs["losses"] = losses
    args = (kwargs.pop("x"),) if "x" in kwargs else ()
    schedule.step(*args, **kwargs)
    grads = [p.grad.clone() for m in modules for p in m.parameters()]
    return [loss.detach().item() for loss in losses], grads


SCHEDULES = [("ScheduleGPipe", 1), ("Schedule1F1B", 1), ("ScheduleInterleaved1F1B", 2),
             ("ScheduleInterleavedZeroBubble", 2), ("ScheduleZBVZeroBubble", 2)]


@pytest.mark.parametrize("schedule_name,stages_per_rank", SCHEDULES, ids=[s for s, _ in SCHEDULES])
def test_schedule_matches_gloo(world, schedule_name, stages_per_rank):
    rank, size, gloo = world
    if not hasattr(pipelining, schedule_name):
        pytest.skip(f"torch {torch.__version__} has no {schedule_name}")
    chimera_losses, chimera_grads = _run(schedule_name, stages_per_rank, None, rank, size)
    gloo_losses, gloo_grads = _run(schedule_name, stages_per_rank, gloo, rank, size)
    holds_last = rank == (0 if schedule_name == "ScheduleZBVZeroBubble" else size - 1)
    ok = chimera_losses == gloo_losses and (len(chimera_losses) == MICROBATCHES) == holds_last
    ok = ok and all(torch.equal(a, b) for a, b in zip(chimera_grads, gloo_grads))
    if holds_last:
        print(f"{schedule_name}: losses chimera {chimera_losses} gloo {gloo_losses}")
    agree(ok, gloo, f"{schedule_name}: losses {chimera_losses} vs gloo {gloo_losses}, gradients equal "
                    f"{[torch.equal(a, b) for a, b in zip(chimera_grads, gloo_grads)]}")
    dist.barrier()
