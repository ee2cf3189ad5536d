#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU check in two halves, so that the GPU machine only runs it (no compiler, no MPI, no
# network needed there):
#
#   scripts/gpu-check.sh prepare [bundle-dir]   on the build machine: builds the GPU tests,
#       the kernel benchmark and the rank launcher (CUDA archs 89-real;90, no MPI) and copies
#       them with the shared libraries they need (not the driver) into bundle-dir (default
#       .gpu/bundle, git-ignored; at most 64 MiB). NCCL travels as pip's nvidia-nccl-cu13
#       (GPU_CHECK_NCCL_VERSION, default 2.32.6; "none" leaves it out) pruned to sm_80 and
#       sm_90 machine code by scripts/prune_fatbin.py and xz-compressed (38 MB).
#   scripts/gpu-check.sh run OUT-DIR            on the GPU machine (or GPU_CHECK_OUT=OUT-DIR):
#       runs the bundle against the NCCL found there and writes logs, results.jsonl (one line
#       per result, as it happens) and summary.json into OUT-DIR, so a run cut short still
#       leaves what it found.
#
# run: NCCL comes from NCCL_LIB_DIR, else the bundle's, else the pip wheel there (python3 -c
# "import nvidia.nccl"), else the system; its version is reported. The bundle's NCCL (>= 2.31)
# is what puts several ranks on one GPU when the machine's own is older. Then, each test
# bounded at 60 s and the whole run at GPU_CHECK_BUDGET_S seconds (default 480):
#   1. every single-rank GPU test (gpu_tests, one process per test);
#   2. chimera-kernel-bench rows (4 KiB, 1 KiB, 256 B runs, bf16, misaligned boxes) at 64 and
#      128 MiB against cudaMemcpyAsync (GPU_CHECK_KERNEL_BENCH=0 leaves it out, for a rerun);
#   3. the multi-process tests (chimera-rank-launch, no MPI) at 1, 2, 4 and 8 ranks on one GPU
#      when NCCL >= 2.31 (NCCL_MULTI_RANK_GPU_ENABLE=1), or up to the number of GPUs when
#      there are several; otherwise a line saying why multi-rank was skipped;
#   4. the six chimera-bench scenarios at 8 ranks on NCCL, f32 and bf16 (wrong elements,
#      baseline and fused median times) when 8 ranks can run.
# Exit status 0 only when nothing failed (skips with a stated reason are not failures).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { echo "[gpu-check] $*"; }
die() { say "FAILED: $*"; exit 1; }

# ---------------------------------------------------------------------------------------
prepare() {
  local bundle=${1:-$root/.gpu/bundle}
  local build=${GPU_CHECK_BUILD:-$root/build-gpu-bundle}
  local jobs=${JOBS:-$(nproc)}
  mkdir -p "$build"
  say "configuring $build (CUDA 89-real;90, no MPI)"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCHIMERA_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="89-real;90" -DCHIMERA_WITH_MPI=OFF -DCHIMERA_BUILD_TESTS=ON \
    -DCHIMERA_BUILD_BENCHMARKS=ON -DCHIMERA_BUILD_EXAMPLES=OFF -DCHIMERA_BUILD_KERNEL_BENCH=ON \
    ${CMAKE_LAUNCHER_ARGS:-} >"$build/gpu-check-configure.log" 2>&1 ||
    { tail -n 30 "$build/gpu-check-configure.log"; die "configure"; }
  cmake --build "$build" -j "$jobs" --target gpu_tests chimera-kernel-bench chimera-rank-launch \
    >"$build/gpu-check-build.log" 2>&1 || { grep -E "error" "$build/gpu-check-build.log" | head -n 30; die "build"; }
  rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/lib-fallback"
  cp "$build/tests/gpu/gpu_tests" "$build/tests/gpu/chimera-rank-launch" "$build/bin/chimera-kernel-bench" \
    "$bundle/bin/"
  # Shared libraries the binaries need, except NCCL (the GPU machine's own, found at run
  # time), the driver and the C runtime; libstdc++/libgcc_s only as a fallback for an older
  # system there.
  local lib
  for lib in $(ldd "$bundle"/bin/* | awk '/=> \//{print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libnccl.so*|libcuda.so*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*) ;;
      libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$bundle/lib-fallback/" ;;
      *) cp -L "$lib" "$bundle/lib/" ;;
    esac
  done
  local nccl_version=${GPU_CHECK_NCCL_VERSION:-2.32.6}
  if [ "$nccl_version" != none ]; then
    local wheels=$build/nccl-wheel
    rm -rf "$wheels" && mkdir -p "$wheels" "$bundle/nccl"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 -d "$wheels" \
      "nvidia-nccl-cu13==$nccl_version" >"$build/gpu-check-nccl.log" 2>&1 ||
      { tail -n 5 "$build/gpu-check-nccl.log"; die "pip download of nvidia-nccl-cu13==$nccl_version"; }
    python3 "$root/scripts/prune_fatbin.py" "$wheels"/nvidia_nccl_cu13-*.whl "$wheels/libnccl.so.2" 80 90 ||
      die "pruning NCCL"
    xz -T0 -6 -c "$wheels/libnccl.so.2" >"$bundle/nccl/libnccl.so.2.xz" || die "compressing NCCL"
  fi
  git -C "$root" rev-parse HEAD >"$bundle/commit" 2>/dev/null || true
  local bytes
  bytes=$(du -sb "$bundle" | cut -f1)
  say "bundle $bundle: $((bytes / 1024 / 1024)) MiB ($(ls "$bundle/lib" "$bundle/nccl" 2>/dev/null | grep -v : | tr '\n' ' '))"
  [ "$bytes" -le $((64 * 1024 * 1024)) ] || die "bundle is over 64 MiB"
  say "on the GPU machine: scripts/gpu-check.sh run OUT-DIR  (carry .gpu)"
}

# ---------------------------------------------------------------------------------------
# Results: one JSON object per line in results.jsonl, summary.json rebuilt after each stage.
json_escape() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '%s' "${s//$'\n'/ }"; }
record() {  # record KIND NAME STATUS [key=value ...]  (numbers stay numbers)
  local kind=$1 name=$2 status=$3 line kv key value
  shift 3
  line="{\"kind\":\"$kind\",\"name\":\"$(json_escape "$name")\",\"status\":\"$status\""
  for kv in "$@"; do
    key=${kv%%=*}
    value=${kv#*=}
    if [[ $value =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; then line+=",\"$key\":$value"; else line+=",\"$key\":\"$(json_escape "$value")\""; fi
  done
  echo "$line}" >>"$out/results.jsonl"
}
summarize() {
  command -v python3 >/dev/null || return 0
  python3 - "$out" <<'EOF'
import json, sys, os
out = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.strip()]
summary = {"results": rows, "counts": {}}
for r in rows:
    key = r["kind"] + "." + r["status"]
    summary["counts"][key] = summary["counts"].get(key, 0) + 1
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
EOF
}

remaining() { echo $((deadline - SECONDS)); }

# run_one NAME SECONDS LOG CMD...: runs CMD bounded; prints passed|failed|skipped|timeout.
run_one() {
  local name=$1 limit=$2 log=$3 rc
  shift 3
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo timeout
  elif [ "$rc" -ne 0 ]; then echo failed
  elif grep -q "\[  SKIPPED \]" "$log" && ! grep -q "\[       OK \]" "$log"; then echo skipped
  else echo passed
  fi
}

run() {
  out=${1:-${GPU_CHECK_OUT:-}}
  [ -n "$out" ] || die "usage: scripts/gpu-check.sh run OUT-DIR (or GPU_CHECK_OUT)"
  local bundle=${GPU_CHECK_BUNDLE:-$root/.gpu/bundle}
  local budget=${GPU_CHECK_BUDGET_S:-480}
  deadline=$((SECONDS + budget))
  mkdir -p "$out/logs"
  : >"$out/results.jsonl"
  [ -x "$bundle/bin/gpu_tests" ] || die "no bundle at $bundle: run scripts/gpu-check.sh prepare on the build machine"
  local bin=$bundle/bin
  failures=0

  # NCCL: the bundle's, else the machine's own.
  local nccl=${NCCL_LIB_DIR:-}
  if [ -z "$nccl" ] && [ -f "$bundle/nccl/libnccl.so.2.xz" ]; then
    local unpacked
    unpacked=$(mktemp -d)
    trap "rm -rf '$unpacked'" EXIT  # 199 MB unpacked
    if xz -dc "$bundle/nccl/libnccl.so.2.xz" >"$unpacked/libnccl.so.2"; then nccl=$unpacked
    else say "the bundle's NCCL did not unpack: using the machine's"
    fi
  fi
  if [ -z "$nccl" ] && command -v python3 >/dev/null; then
    nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
  fi
  export LD_LIBRARY_PATH="$bundle/lib${nccl:+:$nccl}:${LD_LIBRARY_PATH:-}"
  if ! "$bin/gpu_tests" --gtest_list_tests >/dev/null 2>"$out/logs/load.log"; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$bundle/lib-fallback"
    say "using the bundled libstdc++ ($(head -n1 "$out/logs/load.log"))"
  fi
  local version
  version=$("$bin/chimera-rank-launch" --nccl-version 2>&1)
  local version_rc=$?
  local code
  code=$(sed -n 's/.*(code \([0-9]*\)).*/\1/p' <<<"$version")
  local vtext
  vtext=$(sed -n 's/^NCCL \([0-9.]*\).*/\1/p' <<<"$version")
  say "NCCL: $version (from ${nccl:-the system library path})"
  local gpu="unknown"
  command -v nvidia-smi >/dev/null && gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n1)
  local devices
  devices=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
  say "GPU: $gpu ($devices visible); commit $(cat "$bundle/commit" 2>/dev/null || echo unknown)"
  record env nccl "$([ $version_rc -eq 0 ] && echo ok || echo unsupported)" version="$version" code="${code:-0}" \
    path="${nccl:-system}" gpu="$gpu" devices="$devices" commit="$(cat "$bundle/commit" 2>/dev/null)"
  summarize
  export CHIMERA_TIMEOUT_MS=${CHIMERA_TIMEOUT_MS:-45000}  # NCCL waits end before the 60 s kill

  # 1. single-rank tests, one process each.
  local tests test status
  tests=$("$bin/gpu_tests" --gtest_list_tests | awk '/^[^ ]/{suite=$1} /^  /{print suite $1}' |
    grep -vE "^(NcclProcesses|ExecutorOnNcclProcesses)\.")
  for test in $tests; do
    [ "$(remaining)" -gt 70 ] || { record test "$test" not_run reason="budget"; continue; }
    status=$(run_one "$test" 60 "$out/logs/$test.log" "$bin/gpu_tests" --gtest_filter="$test")
    # On a GPU machine only the multi-GPU test may skip (one GPU); any other skip is a failure.
    if [ "$status" = skipped ] && [ "$devices" -ge 1 ] && [[ $test != NcclMultiRank.* ]]; then
      status=failed
      grep -h "SKIPPED\|Skipped" "$out/logs/$test.log" | head -n 2 | sed 's/^/[gpu-check]   unexpected skip: /'
    fi
    record test "$test" "$status" ranks=1
    say "1 rank  $test: $status"
    [ "$status" = failed ] || [ "$status" = timeout ] && failures=$((failures + 1))
  done
  summarize

  # 2. kernel benchmark rows (before the multi-process tests: fixed, short cost).
  if [ "${GPU_CHECK_KERNEL_BENCH:-1}" = 0 ]; then
    record bench kernel-bench not_run reason="GPU_CHECK_KERNEL_BENCH=0"
  elif [ "$(remaining)" -gt 40 ]; then
    local limit=$(( $(remaining) - 10 ))
    [ "$limit" -gt 100 ] && limit=100
    timeout -k 5 "$limit" "$bin/chimera-kernel-bench" -b 64M -e 128M -n 10 -w 3 >"$out/kernel-bench.txt" 2>&1
    local rc=$?
    cat "$out/kernel-bench.txt"
    awk '/^  /{ printf "%s %s %s %s %s %s %s %s %s %s\n", $1, $2, $3, $4, $5, $6, $7, $9, $11, $13 }' "$out/kernel-bench.txt" |
      while read -r shape dtype run offset bytes copy pack unpack packn wrong; do
        record kernel "$shape" "$([ "$wrong" = 0 ] && echo passed || echo failed)" dtype="$dtype" run_bytes="$run" \
          offset_bytes="$offset" bytes="$bytes" memcpy_gbs="$copy" pack_gbs="$pack" unpack_gbs="$unpack" \
          packn_gbs="$packn" wrong="$wrong"
      done
    record bench kernel-bench "$([ $rc -eq 0 ] && echo passed || echo failed)" exit="$rc"
    [ "$rc" -ne 0 ] && failures=$((failures + 1))
  else
    record bench kernel-bench not_run reason="budget"
  fi
  summarize

  # 3./4. multi-process tests.
  local counts=(1) why=""
  if [ "${code:-0}" -ge 23100 ]; then
    export NCCL_MULTI_RANK_GPU_ENABLE=1
    counts=(1 2 4 8)
  elif [ "$devices" -ge 2 ]; then
    local n
    for n in 2 4 8; do [ "$n" -le "$devices" ] && counts+=("$n"); done
    why="NCCL ${vtext:-?} < 2.31 cannot share a GPU between ranks: multi-rank limited to $devices GPUs"
  else
    why="NCCL ${vtext:-?} < 2.31 cannot put several ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE needs 2.31): multi-rank tests skipped"
  fi
  [ -n "$why" ] && { say "$why"; record note multi_rank skipped reason="$why"; }
  local n
  for n in "${counts[@]}"; do
    for test in NcclProcesses.CollectivesAndRingAcrossLaunchedRanks \
                ExecutorOnNcclProcesses.PaperChainsMatchTheReferenceOnEveryLaunchedRank \
                ExecutorOnNcclProcesses.SixScenariosF32AtEightRanks \
                ExecutorOnNcclProcesses.SixScenariosBf16AtEightRanks; do
      [ "$n" -lt 8 ] && [[ $test == *SixScenarios* ]] && continue
      [ "$n" -lt 2 ] && [[ $test == NcclProcesses.* ]] && continue
      [ "$(remaining)" -gt 75 ] || { record test "$test" not_run ranks="$n" reason="budget"; continue; }
      local prefix="$out/logs/$test.n$n"
      timeout -k 5 65 "$bin/chimera-rank-launch" -n "$n" -t 60 -l "$prefix" -- "$bin/gpu_tests" --gtest_filter="$test" \
        >"$prefix.launch.log" 2>&1
      local rc=$?
      if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status=timeout
      elif [ "$rc" -ne 0 ]; then status=failed
      elif grep -q "\[  SKIPPED \]" "$prefix.rank0.log"; then status=skipped
      else status=passed
      fi
      record test "$test" "$status" ranks="$n"
      say "$n ranks $test: $status"
      [ "$status" = failed ] || [ "$status" = timeout ] && failures=$((failures + 1))
      if [[ $test == *SixScenarios* ]]; then
        # Per scenario and dtype: wrong elements summed over ranks, slowest rank's medians.
        cat "$prefix".rank*.log | grep "^SCENARIO " | awk '
          { for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
            k = v["name"] " " v["dtype"]; wrong[k] += v["wrong"]; if (!(k in seen)) { seen[k] = 1; eq[k] = 1 }
            eq[k] *= v["fused_equal"];
            if (v["baseline_ms"] > b[k]) b[k] = v["baseline_ms"]; if (v["fused_ms"] > f[k]) f[k] = v["fused_ms"] }
          END { for (k in wrong) { split(k, p, " "); printf "%s %s %d %d %.3f %.3f\n", p[1], p[2], wrong[k], eq[k], b[k], f[k] } }' |
          sort | while read -r name dtype wrong equal base fused; do
            local speedup
            speedup=$(awk -v b="$base" -v f="$fused" 'BEGIN { printf "%.3f", (f > 0 ? b / f : 0) }')
            record scenario "$name" "$([ "$wrong" = 0 ] && [ "$equal" = 1 ] && echo passed || echo failed)" \
              dtype="$dtype" ranks=8 wrong="$wrong" fused_equals_baseline="$equal" baseline_ms="$base" fused_ms="$fused" \
              speedup="$speedup"
            say "scenario $name ($dtype): wrong $wrong, baseline $base ms, fused $fused ms, speedup ${speedup}x"
          done
      fi
    done
    summarize
  done

  summarize
  say "elapsed $((SECONDS - deadline + budget)) s of $budget; $failures failures; results in $out"
  [ "$failures" -eq 0 ] && say PASS
  [ "$failures" -eq 0 ]
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: scripts/gpu-check.sh prepare [bundle-dir] | run OUT-DIR" >&2; exit 2 ;;
esac
