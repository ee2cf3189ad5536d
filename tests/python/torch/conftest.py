# SPDX-License-Identifier: Apache-2.0
# Shared setup of the torch tests, which run as one pytest per rank under mpirun: the default
# process group is chimera's, a gloo group over the same ranks is the reference, and every
# verdict is agreed across ranks (a rank that fails alone must not leave the others waiting).
import pytest
import torch
import torch.distributed as dist

import chimera.torch as ct


@pytest.fixture(scope="session")
def world():
    ct.init_process_group()
    gloo = dist.new_group(backend="gloo")
    yield dist.get_rank(), dist.get_world_size(), gloo
    dist.barrier()
    dist.destroy_process_group()


def agree(ok: bool, gloo, what: str) -> None:
    """Asserts on every rank that every rank's `ok` holds (one gloo MIN all-reduce)."""
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=gloo)
    assert ok, f"rank {dist.get_rank()}: {what}"
    assert flag.item() == 1, f"another rank failed: {what}"
