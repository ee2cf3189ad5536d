#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, checks the C/C++/CUDA formatting (scripts/format.sh), builds into
# build/, proves an installed copy can be consumed with find_package(chimera) (running a Session
# on 4 MPI ranks), installs the Python package into a venv under build/ (pip install .),
# then runs every test tier through ctest (unit, mpi, faults, python, gpu, multihost; gpu tests
# report SKIPPED without a device, multihost ones where network namespaces cannot be made), then
# the sanitizer and fuzz stages. CHIMERA_PYTHON=0 skips the Python stage;
# CHIMERA_SKIP_MULTIHOST=1 / CHIMERA_SKIP_SANITIZE=1 / CHIMERA_SKIP_FUZZ=1 leave the others out.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/python_env.sh"

chimera_install_deps
# Formatting first: it takes seconds and names every file that differs from .clang-format.
"$CHIMERA_ROOT/scripts/format.sh" --check
python_tests=()
if [ "${CHIMERA_PYTHON:-1}" != 0 ]; then
  chimera_python_env
  python_tests=(-DCHIMERA_BUILD_PYTHON=ON -DPython_EXECUTABLE="$CHIMERA_VENV/bin/python"
    -DCHIMERA_PYTHON_TEST_INTERPRETER="$CHIMERA_VENV/bin/python")
fi
chimera_build "${python_tests[@]}"

chimera_log "installing into $CHIMERA_BUILD/install; building examples/consumer against it and running it on 4 ranks"
cmake --install "$CHIMERA_BUILD" --prefix "$CHIMERA_BUILD/install" >/dev/null
cmake -S "$CHIMERA_ROOT/examples/consumer" -B "$CHIMERA_BUILD/consumer" \
  -DCMAKE_PREFIX_PATH="$CHIMERA_BUILD/install" >"$CHIMERA_BUILD/consumer.configure.log" 2>&1 ||
  { cat "$CHIMERA_BUILD/consumer.configure.log"; exit 1; }
cmake --build "$CHIMERA_BUILD/consumer" >/dev/null
mpirun -np 4 $(chimera_mpirun_flags) "$CHIMERA_BUILD/consumer/chimera-consumer"

if [ "${CHIMERA_PYTHON:-1}" != 0 ]; then
  chimera_python_install
fi

chimera_log "running ctest"
ctest_filter=()
if [ "${CHIMERA_SKIP_MULTIHOST:-0}" = 1 ]; then ctest_filter=(-LE multihost); fi
(cd "$CHIMERA_BUILD" && ctest --output-on-failure -j "$(nproc)" "${ctest_filter[@]}" "$@")

# Reliability stages (docs/reliability.md), each timed: ASan + UBSan over the unit and MPI tiers,
# then each parser fuzzed from its seed corpus.
if [ "${CHIMERA_SKIP_SANITIZE:-0}" != 1 ]; then
  start=$SECONDS
  "$CHIMERA_ROOT/scripts/sanitize.sh"
  chimera_log "sanitizer stage took $((SECONDS - start)) s"
fi
if [ "${CHIMERA_SKIP_FUZZ:-0}" != 1 ]; then
  start=$SECONDS
  "$CHIMERA_ROOT/scripts/fuzz.sh"
  chimera_log "fuzz stage took $((SECONDS - start)) s"
fi
