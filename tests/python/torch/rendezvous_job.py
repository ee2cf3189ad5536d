# SPDX-License-Identifier: Apache-2.0
"""One MPI job of the rendezvous tests (test_rendezvous.py starts it under mpirun): every rank
comes up through chimera.torch's rendezvous and prints one line per round, which the test reads.

    rendezvous_job.py init [ROUNDS]        ct.init_process_group(), an all_reduce checked, destroyed; ROUNDS times
    rendezvous_job.py environment [ROUNDS] ct.mpi_environment(), then dist.init_process_group("chimera") (env://)
    rendezvous_job.py stall RANK           as init, but RANK, with MPI initialised, never reaches the rendezvous

Each rank prints ``RESULT rank=R round=N entered=T0 ended=T1 ok port=P addr=A`` or ``... failed
error=TYPE: MESSAGE`` (T0, T1: wall-clock seconds when it entered and left the rendezvous and
the all_reduce) and exits 0 (a failure is the test's to judge; exiting non-zero would make
mpirun kill ranks before they print).
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

import chimera.torch as ct


def report(rank: int, round_: int, entered: float, text: str) -> None:
    print(f"RESULT rank={rank} round={round_} entered={entered:.3f} ended={time.time():.3f} {text}", flush=True)


def one_round(mode: str, rank: int, round_: int) -> bool:
    entered = time.time()
    try:
        if mode == "environment":
            for key in ("MASTER_ADDR", "MASTER_PORT"):  # the previous round's, not the user's
                if round_ > 0:
                    os.environ.pop(key, None)
            ct.mpi_environment()
            dist.init_process_group("chimera")
        else:
            ct.init_process_group()
        store = dist.distributed_c10d._get_default_store()  # noqa: SLF001
        while hasattr(store, "underlying_store"):
            store = store.underlying_store
        t = torch.ones(4) * (dist.get_rank() + 1)
        dist.all_reduce(t)
        size = dist.get_world_size()
        expected = size * (size + 1) / 2
        if not torch.equal(t, torch.full((4,), expected)):
            raise AssertionError(f"all_reduce gave {t.tolist()}, expected {expected}")
        address = os.environ.get("MASTER_ADDR", "-") if mode == "environment" else "-"
        report(rank, round_, entered, f"ok port={store.port} addr={address}")
        dist.destroy_process_group()
        return True
    except Exception as error:  # noqa: BLE001 (reported for the test to judge)
        message = " ".join(str(error).split())
        report(rank, round_, entered, f"failed error={type(error).__name__}: {message}")
        return False


def main() -> None:
    mode = sys.argv[1]
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    if mode == "stall":
        if rank == int(sys.argv[2]):
            ct.backend._extension.load().mpi_world()  # noqa: SLF001 (MPI initialised, as the others')
            time.sleep(600)
        if not one_round(mode, rank, 0):
            os._exit(0)  # noqa: SLF001 (an abandoned exchange: MPI_Finalize could wait for the stalled rank)
        return
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    user = {key: os.environ.get(key) for key in ("MASTER_ADDR", "MASTER_PORT")}
    for round_ in range(rounds):
        if not one_round(mode, rank, round_) or any(user.values()):
            return


if __name__ == "__main__":
    main()
