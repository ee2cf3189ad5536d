# SPDX-License-Identifier: Apache-2.0
"""chimera.torch's MPI rendezvous on one host: jobs started together never meet at one port, a
failure on rank 0 fails every rank within the timeout with an error naming the cause, a rank that
never arrives makes the others time out, and MASTER_ADDR/MASTER_PORT set by the user win.

One process: it starts the jobs (rendezvous_job.py) under the mpiexec command line in
CHIMERA_TEST_MPIEXEC and reads the line every rank prints.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).with_name("rendezvous_job.py")
# The bound of every wait in the jobs (their CHIMERA_TIMEOUT_MS); a failure must reach every rank
# within it once the last rank has entered the rendezvous.
TIMEOUT_S = 20
# Launches of two jobs at once, each making ROUNDS rendezvous in a row.
REPEATS = int(os.environ.get("CHIMERA_RENDEZVOUS_REPEATS", "2"))
ROUNDS = 10
# An address no host of these tests holds (inside the benchmarking range 198.18.0.0/15).
FOREIGN_ADDRESS = "198.19.255.254"
# mpirun forwards the ranks' output in pieces: a line may follow another without a newline.
RESULT = re.compile(r"RESULT rank=(\d+) round=(\d+) entered=([\d.]+) ended=([\d.]+) (ok|failed)"
                    r"(.*?)(?=RESULT rank=|\n|$)")


def mpiexec() -> list[str]:
    command = os.environ.get("CHIMERA_TEST_MPIEXEC")
    if not command:
        pytest.skip("CHIMERA_TEST_MPIEXEC (the mpiexec command line) is not set")
    return shlex.split(command)


def launch(ranks: int, *args: str, timeout_s: int = TIMEOUT_S, **env: str) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    environment.update(CHIMERA_TIMEOUT_MS=str(timeout_s * 1000), **env)
    return subprocess.Popen([*mpiexec(), "-n", str(ranks), sys.executable, str(JOB), *args], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class Report:
    """One rank's line of one round."""

    def __init__(self, match: re.Match):
        self.rank, self.round = int(match[1]), int(match[2])
        self.entered, self.ended = float(match[3]), float(match[4])
        self.ok, self.rest = match[5] == "ok", match[6].strip()

    def field(self, name: str) -> str:
        found = re.search(rf"\b{name}=(\S+)", self.rest)
        assert found, f"no {name}= in {self.rest!r}"
        return found[1]


def reports(job: subprocess.Popen, bound_s: float) -> tuple[list[Report], str]:
    """Every rank's reports and the job's output, the job ended within `bound_s`."""
    try:
        output, _ = job.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        job.kill()
        output, _ = job.communicate()
        pytest.fail(f"the job did not end within {bound_s} s:\n{output[-3000:]}")
    return [Report(m) for m in RESULT.finditer(output)], output


def one_round(job: subprocess.Popen, ranks: int, bound_s: float) -> list[Report]:
    found, output = reports(job, bound_s)
    assert sorted(r.rank for r in found) == list(range(ranks)), f"reports: {[r.rank for r in found]}\n{output[-3000:]}"
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def assert_every_rank_fails(found: list[Report], *causes: str) -> None:
    last_in = max(r.entered for r in found)
    for r in found:
        assert not r.ok, f"rank {r.rank} came up: {r.rest}"
        assert any(cause in r.rest for cause in causes), f"rank {r.rank}: {r.rest} (expected one of {causes})"
        assert "RendezvousError" in r.rest, f"rank {r.rank}: {r.rest}"
        late = r.ended - last_in
        assert late < TIMEOUT_S, \
            f"rank {r.rank} failed {late:.1f} s after the last rank arrived (timeout {TIMEOUT_S} s)"


def test_two_jobs_started_together_both_come_up():
    for repeat in range(REPEATS):
        jobs = [launch(2, "init", str(ROUNDS)), launch(2, "environment", str(ROUNDS))]
        for job in jobs:
            found, output = reports(job, 600)
            assert len(found) == 2 * ROUNDS, f"repeat {repeat}: {len(found)} reports of {2 * ROUNDS}\n{output[-3000:]}"
            for r in found:
                assert r.ok, f"repeat {repeat}, round {r.round}, rank {r.rank}: {r.rest}"
            for round_ in range(ROUNDS):
                ports = {r.field("port") for r in found if r.round == round_}
                assert len(ports) == 1, f"repeat {repeat}, round {round_}: the ranks of one job saw ports {ports}"


@pytest.mark.parametrize("mode", ["init", "environment"])
def test_port_in_use_fails_every_rank(mode):
    with socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET) as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        found = one_round(launch(4, mode, MASTER_PORT=str(port)), 4, 300)
    assert_every_rank_fails(found, "EADDRINUSE", "Address already in use")
    assert all("rank 0" in r.rest and f":{port}" in r.rest for r in found)


@pytest.mark.parametrize("mode", ["init", "environment"])
def test_foreign_master_addr_fails_every_rank(mode):
    found = one_round(launch(4, mode, MASTER_ADDR=FOREIGN_ADDRESS), 4, 300)
    assert_every_rank_fails(found, f"MASTER_ADDR={FOREIGN_ADDRESS} is not an address of this host")


def test_rank_that_never_arrives_times_out_the_others():
    found, output = reports(launch(4, "stall", "1"), 300)
    assert sorted(r.rank for r in found) == [0, 2, 3], output[-3000:]
    for r in found:
        assert not r.ok and "Timeout" in r.rest and "rendezvous" in r.rest, f"rank {r.rank}: {r.rest}"
        waited = r.ended - r.entered
        assert TIMEOUT_S - 1 <= waited < TIMEOUT_S + 10, f"rank {r.rank} timed out after {waited:.1f} s"


@pytest.mark.parametrize("mode", ["init", "environment"])
def test_user_master_addr_and_port_win(mode):
    port = free_port()
    found = one_round(launch(2, mode, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)), 2, 300)
    for r in found:
        assert r.ok, f"rank {r.rank}: {r.rest}"
        assert r.field("port") == str(port)
        if mode == "environment":
            assert r.field("addr") == "127.0.0.1"


def test_environment_gives_an_address_of_this_host():
    found = one_round(launch(2, "environment"), 2, 300)
    for r in found:
        assert r.ok, f"rank {r.rank}: {r.rest}"
        address = r.field("addr")
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
            probe.bind((address, 0))  # rank 0's host is this one: the address is ours
