#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sourced by test.sh: the Python stage's virtual environment under build/ (torch, numpy, pytest,
# mpi4py and the build requirements from pip, reusing pip's download cache between runs) and
# the package installed into it with `pip install` from the repository root.

CHIMERA_VENV="${CHIMERA_VENV:-$CHIMERA_BUILD/venv}"
CHIMERA_PYTHON_REQUIREMENTS=(numpy pytest mpi4py torch "scikit-build-core>=0.10" "nanobind>=2.0")

# Creates the venv when missing and installs what it lacks (quiet; nothing to do on a rerun).
chimera_python_env() {
  local saved=("${CHIMERA_PACKAGES[@]}")
  CHIMERA_PACKAGES=(python3-venv python3-dev)
  chimera_install_deps
  CHIMERA_PACKAGES=("${saved[@]}")
  if [ ! -x "$CHIMERA_VENV/bin/python" ]; then
    chimera_log "creating $CHIMERA_VENV"
    python3 -m venv "$CHIMERA_VENV"
  fi
  chimera_log "installing ${CHIMERA_PYTHON_REQUIREMENTS[*]} into $CHIMERA_VENV (pip cache reused)"
  "$CHIMERA_VENV/bin/python" -m pip install -q --disable-pip-version-check "${CHIMERA_PYTHON_REQUIREMENTS[@]}"
}

# pip install . into the venv. The build directory persists under build/ and compiles through
# ccache when there is one, so a rerun recompiles only what changed.
chimera_python_install() {
  if command -v ccache >/dev/null 2>&1; then
    export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$CHIMERA_ROOT}"
  fi
  chimera_log "pip install $CHIMERA_ROOT into $CHIMERA_VENV"
  "$CHIMERA_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
    -C build-dir="$CHIMERA_BUILD/python-wheel" "$CHIMERA_ROOT" >"$CHIMERA_BUILD/python-install.log" 2>&1 ||
    { tail -50 "$CHIMERA_BUILD/python-install.log"; return 1; }
  "$CHIMERA_VENV/bin/python" -c "import chimera; print('chimera', chimera.__version__, 'cuda', chimera.has_cuda)"
}
