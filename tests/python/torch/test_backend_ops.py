# SPDX-License-Identifier: Apache-2.0
# The "chimera" torch.distributed backend against gloo: every op DTensor, FSDP2 and Megatron
# use, for every dtype gloo reduces, on values whose sums are exact (so results must be equal
# bit for bit). Run under mpirun with 4 ranks (ctest label python).
import os
import time

import pytest
import torch
import torch.distributed as dist

from conftest import agree

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]


def values(shape, dtype, rank, seed=0):
    """Small integers, a function of (seed, rank, index): exact in every dtype under +,*,min,max of 4 ranks."""
    n = 1
    for s in shape:
        n *= s
    base = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3 + seed) % 5 + (1 if dtype == torch.uint8 else -2)
    return base.reshape(shape).to(dtype)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS, ids=str)
def test_all_reduce(world, dtype, op):
    rank, n, gloo = world
    x = values((3, 5), dtype, rank)
    ours, ref = x.clone(), x.clone()
    work = dist.all_reduce(ours, op=op, async_op=True)
    work.wait()
    dist.all_reduce(ref, op=op, group=gloo)
    agree(same(ours, ref), gloo, f"all_reduce {dtype} {op}: {ours} vs {ref}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS, ids=str)
def test_reduce_scatter_tensor(world, dtype, op):
    rank, n, gloo = world
    x = values((n * 2, 3), dtype, rank)
    ours = torch.empty((2, 3), dtype=dtype)
    ref = torch.empty((2, 3), dtype=dtype)
    dist.reduce_scatter_tensor(ours, x, op=op)
    dist.reduce_scatter_tensor(ref, x, op=op, group=gloo)
    agree(same(ours, ref), gloo, f"reduce_scatter_tensor {dtype} {op}: {ours} vs {ref}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_gather(world, dtype):
    rank, n, gloo = world
    x = values((2, 3), dtype, rank)
    ours = torch.empty((n * 2, 3), dtype=dtype)
    ref = torch.empty((n * 2, 3), dtype=dtype)
    dist.all_gather_into_tensor(ours, x)
    dist.all_gather_into_tensor(ref, x, group=gloo)
    lists = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(lists, x)
    agree(same(ours, ref) and same(torch.cat(lists), ref), gloo, f"all_gather {dtype}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_to_all_single_even_and_uneven(world, dtype):
    rank, n, gloo = world
    x = values((n * 2, 3), dtype, rank)
    ours, ref = torch.empty_like(x), torch.empty_like(x)
    dist.all_to_all_single(ours, x)
    dist.all_to_all_single(ref, x, group=gloo)
    ok = same(ours, ref)
    # Uneven: rank r sends (r + j) % 3 rows to rank j (zero rows included).
    send = [(rank + j) % 3 for j in range(n)]
    recv = [(j + rank) % 3 for j in range(n)]
    x = values((sum(send), 4), dtype, rank, seed=1)
    ours = torch.empty((sum(recv), 4), dtype=dtype)
    ref = torch.empty_like(ours)
    dist.all_to_all_single(ours, x, recv, send)
    dist.all_to_all_single(ref, x, recv, send, group=gloo)
    agree(ok and same(ours, ref), gloo, f"all_to_all_single {dtype}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_broadcast_scatter_gather(world, dtype):
    rank, n, gloo = world
    root = n - 1
    x = values((4, 2), dtype, rank)
    ours, ref = x.clone(), x.clone()
    dist.broadcast(ours, src=root)
    dist.broadcast(ref, src=root, group=gloo)
    ok = same(ours, ref)
    chunks = [values((2, 2), dtype, rank, seed=j) for j in range(n)] if rank == root else None
    ours, ref = torch.empty((2, 2), dtype=dtype), torch.empty((2, 2), dtype=dtype)
    dist.scatter(ours, chunks, src=root)
    dist.scatter(ref, chunks, src=root, group=gloo)
    ok = ok and same(ours, ref)
    mine = values((3,), dtype, rank)
    got = [torch.empty(3, dtype=dtype) for _ in range(n)] if rank == 0 else None
    exp = [torch.empty(3, dtype=dtype) for _ in range(n)] if rank == 0 else None
    dist.gather(mine, got, dst=0)
    dist.gather(mine, exp, dst=0, group=gloo)
    if rank == 0:
        ok = ok and all(same(a, b) for a, b in zip(got, exp))
    agree(ok, gloo, f"broadcast/scatter/gather {dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_send_recv_and_batch(world, dtype):
    rank, n, gloo = world
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    x = values((5,), dtype, rank)
    got = torch.empty_like(x)
    # Blocking ring: even ranks send first, odd ranks receive first.
    if rank % 2 == 0:
        dist.send(x, nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(x, nxt)
    ok = same(got, values((5,), dtype, prv))
    # batch_isend_irecv: both directions at once (coalesced into one grouped call).
    a, b = torch.empty_like(x), torch.empty_like(x)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.isend, x, prv),
                                   dist.P2POp(dist.irecv, a, prv), dist.P2POp(dist.irecv, b, nxt)])
    for req in reqs:
        req.wait()
    ok = ok and same(a, values((5,), dtype, prv)) and same(b, values((5,), dtype, nxt))
    agree(ok, gloo, f"send/recv {dtype}")


def test_coalesced_variants(world):
    rank, n, gloo = world
    xs = [values((n, 2), torch.float32, rank, seed=s) for s in range(3)]
    outs = [torch.empty((1, 2)) for _ in xs]
    refs = [torch.empty((1, 2)) for _ in xs]
    with dist._coalescing_manager(async_ops=True) as cm:  # noqa: SLF001 (what DTensor/FSDP use)
        for o, x in zip(outs, xs):
            dist.reduce_scatter_tensor(o, x)
    cm.wait()
    for o, x in zip(refs, xs):
        dist.reduce_scatter_tensor(o, x, group=gloo)
    ok = all(same(a, b) for a, b in zip(outs, refs))
    gathered = [torch.empty((n, 2)) for _ in xs]
    with dist._coalescing_manager(async_ops=True) as cm:  # noqa: SLF001
        for g, o in zip(gathered, outs):
            dist.all_gather_into_tensor(g, o)
    cm.wait()
    expect = [torch.empty((n, 2)) for _ in xs]
    for g, o in zip(expect, refs):
        dist.all_gather_into_tensor(g, o, group=gloo)
    ok = ok and all(same(a, b) for a, b in zip(gathered, expect))
    ar = [x.clone() for x in xs]
    with dist._coalescing_manager(async_ops=True) as cm:  # noqa: SLF001
        for t in ar:
            dist.all_reduce(t)
    cm.wait()
    ref_ar = [x.clone() for x in xs]
    for t in ref_ar:
        dist.all_reduce(t, group=gloo)
    agree(ok and all(same(a, b) for a, b in zip(ar, ref_ar)), gloo, "coalesced variants")


def test_new_group_and_barrier(world):
    rank, n, gloo = world
    evens = dist.new_group([r for r in range(n) if r % 2 == 0])
    odds = dist.new_group([r for r in range(n) if r % 2 == 1])
    mine = evens if rank % 2 == 0 else odds
    x = torch.tensor([float(rank)])
    dist.all_reduce(x, group=mine)
    expect = float(sum(r for r in range(n) if r % 2 == rank % 2))
    dist.barrier()
    members = [r for r in range(n) if r % 2 == rank % 2]
    y = torch.empty(len(members), dtype=torch.int64)
    dist.all_gather_into_tensor(y, torch.tensor([rank]), group=mine)
    agree(x.item() == expect and y.tolist() == members, gloo, f"sub-group: {x.item()} vs {expect}, {y.tolist()}")


def test_errors_are_raised_not_crashes(world):
    rank, n, gloo = world
    with pytest.raises((RuntimeError, ValueError), match="chimera|does not support|dtype"):
        dist.all_reduce(torch.tensor([True, False]))
    with pytest.raises((RuntimeError, ValueError)):
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
    # A wrong output size fails locally with a message naming both sizes, before any transfer.
    with pytest.raises(RuntimeError, match="elements"):
        dist.all_gather_into_tensor(torch.empty(n + 1), torch.ones(1))
    agree(True, gloo, "errors")


def test_all_gather_coalesced(world):
    rank, n, gloo = world
    xs = [values((2, 3), torch.float32, rank, seed=s) for s in range(3)]
    ours = [[torch.empty_like(x) for x in xs] for _ in range(n)]  # one list per rank
    ref = [[torch.empty_like(x) for x in xs] for _ in range(n)]
    dist.all_gather_coalesced(ours, xs)
    dist.all_gather_coalesced(ref, xs, group=gloo)
    ok = all(same(a, b) for la, lb in zip(ours, ref) for a, b in zip(la, lb))
    agree(ok, gloo, "all_gather_coalesced")


def test_sparse_all_reduce(world):
    rank, n, gloo = world
    # Rank r holds entries at rows r .. r+1 (overlapping with its neighbour's) of an 8x3 tensor.
    indices = torch.tensor([[rank, rank + 1, 7], [0, 2, rank % 3]])
    ours = torch.sparse_coo_tensor(indices, torch.tensor([1.0, 2.0, float(rank)]), (8, 3))
    ref = ours.clone()
    dist.all_reduce(ours)
    dist.all_reduce(ref, group=gloo)
    agree(ours.is_sparse and torch.equal(ours.to_dense(), ref.to_dense()), gloo,
          f"sparse all_reduce: {ours.to_dense()} vs {ref.to_dense()}")


def test_monitored_barrier_names_the_late_rank(world):
    rank, n, gloo = world
    import datetime
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30), wait_all_ranks=True)
    # On a group of its own: a timed-out transfer may leave a group unusable (gloo closes the pair).
    group = dist.new_group(list(range(n)))
    message = ""
    start = time.monotonic()
    if rank != 1:  # rank 1 never arrives
        try:
            dist.monitored_barrier(group, timeout=datetime.timedelta(seconds=2))
        except RuntimeError as error:
            message = str(error)
    took = time.monotonic() - start
    # Rank 0 names rank 1; the others raise at once (not after the group's timeout): answered by
    # rank 0 on MPI, which names rank 1 to them too; over gloo rank 0's timed-out receive closes
    # the group's connections first, as with gloo's own monitored barrier.
    if rank == 0:
        ok = "Rank 1 failed to pass monitoredBarrier in 2000 ms" in message
    else:
        named = "rank 1 failed to pass it" in message or os.environ.get("CHIMERA_EXPECT_TRANSPORT") == "gloo"
        ok = rank == 1 or (f"Rank {rank} successfully reached monitoredBarrier, but received errors while waiting "
                           "for send/recv from rank 0" in message and named)
    agree(ok and took < 12, gloo, f"monitored_barrier with rank 1 missing: {message!r} after {took:.1f} s")
    # A monitored barrier's timeout is an answer: every rank goes on.
    x = torch.ones(4)
    dist.all_reduce(x)
    agree(torch.equal(x, torch.full((4,), float(n))), gloo, "an all_reduce after a failed monitored barrier")


def test_monitored_barrier_wait_all_ranks_names_every_late_rank(world):
    rank, n, gloo = world
    import datetime
    group = dist.new_group(list(range(n)))
    message = ""
    if rank in (0, 2):  # ranks 1 and 3 never arrive
        try:
            dist.monitored_barrier(group, timeout=datetime.timedelta(seconds=1), wait_all_ranks=True)
        except RuntimeError as error:
            message = str(error)
    late = ", ".join(str(r) for r in range(1, n) if r != 2)
    ok = {0: f"Ranks {late} failed to pass monitoredBarrier in 1000 ms" in message,
          2: "Rank 2 successfully reached monitoredBarrier" in message}.get(rank, True)
    agree(ok, gloo, f"monitored_barrier(wait_all_ranks=True): {message!r}")


def test_monitored_barrier_rank_0_without_time(world):
    rank, n, gloo = world
    import datetime
    group = dist.new_group(list(range(n)))
    message = ""
    if rank == 0:  # the others never arrive; with no time to wait, rank 0 raises at once
        try:
            group.monitored_barrier(datetime.timedelta(seconds=0))
        except RuntimeError as error:
            message = str(error)
    agree(rank != 0 or "Rank 0 timed out in monitoredBarrier after 0 ms" in message, gloo,
          f"monitored_barrier(timeout=0) on rank 0: {message!r}")


def test_sequence_numbers_and_debug_detail(world):
    rank, n, gloo = world
    group = dist.distributed_c10d._get_default_group()  # noqa: SLF001
    before = group._get_sequence_number_for_group()  # noqa: SLF001
    dist.all_reduce(torch.ones(1))
    after = group._get_sequence_number_for_group()  # noqa: SLF001
    seqs = torch.tensor([after], dtype=torch.int64)
    everyone = [torch.empty(1, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(everyone, seqs, group=gloo)
    ok = after > before and all(int(s.item()) == after for s in everyone)
    # Under TORCH_DISTRIBUTED_DEBUG=DETAIL a new group is wrapped in torch's ProcessGroupWrapper,
    # which checks every collective's signature across ranks (it needs the sequence numbers).
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        checked = dist.new_group(list(range(n)), backend="chimera")
        x = torch.full((4,), float(rank))
        dist.all_reduce(x, group=checked)
        ok = ok and x.tolist() == [float(sum(range(n)))] * 4
        with pytest.raises(RuntimeError, match="(?i)mismatch|inconsistent|detected"):
            dist.all_reduce(torch.ones(2 if rank == 0 else 3), group=checked)
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)
    agree(ok, gloo, f"sequence numbers {before} -> {after} on every rank, DETAIL wrapper")


def test_backend_name_in_ddp_logging(world):
    rank, n, gloo = world
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    model(torch.ones(3, 4)).sum().backward()
    name = model._get_ddp_logging_data().get("backend_name")  # noqa: SLF001
    agree(name == "chimera" and dist.get_backend() == "chimera", gloo, f"DDP logs backend {name!r}")


def test_transport(world):
    import chimera.torch.backend as backend
    expected = os.environ.get("CHIMERA_EXPECT_TRANSPORT")
    got = backend.transport(world[1])
    agree(expected is None or got == expected, world[2], f"host transport {got}, expected {expected}")
