#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the parser harnesses (tests/fuzz) with clang's libFuzzer + ASan + UBSan in build-fuzz/
# and runs each for CHIMERA_FUZZ_SECONDS (default 60) from a copy of its committed seed corpus.
# A crash fails the script; the input is kept under build-fuzz/crashes/<harness>/ and belongs in
# tests/fuzz/regressions/<harness>/ once fixed (the unit tier replays that directory).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CHIMERA_PACKAGES+=(clang libclang-rt-dev)
chimera_install_deps
build="${CHIMERA_FUZZ_BUILD:-$CHIMERA_ROOT/build-fuzz}"
seconds="${CHIMERA_FUZZ_SECONDS:-60}"
harnesses=(mesh layout chain size topology)
instrument="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
chimera_log "configuring $build (clang, libFuzzer + ASan + UBSan)"
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$CHIMERA_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=None -DCHIMERA_WITH_CUDA=OFF \
  -DCHIMERA_WITH_MPI=OFF -DCHIMERA_BUILD_BENCHMARKS=OFF -DCHIMERA_BUILD_EXAMPLES=OFF -DCHIMERA_BUILD_FUZZERS=ON \
  "${CHIMERA_LAUNCHER[@]}" "-DCMAKE_CXX_FLAGS=-O1 -g $instrument" "-DCMAKE_C_FLAGS=-O1 -g $instrument" \
  "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
targets=()
for h in "${harnesses[@]}"; do targets+=("${h}_fuzz"); done
chimera_log "building ${targets[*]}"
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=0
for h in "${harnesses[@]}"; do
  corpus="$build/corpus/$h"
  crashes="$build/crashes/$h"
  rm -rf "$corpus" && mkdir -p "$corpus" "$crashes"
  cp "$CHIMERA_ROOT/tests/fuzz/corpus/$h/"* "$corpus/"
  chimera_log "fuzzing $h for $seconds s"
  if ! "$build/tests/fuzz/${h}_fuzz" "$corpus" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" >"$build/$h.log" 2>&1; then
    chimera_log "$h: crash; input in $crashes (log $build/$h.log):"
    tail -n 40 "$build/$h.log"
    failed=1
  else
    grep -E '^stat::number_of_executed_units' "$build/$h.log" | sed "s/^/    $h /" || true
  fi
done
exit "$failed"
