# SPDX-License-Identifier: Apache-2.0
# The "chimera" backend on CUDA tensors (chimera's NCCL backend, rendezvous through the store)
# against gloo on the same values copied to the host. Skipped without one GPU per rank or
# without a CUDA build of chimera; on a GPU node run it with mpirun like the others.
import pytest
import torch
import torch.distributed as dist

import chimera.torch._extension as ext

from conftest import agree

pytestmark = pytest.mark.skipif(
    not ext.load().cuda_supported() or torch.cuda.device_count() < 1,
    reason="needs a CUDA build of chimera and a GPU per rank")

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]


def values(shape, dtype, rank, seed=0):
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n) * 7 + rank * 3 + seed) % 5 - 2).reshape(shape).to(dtype)


@pytest.fixture(scope="module")
def device(world):
    rank, n, gloo = world
    if torch.cuda.device_count() < n:
        pytest.skip(f"{n} ranks but {torch.cuda.device_count()} GPUs")
    torch.cuda.set_device(rank % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_collectives_on_cuda_match_gloo(world, device, dtype):
    rank, n, gloo = world
    x = values((n * 2, 3), dtype, rank)
    ar = x.to(device)
    dist.all_reduce(ar)
    ref = x.clone()
    dist.all_reduce(ref, group=gloo)
    ok = torch.equal(ar.cpu(), ref)
    rs = torch.empty((2, 3), dtype=dtype, device=device)
    dist.reduce_scatter_tensor(rs, x.to(device))
    rs_ref = torch.empty((2, 3), dtype=dtype)
    dist.reduce_scatter_tensor(rs_ref, x, group=gloo)
    ok = ok and torch.equal(rs.cpu(), rs_ref)
    ag = torch.empty((n * 2 * n, 3), dtype=dtype, device=device)
    dist.all_gather_into_tensor(ag, x.to(device))
    ag_ref = torch.empty((n * 2 * n, 3), dtype=dtype)
    dist.all_gather_into_tensor(ag_ref, x, group=gloo)
    ok = ok and torch.equal(ag.cpu(), ag_ref)
    a2a = torch.empty_like(x, device=device)
    dist.all_to_all_single(a2a, x.to(device))
    a2a_ref = torch.empty_like(x)
    dist.all_to_all_single(a2a_ref, x, group=gloo)
    ok = ok and torch.equal(a2a.cpu(), a2a_ref)
    b = x.to(device)
    dist.broadcast(b, src=n - 1)
    b_ref = x.clone()
    dist.broadcast(b_ref, src=n - 1, group=gloo)
    ok = ok and torch.equal(b.cpu(), b_ref)
    torch.cuda.synchronize()
    agree(bool(ok), gloo, f"cuda collectives {dtype}")
