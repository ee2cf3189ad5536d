# SPDX-License-Identifier: Apache-2.0
# Asynchronous Work objects of the chimera backend (async_op=True on CPU tensors): the call
# returns before the collective completes, compute overlaps it, ops on a group complete in issue
# order (also against a following synchronous op), wait(timeout) raises while it is still
# running, and an op's error is raised by wait() and its future, not by the call.
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from chimera.torch import _extension

from conftest import agree

LATE = 2.0  # seconds rank 0 waits before joining, so the others' collective is still running


def test_runs_on_the_op_thread(world):
    rank, n, gloo = world
    agree(_extension.load().mpi_thread_multiple(), gloo, "MPI is not MPI_THREAD_MULTIPLE: async ops would run inline")


def test_async_all_reduce_overlaps_compute_and_completes_in_order(world):
    rank, n, gloo = world
    dist.barrier(group=gloo)
    if rank == 0:
        time.sleep(LATE)
    x = torch.full((1 << 16,), float(rank + 1))
    start = time.perf_counter()
    first = dist.all_reduce(x, async_op=True)
    second = dist.all_reduce(x, async_op=True)  # the same tensor again: only right if run after `first`
    issued = time.perf_counter() - start
    pending = not first.is_completed()
    a = torch.randn(256, 256)
    for _ in range(20):  # compute while the all-reduces wait for rank 0
        a = torch.tanh(a @ a)
    second.wait()
    in_order = first.is_completed()
    first.wait()
    total = n * (n + 1) / 2
    ok = torch.equal(x, torch.full_like(x, total * n)) and in_order
    if rank != 0:
        ok = ok and issued < LATE / 2 and pending
    agree(ok, gloo, f"issue took {issued:.3f} s, pending after issue {pending}, in order {in_order}, x[0] {x[0]}")


def test_a_synchronous_op_runs_after_the_queued_ones(world):
    rank, n, gloo = world
    x = torch.full((1000,), 1.0)
    work = dist.all_reduce(x, async_op=True)
    dist.all_reduce(x)  # waits for `work` first: x is then n, the sum n * n
    ok = work.is_completed() and torch.equal(x, torch.full_like(x, float(n * n)))
    agree(ok, gloo, f"x[0] {x[0]} (expected {n * n})")


def test_wait_with_a_timeout_raises_while_the_op_runs(world):
    rank, n, gloo = world
    dist.barrier(group=gloo)
    if rank == 0:
        time.sleep(LATE)
    x = torch.ones(64)
    work = dist.all_reduce(x, async_op=True)
    raised = rank == 0  # rank 0 arrives last: its op may complete within the timeout
    if rank != 0:
        with pytest.raises(RuntimeError, match="not completed within the wait's timeout of 100 ms"):
            work.wait(timeout=timedelta(milliseconds=100))
        raised = True
    work.wait()
    agree(raised and torch.equal(x, torch.full_like(x, float(n))), gloo, f"x[0] {x[0]}")


def test_an_error_surfaces_at_wait_and_the_group_goes_on(world):
    rank, n, gloo = world
    flags = torch.ones(8, dtype=torch.bool)
    work = dist.all_reduce(flags, async_op=True)  # bool reductions are not supported: fails on the op thread
    with pytest.raises(RuntimeError, match="reductions of dtype Bool are not supported"):
        work.wait()
    failed = work.is_completed()
    with pytest.raises(RuntimeError, match="reductions of dtype Bool"):
        work.get_future().wait()
    x = torch.full((16,), 2.0)
    dist.all_reduce(x, async_op=True).wait()
    agree(failed and torch.equal(x, torch.full_like(x, 2.0 * n)), gloo, f"failed {failed}, x[0] {x[0]}")


def test_async_reduce_scatter_and_all_gather(world):
    rank, n, gloo = world
    inp = torch.arange(n * 4, dtype=torch.float32) + rank
    out = torch.empty(4)
    rs = dist.reduce_scatter_tensor(out, inp, async_op=True)
    gathered = torch.empty(n * 4)
    ag = dist.all_gather_into_tensor(gathered, out, async_op=True)
    ag.wait()
    rs.wait()
    expected = (torch.arange(n * 4, dtype=torch.float32) * n + n * (n - 1) / 2)
    agree(torch.equal(gathered, expected), gloo, f"{gathered} vs {expected}")
