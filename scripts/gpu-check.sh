#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One-shot GPU check for a machine with an NVIDIA GPU and no network: configures chimera with
# CUDA for the GPU that is present, builds the GPU tests and the kernel benchmark, runs them,
# and prints a short summary. Exit status 0 only when every GPU test that can run on this
# machine passed (multi-GPU tests may skip on one GPU) and the benchmark found no wrong byte.
#
# usage: scripts/gpu-check.sh [build-dir]          (default: build-gpu in the repository)
# environment:
#   CHIMERA_DEPS_PREFIX  a folder of unpacked .deb files (dpkg -x pkg.deb PREFIX) holding what
#                        the machine lacks (fmt, spdlog, GoogleTest, ...); default .deps/prefix
#                        when it exists. Added to CMAKE_PREFIX_PATH and LD_LIBRARY_PATH.
#   CUDA_ARCH            CUDA architecture to build for (e.g. 90); default: the GPU's own.
#   JOBS                 parallel build jobs; default: all cores.
#   GPU_CHECK_LOGS       where the logs go; default <build-dir>/gpu-check-logs.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
logs=${GPU_CHECK_LOGS:-$build/gpu-check-logs}
jobs=${JOBS:-$(nproc)}
started=$SECONDS
mkdir -p "$logs"
say() { echo "[gpu-check] $*"; }
die() { say "FAILED: $*"; exit 1; }

# --- toolchain and GPU -----------------------------------------------------------------
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
command -v nvcc >/dev/null || die "nvcc not found (set CUDA_HOME)"
gpu="unknown GPU"
arch=${CUDA_ARCH:-}
if command -v nvidia-smi >/dev/null; then
  gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)
  [ -z "$arch" ] && arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
fi
[ -z "$arch" ] && arch=native  # CMake asks the driver
say "GPU: $gpu; CUDA arch $arch; nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"

# --- dependencies: system, plus an optional prefix of unpacked .deb files ------------------
prefix=${CHIMERA_DEPS_PREFIX:-$root/.deps/prefix}
cmake_args=()
if [ -d "$prefix" ]; then
  say "dependency prefix: $prefix"
  cmake_args+=("-DCMAKE_PREFIX_PATH=$prefix/usr;$prefix/usr/local;$prefix")
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/usr/lib:$prefix/usr/local/lib:${LD_LIBRARY_PATH:-}"
  export PATH="$prefix/usr/bin:$PATH"
fi
with_mpi=OFF
command -v mpicc >/dev/null && with_mpi=ON
say "MPI: $with_mpi (the NCCL tests bootstrap without MPI)"

# --- configure and build only what this check needs ---------------------------------------
configure() {  # $1: ON|OFF for the tests
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCHIMERA_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCHIMERA_WITH_MPI="$with_mpi" -DCHIMERA_BUILD_TESTS="$1" \
    -DCHIMERA_BUILD_BENCHMARKS=OFF -DCHIMERA_BUILD_EXAMPLES=OFF -DCHIMERA_BUILD_KERNEL_BENCH=ON \
    "${cmake_args[@]}" >"$logs/configure.log" 2>&1
}
targets=(gpu_tests kernel_index_tests chimera-kernel-bench)
with_tests=ON
if ! configure ON; then
  if grep -q "GTest" "$logs/configure.log" && configure OFF; then
    say "GoogleTest not found: building the benchmark only (put libgtest-dev into the prefix)"
    with_tests=OFF
    targets=(chimera-kernel-bench)
  else
    tail -n 30 "$logs/configure.log"
    die "configure (log: $logs/configure.log)"
  fi
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$logs/build.log" 2>&1 ||
  { grep -E "error" "$logs/build.log" | head -n 30; die "build (log: $logs/build.log)"; }
say "configured and built in $((SECONDS - started)) s"

# --- tests --------------------------------------------------------------------------------
ctest_rc=1
unexpected_skips=0
if [ "$with_tests" = ON ]; then
  timeout 420 ctest --test-dir "$build" -R 'gpu\.|unit\.(BoxIndex|BoxPackHost)' \
    --output-on-failure --timeout 300 >"$logs/ctest.log" 2>&1
  ctest_rc=$?
  summary=$(grep -E "tests passed|tests failed" "$logs/ctest.log" | tail -n1)
  skipped=$(grep -E "\(Skipped\)" "$logs/ctest.log" || true)
  unexpected_skips=$(printf '%s\n' "$skipped" | grep -v "MultiRank" | grep -c "Skipped" || true)
  failed=$(grep -E "\(Failed\)|\(Timeout\)|\*\*\*Exception" "$logs/ctest.log" || true)
  say "tests: ${summary:-no summary (see $logs/ctest.log)}"
  [ -n "$skipped" ] && printf '%s\n' "$skipped" | sed 's/^/[gpu-check]   skipped: /'
  [ -n "$failed" ] && { printf '%s\n' "$failed" | sed 's/^/[gpu-check]   /'; grep -B2 -A12 "Failure" "$logs/ctest.log" | head -n 60; }
fi

# --- kernel benchmark ---------------------------------------------------------------------
timeout 180 "$build/kernels/chimera-kernel-bench" -b 1M -e 256M -n 20 -w 5 | tee "$logs/kernel-bench.txt"
bench_rc=${PIPESTATUS[0]}

# --- verdict --------------------------------------------------------------------------------
say "elapsed $((SECONDS - started)) s; logs in $logs"
status=0
[ "$with_tests" = OFF ] && { say "FAIL: GPU tests were not built"; status=1; }
[ "$with_tests" = ON ] && [ "$ctest_rc" -ne 0 ] && { say "FAIL: ctest exit $ctest_rc"; status=1; }
[ "$unexpected_skips" -gt 0 ] && { say "FAIL: $unexpected_skips single-GPU tests skipped on a GPU machine"; status=1; }
[ "$bench_rc" -ne 0 ] && { say "FAIL: kernel benchmark exit $bench_rc"; status=1; }
grep -h "lowest" "$logs/kernel-bench.txt" | sed 's/^# /[gpu-check] /'
[ "$status" -eq 0 ] && say "PASS"
exit "$status"
