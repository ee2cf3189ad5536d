# SPDX-License-Identifier: Apache-2.0
# Point-to-point on the "chimera" process group as c10d expects it: isend/irecv return at once
# (two ranks that both send a large message before receiving do not deadlock), transfers
# between two ranks with one tag complete in issue order, recv from any source names the
# sender, and the first operation of a new group may be a point-to-point one. On the gloo
# transport a send completes only once its receiver took it: receives progress without their
# wait(), so a ring where every rank waits for its send first, many messages on one tag and
# torch's batch_isend_irecv all complete.
import torch
import torch.distributed as dist

from conftest import agree

LARGE = 1 << 20  # float32 elements: 4 MiB, far beyond any eager-send limit


def test_isend_irecv_return_at_once(world):
    rank, n, gloo = world
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    out = torch.full((LARGE,), float(rank))
    got = torch.empty(LARGE)
    # Every rank sends before it receives: a send that waits for its receiver would deadlock.
    send = dist.isend(out, nxt)
    recv = dist.irecv(got, prv)
    recv.wait()
    send.wait()
    agree(bool((got == float(prv)).all()), gloo, f"isend/irecv ring: got {got[:3]} from {prv}")


def test_transfers_complete_in_issue_order(world):
    rank, n, gloo = world
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    sizes = [LARGE, 3, LARGE // 2, 1]  # small ones must not overtake large ones
    sends = [dist.isend(torch.full((s,), float(10 * rank + i)), nxt) for i, s in enumerate(sizes)]
    outs = [torch.empty(s) for s in sizes]
    recvs = [dist.irecv(o, prv) for o in outs]
    for w in recvs[::-1] + sends:  # waited for in reverse: completion must not depend on it
        w.wait()
    ok = all(bool((o == float(10 * prv + i)).all()) for i, o in enumerate(outs))
    agree(ok, gloo, f"in-order transfers from {prv}: {[o[:1].tolist() for o in outs]}")


def test_recv_from_any_source(world):
    rank, n, gloo = world
    ok = True
    if rank == 0:
        sources = []
        for _ in range(n - 1):
            t = torch.empty(2)
            sources.append(dist.recv(t))  # no src: any source, returns the sender
            ok = ok and t.tolist() == [float(sources[-1])] * 2
        ok = ok and sorted(sources) == list(range(1, n))
        work = dist.irecv(torch.empty(2), tag=5)  # the Work of an any-source irecv names the sender
        work.wait()
        ok = ok and work._source_rank() == 1  # noqa: SLF001
    else:
        dist.send(torch.full((2,), float(rank)), 0)
        if rank == 1:
            dist.send(torch.ones(2), 0, tag=5)
    agree(ok, gloo, "recv from any source")


def test_first_operation_of_a_group_is_point_to_point(world):
    rank, n, gloo = world
    # The group's communicators are made when it is created, so a first operation that only
    # two of its ranks make (here: a recv from any source) cannot wait for the others.
    group = dist.new_group(list(range(n)))
    if rank == 1:
        t = torch.empty(1)
        src = dist.recv(t, group=group)
        ok = src == 0 and t.item() == 42.0
    elif rank == 0:
        dist.send(torch.tensor([42.0]), 1, group=group)
        ok = True
    else:
        ok = True
    agree(ok, gloo, "first operation of a new group is a recv from any source")
    dist.destroy_process_group(group)


def test_tags_reserved_by_chimera_are_refused(world):
    rank, n, gloo = world
    # The largest tag is chimera's own on both transports, and negative
    # tags are no tags: each is InvalidArgument on the calling rank, naming the tag and the range.
    errors = []
    for tag in (2**31 - 1, -1):
        try:
            dist.send(torch.ones(1), (rank + 1) % n, tag=tag)
        except RuntimeError as error:
            errors.append(str(error))
    ok = len(errors) == 2 and all("invalid argument: tag" in e and "the tags a caller may use" in e for e in errors)
    ok = ok and "tag 2147483647 is outside [0, " in errors[0] and "tag -1 is outside [0, " in errors[1]
    # Each refused send told its receiver: the next two receives from the refusing rank fail
    # at once, naming it and the tag it was given (test_refused_transfers.py times them).
    prv = (rank - 1) % n
    for tag in (2**31 - 1, -1):
        try:
            dist.recv(torch.empty(1), prv, tag=7)
            errors.append("a recv after a refused send returned")
            ok = False
        except RuntimeError as error:
            ok = ok and f"rank {prv}'s send to this rank failed" in str(error) and f"tag {tag} " in str(error)
            errors.append(str(error))
    # A tag the caller may use still works after the refusals.
    out = torch.full((3,), float(rank))
    got = torch.empty(3)
    works = [dist.isend(out, (rank + 1) % n, tag=1000), dist.irecv(got, (rank - 1) % n, tag=1000)]
    for w in works:
        w.wait()
    ok = ok and torch.equal(got, torch.full((3,), float((rank - 1) % n)))
    agree(ok, gloo, f"reserved tags: {errors}")


def test_ring_waits_for_its_send_first(world):
    rank, n, gloo = world
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    ok = True
    for elements in (2, LARGE):
        got = torch.empty(elements)
        send = dist.isend(torch.full((elements,), float(rank)), nxt, tag=21)
        recv = dist.irecv(got, prv, tag=21)
        send.wait()  # completes once the receiver took it, before anyone waits for a receive
        recv.wait()
        ok = ok and bool((got == float(prv)).all())
    agree(ok, gloo, "ring, every rank waiting for its send first")


def test_many_messages_on_one_tag_arrive_in_order(world):
    rank, n, gloo = world
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    sizes = [1 + (i * 37) % 4096 for i in range(64)]
    outs = [torch.empty(s) for s in sizes]
    recvs = [dist.irecv(o, prv, tag=22) for o in outs]  # posted before any send
    sends = [dist.isend(torch.full((s,), float(1000 * rank + i)), nxt, tag=22) for i, s in enumerate(sizes)]
    for w in sends[::2] + recvs[::-1] + sends[1::2]:
        w.wait()
    ok = all(bool((o == float(1000 * prv + i)).all()) for i, o in enumerate(outs))
    agree(ok, gloo, f"64 messages from {prv}: {[o[:1].tolist() for o in outs[:4]]}")


def test_recvs_from_any_source_posted_at_once(world):
    rank, n, gloo = world
    ok = True
    if rank == 0:
        outs = [torch.empty(3) for _ in range(n - 1)]
        works = [dist.irecv(o, tag=23) for o in outs]
        dist.barrier(group=gloo)  # every receive is posted before any rank sends
        for w in works:
            w.wait()
        sources = [w._source_rank() for w in works]  # noqa: SLF001
        ok = sorted(sources) == list(range(1, n)) and all(
            o.tolist() == [float(s)] * 3 for o, s in zip(outs, sources, strict=True))
    else:
        dist.barrier(group=gloo)
        dist.send(torch.full((3,), float(rank)), 0, tag=23)
    agree(ok, gloo, "receives from any source posted at once")


def test_batch_isend_irecv(world):
    rank, n, gloo = world
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    from_prv, from_nxt = torch.empty(5), torch.empty(LARGE)
    ops = [dist.P2POp(dist.isend, torch.full((5,), float(rank)), nxt, tag=24),
           dist.P2POp(dist.isend, torch.full((LARGE,), float(rank)), prv, tag=25),
           dist.P2POp(dist.irecv, from_prv, prv, tag=24),
           dist.P2POp(dist.irecv, from_nxt, nxt, tag=25)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    ok = bool((from_prv == float(prv)).all()) and bool((from_nxt == float(nxt)).all())
    agree(ok, gloo, "batch_isend_irecv both ways round the ring")
