# SPDX-License-Identifier: Apache-2.0
"""PyTorch's own DistributedTest suite (``torch.testing._internal.distributed.distributed_test``)
against one backend, one process per rank, in one launch.

Run under ``mpirun -np N`` or ``torchrun --nproc-per-node N``:

    python distributed_suite.py --backend chimera --json chimera.json [--compare gloo.json]

Every test runs on a fresh default process group (its own prefix of one TCPStore, the debug
level reset), so one failure cannot cascade; the suite's file barriers are replaced by barriers
on that store. A rank records each test as passed, failed (with the error) or skipped (with the
reason; the suite's ``sys.exit`` skip codes count as skips); rank 0 merges the ranks (failed on
any rank: failed; else skipped on any: skipped) and writes the JSON. With ``--compare``, the
run fails unless every test that passed there passes here. A test the suite skips here only
because of the backend's name (``NAME_GATES``: it runs them for gloo, nccl or mpi only, though
they exercise the public API: ``test_monitored_barrier_gloo``, ``test_all_reduce_coalesced_*``,
...) is run all the same when it passed there: its skip is lifted, unless its body also branches
on the name (``BODY_GATES``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import tempfile
import time
import traceback
import unittest

# A test that this backend skips for one of these reasons branches on the backend's name (the
# suite runs it for gloo, nccl or mpi only), not on what the backend does.
NAME_GATES = re.compile(r"requires backend \w+ to be one of|only supported on mpi, nccl and gloo|"
                        r"\b(GLOO|Gloo|gloo|NCCL|Nccl|nccl|MPI|UCC)\b")
# Name-gated tests whose body, too, runs only for gloo, nccl or mpi by name (it builds its model
# in an `if BACKEND == ...` branch): their gates stay.
BODY_GATES = re.compile(r"^test_accumulate_gradients_no_sync")


def _launch() -> tuple[int, int, str | None, int | None]:
    """(rank, world size, master address, master port) of a torchrun launch: the suite's store
    sits next to torchrun's; under mpirun (rank, world size, None, None): the store is the one
    of chimera.torch's MPI rendezvous, on a port no other launch holds."""
    if "RANK" in os.environ and "TORCHELASTIC_RUN_ID" in os.environ:
        return (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), os.environ["MASTER_ADDR"],
                int(os.environ["MASTER_PORT"]) + 1)
    return int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"]), None, None


def _error_line(text: str) -> str:
    """The line of a traceback that names the exception (the last one that does)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Exit|Failure)\b", line)]
    return (named[-1] if named else lines[-1])[:400]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", required=True)
    parser.add_argument("--json", help="write the merged results here (rank 0)")
    parser.add_argument("--compare", help="results of the reference backend (JSON from --json)")
    parser.add_argument("--tests", default="", help="comma-separated test names (default: all)")
    parser.add_argument("--timeout", type=float, default=60.0, help="process-group timeout per test (s)")
    args = parser.parse_args()

    rank, world, addr, port = _launch()
    # distributed_test reads these at import.
    os.environ["BACKEND"] = args.backend
    os.environ["WORLD_SIZE"] = str(world)
    os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
    os.environ["PYTORCH_PRINT_REPRO_ON_FAILURE"] = "0"

    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=120)
    if addr is None:
        from chimera.torch import rendezvous

        master = rendezvous.mpi_store(timeout).store
    else:
        master = dist.TCPStore(addr, port, world, rank == 0, timeout=timeout)
    if rank == 0:
        master.set("temp_dir", tempfile.mkdtemp(prefix="distributed_suite_"))
    temp_dir = master.get("temp_dir").decode()
    os.environ["TEMP_DIR"] = temp_dir
    if rank == 0:
        for sub in ("barrier", "test_dir", "init_dir"):
            os.makedirs(os.path.join(temp_dir, sub), exist_ok=True)
        master.set("dirs", "1")
    master.wait(["dirs"])
    os.environ["INIT_METHOD"] = "file://" + os.path.join(temp_dir, "init_dir", "shared_init_file")

    if args.backend == "chimera":
        import chimera.torch  # noqa: F401  (registers the backend)
    from torch.testing._internal.common_distributed import TEST_SKIPS, DistTestCases
    from torch.testing._internal.common_utils import TestCase

    if args.backend not in ("gloo", "nccl", "mpi", "ucc"):
        for feature in ("plugin", "subgroup", "ddp"):
            DistTestCases.backend_feature[feature].add(args.backend)
    from torch.testing._internal.distributed import distributed_test as suite

    skip_codes = {skip.exit_code: skip.message for skip in TEST_SKIPS.values()}
    state = {"store": None, "barrier": 0}

    def store_barrier(_self, wait_for=None, timeout=10):
        """The suite's Barrier.sync on this test's store (the same counts, no files)."""
        state["barrier"] += 1
        key = f"suite_barrier/{state['barrier']}"
        state["store"].add(key, 1)
        deadline = time.monotonic() + max(timeout, 30)
        while state["store"].add(key, 0) < (wait_for or world):
            if time.monotonic() > deadline:
                raise RuntimeError("barrier timeout")
            time.sleep(0.01)

    class Suite(suite.DistributedTest._DistTestBase, TestCase):  # noqa: SLF001
        _barrier = store_barrier

        @property
        def world_size(self):
            return os.environ["WORLD_SIZE"]

        @property
        def init_method(self):
            return os.environ["INIT_METHOD"]

        @property
        def destroy_pg_upon_exit(self):
            return False

    base = suite.DistributedTest._DistTestBase  # noqa: SLF001
    names = sorted(n for n in dir(base) if n.startswith("test_"))
    if args.tests:
        wanted = set(args.tests.split(","))
        names = [n for n in names if n in wanted]
    reference = None
    if args.compare:
        with open(args.compare) as f:
            reference = json.load(f)
        # The name gates of the tests that passed there are lifted (the suite's skip decorators
        # mark the test function; nothing else of the test depends on them).
        for name in names:
            test = getattr(base, name)
            why = getattr(test, "__unittest_skip_why__", "")
            if (reference["tests"].get(name, {}).get("status") == "passed" and getattr(test, "__unittest_skip__", False)
                    and NAME_GATES.search(why) and not BODY_GATES.match(name)):
                test.__unittest_skip__ = False

    results = {}
    started = time.monotonic()
    for index, name in enumerate(names):
        store = dist.PrefixStore(f"test{index}/", master)
        state["store"], state["barrier"] = store, 0
        os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
        dist.set_debug_level_from_env()
        # Group names count from 0 in every test, on every rank: a test that failed on one rank
        # before or while making its groups (so that no destroy_process_group reset the count)
        # must not shift the names of every later test's groups against the other ranks'.
        dist.distributed_c10d._world.group_count = 0
        timeout = min(suite.CUSTOM_PG_TIMEOUT.get(name, suite.default_pg_timeout), args.timeout)
        t0 = time.monotonic()
        outcome = unittest.TestResult()
        try:
            dist.init_process_group(args.backend, store=store, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=timeout))
            store_barrier(None)
            case = Suite(name)
            case.rank = rank
            case.file_name = os.path.join(temp_dir, "init_dir", f"file_{index}")
            case.run(outcome)
        except Exception:  # noqa: BLE001 (a failure to set up counts as the test's failure)
            outcome.errors.append((None, traceback.format_exc()))
        status, detail = "passed", ""
        if outcome.skipped:
            status, detail = "skipped", str(outcome.skipped[0][1])
        for _, text in outcome.errors + outcome.failures:
            code = None
            if "SystemExit" in text:
                code = next((c for c in skip_codes if f"SystemExit: {c}" in text), None)
            if code is not None:
                status, detail = "skipped", skip_codes[code]
            else:
                status, detail = "failed", _error_line(text)
                break
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
        results[name] = [status, detail, round(time.monotonic() - t0, 2)]
        print(f"[rank {rank}] {index + 1}/{len(names)} {name}: {status} ({results[name][2]} s) {detail[:160]}",
              flush=True)
        # Keep the ranks in step: a rank that finished a test early waits for the others here.
        master.add(f"done/{index}", 1)
        deadline = time.monotonic() + timeout + 60
        while master.add(f"done/{index}", 0) < world and time.monotonic() < deadline:
            time.sleep(0.01)

    master.set(f"results/{rank}", json.dumps(results))
    if rank != 0:
        master.wait(["merged"], datetime.timedelta(seconds=600))
        return 0
    merged = {}
    per_rank = [json.loads(master.get(f"results/{r}")) for r in range(world)]
    for name in names:
        entries = [p.get(name, ["failed", "no result from this rank", 0]) for p in per_rank]
        failed = [e for e in entries if e[0] == "failed"]
        skipped = [e for e in entries if e[0] == "skipped"]
        pick = failed[0] if failed else (skipped[0] if skipped else entries[0])
        merged[name] = {"status": pick[0], "detail": pick[1], "seconds": max(e[2] for e in entries)}
    master.set("merged", "1")
    counts = {s: sum(1 for m in merged.values() if m["status"] == s) for s in ("passed", "failed", "skipped")}
    wall = round(time.monotonic() - started, 1)
    print(f"{args.backend}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
          f"of {len(names)} in {wall} s on {world} ranks")
    for name, m in merged.items():
        if m["status"] == "failed":
            print(f"  FAILED {name}: {m['detail']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "world_size": world, "wall_s": wall, "counts": counts,
                       "tests": merged}, f, indent=1)
    if reference is None:
        return 0
    passed_there = [name for name, m in reference["tests"].items() if m["status"] == "passed" and name in merged]
    gated = [name for name in passed_there if merged[name]["status"] == "skipped"
             and NAME_GATES.search(merged[name]["detail"])]
    missing = [name for name in passed_there if merged[name]["status"] != "passed" and name not in gated]
    print(f"{len(gated)} of them are skipped here by the suite because of the backend's name: " + ", ".join(gated))
    print(f"{args.backend} vs {reference['backend']}: {len(missing)} of the tests "
          f"{reference['backend']} passes do not pass here" + (": " + ", ".join(missing) if missing else ""))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
