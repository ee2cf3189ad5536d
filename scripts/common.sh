#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Shared by demo.sh and test.sh: install missing Debian packages (quietly, idempotently) and
# build into build/. Sourced, not run.

CHIMERA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHIMERA_BUILD="${CHIMERA_BUILD:-$CHIMERA_ROOT/build}"
CHIMERA_PACKAGES=(cmake g++ make openmpi-bin libopenmpi-dev libgtest-dev libspdlog-dev libfmt-dev nlohmann-json3-dev python3 ccache clang-format)

chimera_log() { printf '==> %s\n' "$*"; }

# Compiler launcher flags for every build (ccache when present). Paths are hashed relative to
# the clone, so a fresh clone in another folder reuses what an earlier one compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$CHIMERA_ROOT}"
CHIMERA_LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  CHIMERA_LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

# Installs whichever of CHIMERA_PACKAGES is missing; does nothing (and needs no network) when all are present.
chimera_install_deps() {
  local missing=()
  for pkg in "${CHIMERA_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  chimera_log "installing ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Configures (CUDA parts when nvcc is found, unless CHIMERA_WITH_CUDA says otherwise) and builds.
# Arguments are extra cmake -D options.
chimera_build() {
  local jobs
  jobs="$(nproc)"
  if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda; fi
  if [ -n "${CUDA_HOME:-}" ] && ! command -v nvcc >/dev/null 2>&1; then export PATH="$CUDA_HOME/bin:$PATH"; fi
  chimera_log "configuring $CHIMERA_BUILD"
  mkdir -p "$CHIMERA_BUILD"
  cmake -S "$CHIMERA_ROOT" -B "$CHIMERA_BUILD" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" \
    -DCHIMERA_WITH_CUDA="${CHIMERA_WITH_CUDA:-AUTO}" "${CHIMERA_LAUNCHER[@]}" "$@" >"$CHIMERA_BUILD/configure.log" 2>&1 ||
    { cat "$CHIMERA_BUILD/configure.log"; return 1; }
  grep -E 'chimera:' "$CHIMERA_BUILD/configure.log" || true
  chimera_log "building with $jobs jobs"
  cmake --build "$CHIMERA_BUILD" -j "$jobs"
}

# mpirun flags for running as root and with more ranks than cores.
chimera_mpirun_flags() {
  local flags=(--oversubscribe)
  if [ "$(id -u)" -eq 0 ]; then flags+=(--allow-run-as-root); fi
  printf '%s ' "${flags[@]}"
}
