# SPDX-License-Identifier: Apache-2.0
# A call that fails on one rank before it knows the call's group (axes naming no group of the
# mesh) on chimera's Backend over a two-axis mesh (mesh_backend: the MPI backend under mpiexec,
# the gloo mesh backend under torchrun). The rank at fault announces the failure (a fault notice)
# and stands in for the agreement round its group's members wait in: they raise at once naming
# it, the other groups' calls work, ranks already in their next call are not failed by it, and the
# next calls work everywhere, with the right sums.
import time

import pytest
import torch
import torch.distributed as dist

import chimera
from chimera.torch.backend import mesh_backend

from conftest import agree

LIMIT_S = 1.0  # the bar: every rank of the failed call's group raises within a second


def sums_of_ones(backend, axes, members):
    tensor = torch.ones(33)
    backend.all_reduce(tensor, axes=axes)
    return bool((tensor == members).all())


@pytest.mark.parametrize("culprit", [0, "last"])
def test_axes_naming_no_group_fail_only_the_group_of_the_rank_at_fault(world, culprit):
    rank, n, gloo = world
    if n < 4 or n % 2:
        pytest.skip("needs an even world of 4 ranks or more")
    culprit = n - 1 if culprit == "last" else culprit
    tp = n // 2
    backend = mesh_backend(f"dp=2,tp={tp}", range(n))
    backend.create_groups(["tp", "dp+tp"])
    ok = sums_of_ones(backend, "tp", tp) and sums_of_ones(backend, "dp+tp", n)
    agree(ok, gloo, "the calls before")
    in_culprits_group = rank // tp == culprit // tp
    tensor = torch.ones(16)
    start = time.monotonic()
    try:
        backend.all_reduce(tensor, axes="xx" if rank == culprit else "tp")
        outcome = "ok"
    except chimera.InvalidArgument as error:
        outcome, text = "invalid", str(error)
    except chimera.Mismatch as error:
        outcome, text = "mismatch", str(error)
    seconds = time.monotonic() - start
    if rank == culprit:
        ok, what = outcome == "invalid" and "'xx'" in text, f"the rank at fault: {outcome}"
    elif in_culprits_group:
        ok = outcome == "mismatch" and f"rank {culprit} failed this call before it knew" in text and seconds < LIMIT_S
        what = f"a member of its group: {outcome} after {seconds:.3f} s"
    else:
        ok, what = outcome == "ok" and bool((tensor == tp).all()), f"another group: {outcome}"
    agree(ok, gloo, what)
    # Ranks of the other group go on to a call over the whole mesh while the rank at fault is still
    # inside its failed call: it does not stand in for that round, which completes with its next call.
    ok = sums_of_ones(backend, "dp+tp", n) and sums_of_ones(backend, "tp", tp)
    agree(ok, gloo, "the next calls")
    dist.barrier(group=gloo)
