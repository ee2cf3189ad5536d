#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The plumbing of `scripts/gpu-check.sh run`, on any machine: a bundle made of this build's
# binaries, a short budget, then checks that the output folder has a valid results.jsonl and
# summary.json naming the NCCL version found and every single-rank GPU test, and that the
# script's exit status agrees with the failures it recorded (on a machine without a GPU the
# kernel benchmark fails, so the run must fail).
# usage: gpu_check_smoke.sh SOURCE_DIR GPU_TESTS RANK_LAUNCH KERNEL_BENCH WORK_DIR
set -euo pipefail
source_dir=$1 work=$5
rm -rf "$work" && mkdir -p "$work/bundle/bin" "$work/bundle/lib" "$work/bundle/lib-fallback"
ln -s "$2" "$work/bundle/bin/gpu_tests"
ln -s "$3" "$work/bundle/bin/chimera-rank-launch"
ln -s "$4" "$work/bundle/bin/chimera-kernel-bench"
set +e
GPU_CHECK_BUNDLE=$work/bundle GPU_CHECK_BUDGET_S=240 "$source_dir/scripts/gpu-check.sh" run "$work/out" >"$work/run.log" 2>&1
rc=$?
set -e
cat "$work/run.log"
python3 - "$work/out" "$rc" "$2" <<'PY'
import json, os, subprocess, sys
out, rc, gpu_tests = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [json.loads(line) for line in open(os.path.join(out, "results.jsonl"))]
summary = json.load(open(os.path.join(out, "summary.json")))
assert summary["results"] == rows, "summary.json must hold every result line"
env = [r for r in rows if r["kind"] == "env"]
assert len(env) == 1 and env[0]["version"].startswith("NCCL ") and env[0]["code"] > 0, env
listed = subprocess.run([gpu_tests, "--gtest_list_tests"], capture_output=True, text=True, check=True).stdout
suite, names = "", set()
for line in listed.splitlines():
    if not line.startswith(" "):
        suite = line.strip()
    else:
        names.add(suite + line.split()[0])
single = {n for n in names if not n.startswith(("NcclProcesses.", "ExecutorOnNcclProcesses."))}
recorded = {r["name"] for r in rows if r["kind"] == "test" and r.get("ranks") == 1 and r["status"] != "not_run"}
assert single <= recorded, f"single-rank tests not run: {sorted(single - recorded)}"
failed = [r for r in rows if r["status"] in ("failed", "timeout")]
assert (rc != 0) == bool(failed), f"exit {rc} but failures {failed}"
devices = env[0]["devices"]
if devices == 0:
    assert any(r["kind"] == "bench" and r["status"] == "failed" for r in rows), "no GPU: the benchmark must fail"
print(f"gpu-check smoke: {len(rows)} results, exit {rc}, {len(failed)} failures, {devices} GPUs")
PY
