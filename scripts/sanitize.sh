#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# AddressSanitizer + UndefinedBehaviorSanitizer build of the unit and MPI tiers (no CUDA, no
# benchmarks or examples) in build-asan/, then their tests with every finding fatal. LeakSanitizer
# runs with scripts/lsan-openmpi.supp, which suppresses OpenMPI's own allocations only. The
# fault-injection tests (label `faults`) are left to the release build: they kill ranks on purpose.
# Findings it made are fixed in the code (an out-of-range C enum read as the enum type).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

chimera_install_deps
build="${CHIMERA_ASAN_BUILD:-$CHIMERA_ROOT/build-asan}"
sanitize="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
chimera_log "configuring $build (ASan + UBSan, -O1)"
mkdir -p "$build"
cmake -S "$CHIMERA_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=None -DCHIMERA_WITH_CUDA=OFF \
  -DCHIMERA_BUILD_BENCHMARKS=OFF -DCHIMERA_BUILD_EXAMPLES=OFF "${CHIMERA_LAUNCHER[@]}" \
  "-DCMAKE_CXX_FLAGS=-O1 $sanitize" "-DCMAKE_C_FLAGS=-O1 $sanitize" \
  "-DCMAKE_EXE_LINKER_FLAGS=$sanitize" "-DCMAKE_SHARED_LINKER_FLAGS=$sanitize" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
chimera_log "building the unit and MPI tiers with $(nproc) jobs"
cmake --build "$build" -j "$(nproc)"

# OpenMPI unloads its plugins at MPI_Finalize; keep them loaded so their leaks keep their names.
cc -shared -fPIC -O1 -o "$build/no_dlclose.so" "$CHIMERA_ROOT/scripts/no_dlclose.c"
export LD_PRELOAD="$build/no_dlclose.so${LD_PRELOAD:+:$LD_PRELOAD}"
# intercept_tls_get_addr=0: GCC 12's sanitizer runtime takes a dynamic TLS block whose address
# is 16 bytes past a page boundary for one with a pre-2.25 glibc header and reads a garbage
# range from it; LeakSanitizer's tracer then crashes at exit ("Tracer caught signal 11") after
# tests that passed, depending only on where malloc placed the block (fixed in GCC 14 / LLVM 17).
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:verify_asan_link_order=0:intercept_tls_get_addr=0"
export LSAN_OPTIONS="suppressions=$CHIMERA_ROOT/scripts/lsan-openmpi.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The backend suite's 4- and 8-rank runs and the executor suite's 8-rank run repeat their
# smaller runs with more processes than a 2-core host runs instrumented within their timeouts
# (the 2-rank backend run alone takes about 3 minutes under ASan); they are left out.
chimera_log "running the unit and MPI tiers under ASan + UBSan"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -L 'unit|mpi' -LE faults \
  -E '^mpi\.(backend_tests\.np[48]|executor_tests\.np8)$' "$@"
