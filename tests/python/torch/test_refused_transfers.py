# SPDX-License-Identifier: Apache-2.0
# A send that fails on its own rank does not leave its receiver waiting: on both transports
# every send is preceded by a header (its byte count, or the sender's refusal), so the receiver
# raises at once naming the sender: when the sender's tag is out of range, when the sender's
# call is one the group refuses, and when the two byte counts differ (both ways, from one rank
# and from any source; gloo itself would abort the receiving process); a good transfer then
# works; and an all-to-all whose block sizes differ between one pair fails that pair at once (the
# Backend's per-pair manifests), the other pairs' blocks moving. Run with a
# large CHIMERA_TIMEOUT_MS (CMake sets 120 s): a receiver that waits for the timeout fails the
# 1 s bar and outlasts the test's own limit. Pairs of ranks (2k, 2k + 1): the even rank sends.
import time

import pytest
import torch
import torch.distributed as dist

from conftest import agree

LIMIT_S = 1.0  # the bar: a receiver learns of its sender's failure within a second


def _default_group():
    return dist.distributed_c10d._get_default_group()  # noqa: SLF001


def cases():
    """(name, the sender's call, the receiver's tensor and source, what the receiver's error must say)."""
    return [
        ("tag out of range", lambda peer: dist.send(torch.ones(4), peer, tag=-1), (4, True), "tag -1 "),
        ("reserved tag", lambda peer: dist.send(torch.ones(4), peer, tag=2**31 - 1), (4, True), "tag 2147483647"),
        # The process group itself, as torch's wrappers never call it: two tensors in one send,
        # refused with a tag the receiver does use.
        ("two tensors", lambda peer: _default_group().send([torch.ones(4), torch.ones(4)], peer, 3).wait(), (4, True),
         "expects one tensor per call, got 2"),
        ("more bytes", lambda peer: dist.send(torch.ones(5), peer, tag=3), (4, True), "sends 20 bytes but"),
        ("fewer bytes", lambda peer: dist.send(torch.ones(3), peer, tag=3), (4, True), "sends 12 bytes but"),
        ("another dtype's size", lambda peer: dist.send(torch.ones(4, dtype=torch.float64), peer, tag=3), (4, True),
         "sends 32 bytes but this receive expects 16"),
        ("any source, tag out of range", lambda peer: dist.send(torch.ones(4), peer, tag=-1), (4, False), "tag -1 "),
        ("any source, more bytes", lambda peer: dist.send(torch.ones(6), peer, tag=3), (4, False),
         "sends 24 bytes but"),
    ]


@pytest.mark.parametrize("case", range(len(cases())), ids=[c[0] for c in cases()])
def test_failed_send_fails_its_receiver_at_once(world, case):
    rank, n, gloo = world
    name, send, (elements, from_peer), says = cases()[case]
    ok, what = True, ""
    if n % 2 == 1 and rank == n - 1:
        pass  # an odd world's last rank has no partner
    elif rank % 2 == 0:
        try:
            send(rank + 1)
        except RuntimeError as error:
            what = f"the sender raised: {error}"
    else:
        sender = rank - 1
        start = time.monotonic()
        try:
            dist.recv(torch.empty(elements), sender if from_peer else None, tag=3)
            ok, what = False, "the receive returned"
        except RuntimeError as error:
            seconds = time.monotonic() - start
            text = str(error)
            ok = seconds < LIMIT_S and f"rank {sender}" in text and "mismatch" in text.lower() and says in text
            what = f"{seconds:.3f} s: {text}"
    agree(ok, gloo, f"{name}: {what}")
    # A good transfer both ways works after it.
    if not (n % 2 == 1 and rank == n - 1):
        peer = rank + 1 if rank % 2 == 0 else rank - 1
        got = torch.empty(4)
        works = [dist.isend(torch.full((4,), float(rank)), peer, tag=3), dist.irecv(got, peer, tag=3)]
        for w in works:
            w.wait()
        ok = torch.equal(got, torch.full((4,), float(peer)))
    agree(ok, gloo, f"{name}: the next good transfer")


def test_refusal_of_a_tag_out_of_range_comes_before_the_next_message(world):
    """The sender refuses a tag out of range, then sends a good message, both in before the
    receiver posts (a gloo barrier between; on gloo the good send completes only once received,
    so it is waited for after): the receiver's first receive fails naming the sender, although
    the transport matched the good message to it, and its second gets that message."""
    rank, n, gloo = world
    paired = not (n % 2 == 1 and rank == n - 1)
    ok, what = True, ""
    good = None
    if paired and rank % 2 == 0:
        try:
            dist.send(torch.ones(4), rank + 1, tag=-1)
        except RuntimeError:
            pass
        good = dist.isend(torch.full((4,), float(rank)), rank + 1, tag=3)
    dist.barrier(group=gloo)
    if good is not None:
        good.wait()
    if paired and rank % 2 == 1:
        sender = rank - 1
        got = torch.empty(4)
        start = time.monotonic()
        try:
            dist.recv(got, sender, tag=3)
            ok, what = False, "the first receive returned"
        except RuntimeError as error:
            ok = time.monotonic() - start < LIMIT_S and f"rank {sender}'s send to this rank failed" in str(error)
            what = str(error)
        dist.recv(got, sender, tag=3)
        ok = ok and torch.equal(got, torch.full((4,), float(sender)))
        what += f"; the second receive got {got.tolist()}"
    agree(ok, gloo, what)


def test_refusal_and_wrong_sizes_in_a_row(world):
    """Every kind of failure with a channel, one after another between the same two ranks on one
    tag, each followed by a good transfer: each receive fails at once naming its sender (the
    receiving process lives on: gloo alone would abort it on a size mismatch), and every good
    transfer after one lands whole."""
    rank, n, gloo = world
    paired = not (n % 2 == 1 and rank == n - 1)
    failing = [c for c in cases() if c[2][1]]
    ok, what = True, []
    for name, send, (elements, _), says in failing:
        if not paired:
            break
        if rank % 2 == 0:
            try:
                send(rank + 1)
            except RuntimeError:
                pass
            dist.send(torch.full((4,), float(rank)), rank + 1, tag=3)
        else:
            start = time.monotonic()
            try:
                dist.recv(torch.empty(elements), rank - 1, tag=3)
                ok, text = False, "returned"
            except RuntimeError as error:
                text = str(error)
                ok = ok and time.monotonic() - start < LIMIT_S and says in text and f"rank {rank - 1}" in text
            got = torch.empty(4)
            dist.recv(got, rank - 1, tag=3)
            ok = ok and torch.equal(got, torch.full((4,), float(rank - 1)))
            what.append(f"{name}: {text[:120]}; next {got.tolist()}")
    agree(ok, gloo, "; ".join(what))


def test_refusal_between_good_sends_fails_the_receive_between(world):
    """A good send, a refused one (tag out of range), a good one, on one tag, many times over:
    every time the receiver's middle receive, and it alone, fails naming the sender, and the
    good ones get their own data. On gloo the refusal travels on a tag of its own and may be
    taken before the header of the message sent before it (a race this repeats enough to hit:
    the receive meant for the first message failed, the middle one got that message)."""
    rank, n, gloo = world
    paired = not (n % 2 == 1 and rank == n - 1)
    ok, what = True, "every round"
    for round_ in range(200 if paired else 0):
        if rank % 2 == 0:
            dist.send(torch.full((4,), float(2 * round_)), rank + 1, tag=3)
            try:
                dist.send(torch.ones(4), rank + 1, tag=-1)
            except RuntimeError:
                pass
            dist.send(torch.full((4,), float(2 * round_ + 1)), rank + 1, tag=3)
            continue
        got = [torch.empty(4) for _ in range(2)]
        try:
            dist.recv(got[0], rank - 1, tag=3)
        except RuntimeError:
            got[0].fill_(-1)  # the refusal came first
        try:
            dist.recv(torch.empty(4), rank - 1, tag=3)
            refused = "the middle receive returned"
        except RuntimeError as error:
            refused = "" if f"rank {rank - 1}'s send to this rank failed" in str(error) else str(error)
        try:
            dist.recv(got[1], rank - 1, tag=3)
        except RuntimeError:
            got[1].fill_(-1)
        firsts = [g[0].item() for g in got]
        if ok and (refused or firsts != [2 * round_, 2 * round_ + 1]):
            # Every round still runs: each receive takes one message, so neither rank waits.
            ok, what = False, f"round {round_}: {refused or 'the middle receive failed'}; the others got {firsts}"
    agree(ok, gloo, what)


@pytest.mark.parametrize("other_tag", [True, False], ids=["another tag", "the same tag"])
def test_refusal_after_an_isend_not_yet_taken(world, other_tag):
    """The sender isends a message it does not wait for, then has a send refused (tag out of
    range). On another tag the receiver's first receive (tag 3) fails and the message reaches
    the receive of its own tag after it; on the same tag the first receive gets the message and
    the second fails."""
    rank, n, gloo = world
    paired = not (n % 2 == 1 and rank == n - 1)
    tag = 5 if other_tag else 3
    ok, what = True, ""
    if paired and rank % 2 == 0:
        pending = dist.isend(torch.full((4,), 7.0), rank + 1, tag=tag)
        try:
            dist.send(torch.ones(4), rank + 1, tag=-1)
        except RuntimeError:
            pass
        pending.wait()
    elif paired:
        sender = rank - 1
        got = torch.empty(4)
        outcomes = []
        for receive_tag in ([3, 5] if other_tag else [3, 3]):
            try:
                dist.recv(got, sender, tag=receive_tag)
                outcomes.append(got[0].item())
            except RuntimeError as error:
                outcomes.append("refused" if f"rank {sender}'s send to this rank failed" in str(error) else str(error))
        want = ["refused", 7.0] if other_tag else [7.0, "refused"]
        ok, what = outcomes == want, f"got {outcomes}, want {want}"
    agree(ok, gloo, what)



def test_all_to_all_blocks_of_other_sizes_fail_that_pair_at_once(world):
    """An uneven all_to_all_single whose block from rank 0 to rank 1 is 2 elements on rank 0 and
    1 on rank 1: the Backend's per-pair manifests (on gloo too, where a receive of another size
    would abort the process) fail both ends of that pair at once, naming each other, and every
    other pair's blocks move; a good all-to-all then works."""
    rank, n, gloo = world
    if n < 2:
        pytest.skip("needs a pair")
    send = [2 if (rank, p) == (0, 1) else 1 for p in range(n)]
    recv = [1] * n
    inp = torch.full((sum(send),), float(rank))
    out = torch.empty(sum(recv))
    start = time.monotonic()
    try:
        dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
        failed, text = False, ""
    except RuntimeError as error:
        failed, text = True, str(error)
    seconds = time.monotonic() - start
    if rank in (0, 1):
        peer = 1 - rank
        ok = failed and seconds < LIMIT_S and f"rank {peer}" in text and "mismatch" in text.lower()
    else:
        ok = not failed and torch.equal(out, torch.arange(n, dtype=torch.float32))
    agree(ok, gloo, f"all_to_all of other block sizes ({seconds:.3f} s): {text or 'returned'}")
    out = torch.empty(n)
    dist.all_to_all_single(out, torch.full((n,), float(rank)))
    agree(torch.equal(out, torch.arange(n, dtype=torch.float32)), gloo, "the next good all_to_all")
