#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Shared by demo.sh and test.sh: install missing Debian packages (quietly, idempotently) and
# build into build/. Sourced, not run.

CHIMERA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHIMERA_BUILD="${CHIMERA_BUILD:-$CHIMERA_ROOT/build}"
CHIMERA_PACKAGES=(cmake g++ make openmpi-bin libopenmpi-dev libgtest-dev libspdlog-dev libfmt-dev)

chimera_log() { printf '==> %s\n' "$*"; }

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
chimera_build() {
  local jobs
  jobs="$(nproc)"
  if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda; fi
  if [ -n "${CUDA_HOME:-}" ] && ! command -v nvcc >/dev/null 2>&1; then export PATH="$CUDA_HOME/bin:$PATH"; fi
  chimera_log "configuring $CHIMERA_BUILD"
  cmake -S "$CHIMERA_ROOT" -B "$CHIMERA_BUILD" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" \
    -DCHIMERA_WITH_CUDA="${CHIMERA_WITH_CUDA:-AUTO}" -DCHIMERA_BUILD_TORCH="${CHIMERA_BUILD_TORCH:-AUTO}" \
    ${CHIMERA_PYTHON:+-DCHIMERA_PYTHON="$CHIMERA_PYTHON"} >"$CHIMERA_BUILD.configure.log" 2>&1 ||
    { cat "$CHIMERA_BUILD.configure.log"; return 1; }
  grep -E 'chimera:' "$CHIMERA_BUILD.configure.log" || true
  chimera_log "building with $jobs jobs"
  cmake --build "$CHIMERA_BUILD" -j "$jobs"
}

# mpirun flags for running as root and with more ranks than cores.
chimera_mpirun_flags() {
  local flags=(--oversubscribe)
  if [ "$(id -u)" -eq 0 ]; then flags+=(--allow-run-as-root); fi
  printf '%s ' "${flags[@]}"
}

# The Python that the torch extension is built against and its tests run with (exported as
# CHIMERA_PYTHON for chimera_build). CHIMERA_TORCH=off skips it; a CHIMERA_PYTHON already set is
# used as is; otherwise a venv under the build tree gets torch, numpy and pytest from PyPI
# (pip's download cache makes a rebuild cheap).
chimera_torch_python() {
  if [ "${CHIMERA_TORCH:-on}" = "off" ]; then
    chimera_log "torch extension and tests skipped (CHIMERA_TORCH=off)"
    export CHIMERA_BUILD_TORCH=OFF
    return 0
  fi
  if [ -n "${CHIMERA_PYTHON:-}" ]; then return 0; fi
  local venv="$CHIMERA_BUILD/torch-venv"
  local missing=()
  for pkg in python3-venv python3-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ ${#missing[@]} -ne 0 ]; then
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    chimera_log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  if ! "$venv/bin/python" -c "import torch, pytest, numpy" >/dev/null 2>&1; then
    chimera_log "creating $venv with torch, numpy, pytest (pip)"
    mkdir -p "$CHIMERA_BUILD"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check torch numpy pytest >"$CHIMERA_BUILD/torch-venv.log" 2>&1 ||
      { tail -20 "$CHIMERA_BUILD/torch-venv.log"; return 1; }
  fi
  export CHIMERA_PYTHON="$venv/bin/python"
}
