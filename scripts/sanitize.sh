#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# AddressSanitizer + UndefinedBehaviorSanitizer build of the unit and MPI tiers (no CUDA, no
# benchmarks or examples) in build-asan/, then their tests with every finding fatal. LeakSanitizer
# runs with scripts/lsan-openmpi.supp, which suppresses OpenMPI's own allocations only. The
# fault-injection tests (label `faults`) are left to the release build: they kill ranks on purpose.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

chimera_install_deps
build="${CHIMERA_ASAN_BUILD:-$CHIMERA_ROOT/build-asan}"
sanitize="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
chimera_log "configuring $build (ASan + UBSan, -O1)"
mkdir -p "$build"
cmake -S "$CHIMERA_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=None -DCHIMERA_WITH_CUDA=OFF \
  -DCHIMERA_BUILD_BENCHMARKS=OFF -DCHIMERA_BUILD_EXAMPLES=OFF "${launcher[@]}" \
  "-DCMAKE_CXX_FLAGS=-O1 $sanitize" "-DCMAKE_C_FLAGS=-O1 $sanitize" \
  "-DCMAKE_EXE_LINKER_FLAGS=$sanitize" "-DCMAKE_SHARED_LINKER_FLAGS=$sanitize" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
chimera_log "building the unit and MPI tiers with $(nproc) jobs"
cmake --build "$build" -j "$(nproc)"

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$CHIMERA_ROOT/scripts/lsan-openmpi.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
chimera_log "running the unit and MPI tiers under ASan + UBSan"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -L 'unit|mpi' -LE faults "$@"
