# SPDX-License-Identifier: Apache-2.0
# The NCCL backend on torch CUDA tensors (one GPU per rank): collectives against the reference,
# a fused Session window, and the memory-space check. Skipped, on every rank alike, without a
# CUDA build or without a GPU per local rank (CI has none: see docs/python.md).
import os

import numpy as np
import pytest

import chimera

from reference import rank_values, reduce

pytestmark = pytest.mark.mpi


def _gpus_for_every_local_rank() -> bool:
    if not chimera.has_cuda:
        return False
    try:
        import torch
    except ImportError:
        return False
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
    return torch.cuda.is_available() and torch.cuda.device_count() >= local


needs_gpus = pytest.mark.skipif(not _gpus_for_every_local_rank(), reason="needs a CUDA build and one GPU per rank")


@pytest.fixture(scope="module")
def nccl(world):
    import torch

    rank, size = world
    torch.cuda.set_device(int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
    with chimera.init(f"dp=2,tp={size // 2}", backend="nccl") as backend:
        yield backend


@needs_gpus
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32"])
def test_all_reduce_and_reduce_scatter_on_cuda(nccl, dtype):
    import torch

    torch_dtype = getattr(torch, dtype)
    group = nccl.mesh.group_ranks(nccl.rank, "tp")
    x = torch.from_numpy(rank_values(nccl.rank, 24)).to(torch_dtype).cuda()
    nccl.all_reduce(x, axes="tp")
    out = torch.empty(24 // len(group), dtype=torch_dtype, device="cuda")
    y = torch.from_numpy(rank_values(nccl.rank, 24)).to(torch_dtype).cuda()
    nccl.reduce_scatter(y, out, axes="tp")
    nccl.synchronize()
    expected = reduce([rank_values(r, 24) for r in group], "sum", False)
    np.testing.assert_array_equal(x.double().cpu().numpy(), expected)
    g = group.index(nccl.rank)
    np.testing.assert_array_equal(out.double().cpu().numpy(), expected.reshape(len(group), -1)[g])


@needs_gpus
def test_session_fuses_on_cuda(nccl):
    import torch

    tp_size = nccl.mesh.shape[1]
    tp = nccl.mesh.coordinates(nccl.rank)[1]
    session = chimera.Session(nccl)
    y = torch.full((8 * tp_size, 4), float(nccl.rank), device="cuda")
    h = session.all_reduce(session.tensor(y, chimera.Layout("tp=P", nccl.mesh)), "tp")
    session.consume(h, chimera.Layout("tp=S0", nccl.mesh))
    nccl.synchronize()
    expected = float(sum(nccl.mesh.group_ranks(nccl.rank, "tp")))
    assert torch.equal(y[8 * tp:8 * (tp + 1)].cpu(), torch.full((8, 4), expected))
    assert session.stats()["fused_chains"] == 1


@needs_gpus
def test_host_tensor_on_nccl_raises_value_error(nccl):
    import torch

    with pytest.raises(ValueError, match="must be in CUDA device memory for this backend, but it is on cpu"):
        nccl.all_reduce(torch.ones(4))
