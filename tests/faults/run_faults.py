#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fault-injection driver: runs fault_rank on 4 MPI ranks for each mismatch mode, with the
argument check on (the default) and off, and the SIGSTOP stall; and each bad-argument mode
(a bad argument on the last rank alone, one per public entry point) on --ranks ranks with
the default timeout. Checks every rank's report against the guarantees of
docs/reliability.md and prints one table row per mode.

A bad-argument case passes when every rank reported within the wall-clock limit, the rank at
fault returned InvalidArgument, every other rank Mismatch naming it (in a pair mode: its
partner, every other rank ok; in a mode where the ranks' arguments disagree and no rank's own
check fails: every rank Mismatch naming the field), the faulty call took under
--bad-call-limit seconds on every rank, and the same call with good arguments worked afterwards
on every rank (with the right result, where the mode checks it). The torch modes run under
mpiexec (the MPI transport) or, with --torchrun PYTHON, under torchrun (the gloo transport).

With checks on (the default) a run passes when it ends within the wall-clock limit, the job
exits non-zero, every rank that was not stopped reported, some rank reported an error, and no
rank returned ok with wrong data, except where the table documents it (a skipped call among
identical calls, which must end in a Timeout instead). With checks off a run passes when it
ends within the limit; its outcomes (a crash inside MPI included) are tabulated."""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

MODES = ["count-allreduce", "count-reducescatter", "count-allgather", "count-broadcast", "dtype", "op", "kind",
         "root", "axes-first", "axes-later", "axes-swapped", "skipped-call", "chain", "session-window", "stall",
         "absent-rank"]
# Modes where, with checks on, a call matched with the wrong one cannot be told apart from a
# correct one: the skipping rank's next call matches its peers' skipped one (same signature),
# and the data of both differ; the guarantee there is a Timeout on the call nobody matches.
SILENT_ON_SKIPPING_RANK = {"skipped-call"}
# One bad argument on the last rank, per public entry point of the C++ API.
BAD_ARGUMENT_MODES = ["bad-allreduce", "bad-reducescatter", "bad-allgather", "bad-alltoall", "bad-broadcast",
                      "bad-executor", "bad-session", "bad-routed-create", "bad-routed-dispatch", "bad-grouped-p2p",
                      "bad-send", "bad-capi-allreduce", "bad-capi-send", "bad-axes", "bad-capi-axes",
                      "bad-routed-handle"]
# Modes between pairs of ranks (send/recv): only the partner of the rank at fault (the rank below
# it) takes part in its call, so it alone must fail; every other pair's call must work.
PAIR_MODES = {"bad-send", "bad-capi-send", "bad-torch-send", "bad-backend-send"}
# The same on the torch entry points (bad_args_torch.py, passed as --binary "PYTHON bad_args_torch.py",
# or as --binary bad_args_torch.py with --torchrun PYTHON).
TORCH_BAD_ARGUMENT_MODES = ["bad-torch-allreduce", "bad-torch-broadcast", "bad-torch-allgather",
                            "bad-torch-reducescatter", "bad-torch-gather", "bad-torch-scatter", "bad-torch-alltoall",
                            "bad-torch-alltoall-single", "bad-torch-send", "bad-backend-broadcast",
                            "bad-backend-allreduce", "bad-backend-axes", "bad-backend-send", "bad-dtensor",
                            "bad-moe-topk", "bad-moe-replicated-id"]
# Modes where the rank at fault passes arguments that pass its own checks but differ from its
# peers' (a longer tensor): no rank can tell which is wrong, so every rank, the one at fault
# included, gets Mismatch naming the field that differs (with its smallest and largest value).
DISAGREEMENT_MODES = {"bad-torch-allreduce": "count differs"}
RANKS = 4
STALLED_RANK = 2


def parse_report(path):
    with open(path) as f:
        line = f.read().strip()
    fields = {}
    head, _, message = line.partition(" message=")
    for item in head.split(" "):
        key, _, value = item.partition("=")
        fields[key] = value
    fields["message"] = message
    return fields


def run_case(args, mode, checks):
    ranks = args.ranks if mode.startswith("bad-") else RANKS
    env = dict(os.environ, CHIMERA_LOG_LEVEL=os.environ.get("CHIMERA_LOG_LEVEL", "off"))
    if mode.startswith("bad-"):
        # The release defaults: the argument check as built, the default timeout (10 minutes).
        env.pop("CHIMERA_CHECK_ARGS", None)
        env.pop("CHIMERA_TIMEOUT_MS", None)
        linger = int(args.wall * 1000)
    else:
        env.update(CHIMERA_CHECK_ARGS="1" if checks else "0", CHIMERA_TIMEOUT_MS=str(args.timeout_ms))
        linger = args.timeout_ms + 2000
    with tempfile.TemporaryDirectory(prefix="chimera-fault-") as out:
        if args.torchrun:
            launcher = [args.torchrun, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
        else:
            launcher = args.mpiexec + ["-n", str(ranks)]
        cmd = launcher + args.binary.split() + [mode, out, str(linger)]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        stopped = None
        after_stop = None
        try:
            if mode == "stall":
                stopped = stall(out, proc, args)
                after_stop = wait_for_reports(out, proc, args, time.monotonic())
            output, _ = proc.communicate(timeout=max(1.0, args.wall - (time.monotonic() - start)))
            hung = False
        except subprocess.TimeoutExpired:
            hung = True
            output = b""
        finally:
            if stopped is not None:
                try:
                    os.kill(stopped, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        wall = time.monotonic() - start
        reports = {}
        for r in range(ranks):
            path = os.path.join(out, f"rank{r}.txt")
            if os.path.exists(path):
                reports[r] = parse_report(path)
        return {"mode": mode, "checks": checks, "ranks": ranks, "rc": proc.returncode, "hung": hung, "wall": wall,
                "reports": reports, "after_stop": after_stop, "output": output.decode(errors="replace")}


def wait_for_reports(out, proc, args, stopped_at):
    """Seconds from the SIGSTOP until every other rank reported (None if they never did)."""
    others = [r for r in range(RANKS) if r != STALLED_RANK]
    while time.monotonic() - stopped_at < args.wall / 2:
        if all(os.path.exists(os.path.join(out, f"rank{r}.txt")) for r in others):
            return time.monotonic() - stopped_at
        if proc.poll() is not None:
            return None
        time.sleep(0.02)
    return None


def stall(out, proc, args):
    """Stops rank STALLED_RANK with SIGSTOP once every rank is inside the AllReduce loop."""
    deadline = time.monotonic() + args.wall / 2
    pid_file = os.path.join(out, f"pid{STALLED_RANK}")
    while time.monotonic() < deadline and proc.poll() is None:
        if all(os.path.exists(os.path.join(out, f"pid{r}")) for r in range(RANKS)):
            break
        time.sleep(0.05)
    time.sleep(0.5)  # well inside a 64 MiB AllReduce
    with open(pid_file) as f:
        pid = int(f.read())
    os.kill(pid, signal.SIGSTOP)
    return pid


def judge_bad_argument(case, args):
    """Problems with a bad-argument case (empty: passed)."""
    problems = []
    reports = case["reports"]
    faulty = case["ranks"] - 1
    if case["hung"]:
        problems.append(f"still running after the {case['wall']:.0f} s wall-clock limit")
    missing = sorted(set(range(case["ranks"])) - set(reports))
    if missing:
        problems.append(f"no report from ranks {missing} (crashed, or waiting)")
    involved = {faulty - 1} if case["mode"] in PAIR_MODES else set(range(case["ranks"])) - {faulty}
    differs = DISAGREEMENT_MODES.get(case["mode"])
    for r, rep in sorted(reports.items()):
        named = re.search(rf"\brank {faulty}\b", rep["message"])
        if differs is not None:
            if rep["code"] != "mismatch" or differs not in rep["message"]:
                problems.append(f"rank {r} returned {rep['code']}, not Mismatch naming '{differs}'")
        elif r == faulty and rep["code"] != "invalid":
            problems.append(f"rank {r} (at fault) returned {rep['code']}, not InvalidArgument")
        elif r in involved and (rep["code"] != "mismatch" or not named):
            problems.append(f"rank {r} returned {rep['code']}, not Mismatch naming rank {faulty}")
        elif r != faulty and r not in involved and rep["code"] != "ok":
            problems.append(f"rank {r} (not in the call of the rank at fault) returned {rep['code']}")
        if float(rep.get("call_ms", -1)) > args.bad_call_limit * 1000:
            problems.append(f"rank {r} took {int(rep['call_ms'])} ms")
        if rep.get("next") != "ok":
            problems.append(f"rank {r}: the next good call {rep.get('next')}")
        elif rep.get("data") == "wrong":
            problems.append(f"rank {r}: the next good call returned a wrong result")
    return problems


def judge(case, args):
    """Problems with a case, as a list of strings (empty: passed)."""
    if case["mode"].startswith("bad-"):
        return judge_bad_argument(case, args)
    problems = []
    mode, checks, reports = case["mode"], case["checks"], case["reports"]
    expected = set(range(RANKS)) - ({STALLED_RANK} if mode == "stall" else set())
    if case["hung"]:
        problems.append(f"still running after the {case['wall']:.0f} s wall-clock limit")
    if not checks:
        return problems  # with checks off only a bounded end is promised; outcomes are tabulated
    missing = sorted(expected - set(reports))
    if missing:
        problems.append(f"no report from ranks {missing} (crashed or killed)")
    if case["rc"] == 0:
        problems.append("the job exited 0")
    errors = [r for r, rep in reports.items() if rep["code"] != "ok"]
    if not errors:
        problems.append("no rank reported an error")
    for r, rep in reports.items():
        if rep["code"] == "ok" and rep["data"] == "wrong" and mode not in SILENT_ON_SKIPPING_RANK:
            problems.append(f"rank {r} returned ok with wrong data")
    if mode in SILENT_ON_SKIPPING_RANK and not any(rep["code"] == "timeout" for rep in reports.values()):
        problems.append("no rank timed out on the call nobody matched")
    return problems


def summary(case):
    """'Mismatch x4', 'Timeout x3, ok+wrong x1', ... and the slowest error in seconds (bad-argument
    modes: of the faulty call alone)."""
    counts = {}
    slowest = 0
    for r in range(case["ranks"]):
        rep = case["reports"].get(r)
        stalled = case["mode"] == "stall" and r == STALLED_RANK
        if rep is None:
            label = "stopped" if stalled else "crash"
        elif rep["code"] == "ok":
            label = "ok+wrong" if rep["data"] == "wrong" else "ok"
        else:
            label = rep["code"] + (" (stopped rank, after SIGCONT)" if stalled else "")
            if not stalled:
                key = "call_ms" if case["mode"].startswith("bad-") else "ms"
                slowest = max(slowest, int(rep[key]))
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())), slowest / 1000.0


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--binary", required=True, help="fault_rank, or PYTHON bad_args_torch.py (space separated)")
    parser.add_argument("--mpiexec", default="", help="mpiexec and its flags, space separated")
    parser.add_argument("--torchrun", default="",
                        help="start the ranks with PYTHON -m torch.distributed.run --standalone instead of mpiexec")
    parser.add_argument("--modes", default=",".join(MODES + BAD_ARGUMENT_MODES))
    parser.add_argument("--checks", default="on,off")
    parser.add_argument("--timeout-ms", type=int, default=2000)
    parser.add_argument("--wall", type=float, default=60.0, help="wall-clock limit per case, seconds")
    parser.add_argument("--ranks", type=int, default=8, help="ranks of the bad-argument modes (the others run on 4)")
    parser.add_argument("--bad-call-limit", type=float, default=1.0,
                        help="seconds the faulty call of a bad-argument mode may take on any rank")
    args = parser.parse_args()
    if not args.mpiexec and not args.torchrun:
        parser.error("one of --mpiexec and --torchrun is required")
    args.mpiexec = args.mpiexec.split()
    failed = 0
    print("| mode | checks | outcome per rank | slowest error (s) | wall (s) | verdict |")
    print("|---|---|---|---|---|---|")
    for mode in args.modes.split(","):
        for checks in [c == "on" for c in args.checks.split(",")]:
            if (mode in ("stall", "absent-rank") or mode.startswith("bad-")) and not checks:
                continue  # neither depends on the argument check (bad arguments run with the defaults)
            case = run_case(args, mode, checks)
            problems = judge(case, args)
            outcome, slowest = summary(case)
            if case["after_stop"] is not None:
                outcome += f"; every other rank reported {case['after_stop']:.1f} s after the SIGSTOP"
            elif mode == "stall":
                problems.append("the other ranks did not all report after the SIGSTOP")
            verdict = "pass" if not problems else "FAIL: " + "; ".join(problems)
            checks_text = "on" if checks else "off"
            print(f"| {mode} | {checks_text} | {outcome} | {slowest:.1f} | {case['wall']:.1f} | {verdict} |",
                  flush=True)
            if problems:
                failed += 1
                for r, rep in sorted(case["reports"].items()):
                    print(f"    rank {r}: {rep['code']} data={rep['data']} {rep['message']}")
                tail = case["output"].splitlines()[-20:]
                print("    mpiexec output:\n" + "\n".join("      " + line for line in tail))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
