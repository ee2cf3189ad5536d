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


def sub_mesh_input(sub_mesh, placement, rank: int):
    """An 8 x 12 float64 DTensor on `sub_mesh` with `placement` (one of Shard, Replicate,
    Partial): small integers; a Partial one holds (rank + 1) times the tensor, so its sums are
    exact."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, distribute_tensor

    full = torch.arange(8 * 12, dtype=torch.float64).reshape(8, 12) % 11 - 5
    partial = isinstance(placement, Partial)
    d = distribute_tensor(full, sub_mesh, [Replicate() if partial else placement])
    if partial:
        d = DTensor.from_local(d.to_local() * (rank + 1), sub_mesh, [placement], run_check=False)
    return d
