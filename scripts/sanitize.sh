#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# AddressSanitizer + UndefinedBehaviorSanitizer build of the unit and MPI tiers (no CUDA, no
# benchmarks or examples) in build-asan/, then their tests with every finding fatal. LeakSanitizer
# runs with scripts/lsan-openmpi.supp, which suppresses OpenMPI's own allocations only. The
# fault-injection tests (label `faults`) are left to the release build: they kill ranks on purpose.
# Where the Python stage made its venv (scripts/python_env.sh), the extension chimera._chimera is
# built the same way and the Python handle-misuse tests run on it, the sanitizer runtime preloaded
# into Python. Findings it made are fixed in the code (an out-of-range C enum read as the enum type).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/python_env.sh"

chimera_install_deps
build="${CHIMERA_ASAN_BUILD:-$CHIMERA_ROOT/build-asan}"
sanitize="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
python=()
if [ "${CHIMERA_PYTHON:-1}" != 0 ] && [ -x "$CHIMERA_VENV/bin/python" ]; then
  python=(-DCHIMERA_BUILD_PYTHON=ON -DCHIMERA_BUILD_TORCH=OFF -DPython_EXECUTABLE="$CHIMERA_VENV/bin/python")
fi
chimera_log "configuring $build (ASan + UBSan, -O1)"
mkdir -p "$build"
cmake -S "$CHIMERA_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=None -DCHIMERA_WITH_CUDA=OFF \
  -DCHIMERA_BUILD_BENCHMARKS=OFF -DCHIMERA_BUILD_EXAMPLES=OFF "${CHIMERA_LAUNCHER[@]}" "${python[@]}" \
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

if [ ${#python[@]} -gt 0 ]; then
  # The package as pip lays it out (its Python sources, the extension, libchimera), from this build.
  package="$build/python-package"
  rm -rf "$package"
  cmake --install "$build" --component python --prefix "$package" >/dev/null
  cp -r "$CHIMERA_ROOT/python/chimera/." "$package/chimera/"
  chimera_log "running the Python handle-misuse tests on 4 ranks under ASan + UBSan"
  # Python itself is not instrumented: the runtime is preloaded, with libstdc++ (which Python
  # loads only with the extension, too late for the runtime's exception interceptor to find
  # it), and its leaks are the interpreter's (LeakSanitizer off here).
  (cd "$build" && mpirun -np 4 $(chimera_mpirun_flags) env PYTHONPATH="$package" PYTHONDONTWRITEBYTECODE=1 \
    LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libstdc++.so.6):$build/no_dlclose.so" \
    ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" \
    "$CHIMERA_VENV/bin/python" -m pytest -q -p no:cacheprovider --color=no -m mpi \
    "$CHIMERA_ROOT/tests/python/test_routed_handles.py")
fi
