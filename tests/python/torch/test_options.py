# SPDX-License-Identifier: Apache-2.0
# chimera.torch.Options as torch's pg_options, and the environment variables over them, on
# whichever transport the launch gives (ctest runs this file under mpirun and under torchrun,
# each with and without CHIMERA_TIMEOUT_MS): a group's timeout bounds the wait for a stalled
# peer (rank 0 receives from rank 1, which never sends), and reaches the backend's options.
import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist

import chimera.torch as ct
from chimera.torch import options as chimera_options

from conftest import agree

# CHIMERA_TIMEOUT_MS, when the launch sets it, overrides every other timeout.
FROM_ENVIRONMENT = os.environ.get("CHIMERA_TIMEOUT_MS")
SLACK = 8.0  # seconds past the timeout a raise may take on an oversubscribed host


def expected(seconds: float) -> float:
    return int(FROM_ENVIRONMENT) / 1000 if FROM_ENVIRONMENT else seconds


def stalled_recv(group) -> tuple[float, str]:
    """Rank 0 receives from rank 1, which never sends: (seconds until it raised, the error)."""
    if dist.get_rank() != 0:
        return 0.0, ""
    start = time.monotonic()
    try:
        dist.recv(torch.empty(4), src=1, group=group, tag=7)
    except RuntimeError as error:
        return time.monotonic() - start, str(error)
    return time.monotonic() - start, "no error"


def check_bounded(group, seconds: float, gloo, what: str) -> None:
    took, error = stalled_recv(group)
    want = expected(seconds)
    ok = dist.get_rank() != 0 or (0.9 * want <= took <= want + SLACK and error != "no error")
    agree(ok, gloo, f"{what}: a stalled peer raised after {took:.2f} s (expected {want} s): {error[:300]}")


def test_options_timeout_bounds_a_stalled_peer(world):
    rank, n, gloo = world
    group = dist.new_group(list(range(n)), pg_options=ct.Options(timeout=datetime.timedelta(seconds=1.5),
                                                                   abort_on_timeout=False))
    timeout = group._get_backend(torch.device("cpu")).options._timeout  # noqa: SLF001
    agree(timeout == datetime.timedelta(seconds=expected(1.5)), gloo, f"the backend's options say {timeout}")
    check_bounded(group, 1.5, gloo, "Options(timeout=1.5 s)")


def test_torch_timeout_bounds_a_stalled_peer(world):
    rank, n, gloo = world
    group = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=2))
    check_bounded(group, 2.0, gloo, "new_group(timeout=2 s)")


def test_options_over_torch_timeout(world):
    rank, n, gloo = world
    group = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=60),
                           pg_options=ct.Options(timeout=datetime.timedelta(seconds=1)))
    check_bounded(group, 1.0, gloo, "Options(timeout=1 s) over new_group(timeout=60 s)")


def test_the_environment_is_read_once_and_checked():
    environment = chimera_options.ENVIRONMENT
    want = None if FROM_ENVIRONMENT is None else datetime.timedelta(milliseconds=int(FROM_ENVIRONMENT))
    assert environment.timeout == want
    assert chimera_options.resolve(ct.Options(timeout=datetime.timedelta(hours=1)), None).timeout == \
        (want or datetime.timedelta(hours=1))
    with pytest.raises(ValueError, match="CHIMERA_TIMEOUT_MS='10s': expected a number of milliseconds"):
        chimera_options._read_environment({"CHIMERA_TIMEOUT_MS": "10s"})  # noqa: SLF001
    with pytest.raises(ValueError, match="CHIMERA_ABORT_ON_TIMEOUT='2': expected 0/1"):
        chimera_options._read_environment({"CHIMERA_ABORT_ON_TIMEOUT": "2"})  # noqa: SLF001
    with pytest.raises(ValueError, match="CHIMERA_TORCH_TRANSPORT='ucc': expected 'mpi' or 'gloo'"):
        chimera_options._read_environment({"CHIMERA_TORCH_TRANSPORT": "ucc"})  # noqa: SLF001
    with pytest.raises(ValueError, match="Options.timeout=0:00:00: expected 1 ms to one week"):
        ct.Options(timeout=datetime.timedelta(0))
    with pytest.raises(ValueError, match="Options.transport='tcp': expected 'mpi' or 'gloo'"):
        ct.Options(transport="tcp")
    with pytest.raises(TypeError, match="takes chimera.torch.Options as pg_options, got dict"):
        chimera_options.resolve({"timeout": 1}, None)
