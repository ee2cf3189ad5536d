#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sourced by test.sh: the Python stage's virtual environment under build/ (torch, numpy, pytest,
# mpi4py, expecttest (torch.testing needs it for the DistributedTest suite) and the build
# requirements from pip, through a wheelhouse kept between runs) and
# the package installed into it with `pip install` from the repository root.

CHIMERA_VENV="${CHIMERA_VENV:-$CHIMERA_BUILD/venv}"
# Wheels kept between runs and clones (CHIMERA_WHEELHOUSE overrides).
CHIMERA_WHEELHOUSE="${CHIMERA_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/chimera/wheels}"
CHIMERA_PYTHON_REQUIREMENTS=(numpy pytest mpi4py torch expecttest "scikit-build-core>=0.10" "nanobind>=2.0")

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
  # pip's HTTP cache does not keep these downloads here (the registry's answers are not
  # cacheable), so the wheels are kept in a wheelhouse outside the clone: a fresh clone installs
  # from it without the ~3 GB torch download, and only a missing wheel is fetched.
  local pip=("$CHIMERA_VENV/bin/python" -m pip --disable-pip-version-check)
  mkdir -p "$CHIMERA_WHEELHOUSE"
  if ! "${pip[@]}" install -q --no-index --find-links "$CHIMERA_WHEELHOUSE" "${CHIMERA_PYTHON_REQUIREMENTS[@]}" \
    >/dev/null 2>&1; then
    chimera_log "downloading ${CHIMERA_PYTHON_REQUIREMENTS[*]} into $CHIMERA_WHEELHOUSE"
    "${pip[@]}" download -q -d "$CHIMERA_WHEELHOUSE" "${CHIMERA_PYTHON_REQUIREMENTS[@]}"
    "${pip[@]}" install -q --no-index --find-links "$CHIMERA_WHEELHOUSE" "${CHIMERA_PYTHON_REQUIREMENTS[@]}"
  fi
  chimera_log "installed ${CHIMERA_PYTHON_REQUIREMENTS[*]} into $CHIMERA_VENV from $CHIMERA_WHEELHOUSE"
}

# The value of NAME in the CMake cache of $CHIMERA_BUILD.
chimera_cached() { sed -n "s/^$1:[A-Z]*=//p" "$CHIMERA_BUILD/CMakeCache.txt"; }

# pip install . into the venv, reusing the main build: it was configured with
# CHIMERA_BUILD_PYTHON=ON, so the extension is built already and libchimera is not compiled a
# second time; scikit-build-core gets the build's own generator and options (so it changes no
# compile flag) and installs the extension with the shared libchimera beside it.
chimera_python_install() {
  local options=()
  for name in BUILD_SHARED_LIBS CHIMERA_BUILD_TESTS CHIMERA_BUILD_BENCHMARKS CHIMERA_BUILD_EXAMPLES CHIMERA_WITH_CUDA \
    CHIMERA_WITH_MPI CHIMERA_PYTHON_TEST_INTERPRETER; do
    options+=(-C "cmake.define.$name=$(chimera_cached "$name")")
  done
  chimera_log "pip install $CHIMERA_ROOT into $CHIMERA_VENV (from the build in $CHIMERA_BUILD)"
  CMAKE_GENERATOR="$(chimera_cached CMAKE_GENERATOR)" "$CHIMERA_VENV/bin/python" -m pip install -q \
    --disable-pip-version-check --no-build-isolation -C build-dir="$CHIMERA_BUILD" \
    -C cmake.build-type="$(chimera_cached CMAKE_BUILD_TYPE)" "${options[@]}" "$CHIMERA_ROOT" \
    >"$CHIMERA_BUILD/python-install.log" 2>&1 || { tail -50 "$CHIMERA_BUILD/python-install.log"; return 1; }
  "$CHIMERA_VENV/bin/python" -c "import chimera; print('chimera', chimera.__version__, 'cuda', chimera.has_cuda)"
}
