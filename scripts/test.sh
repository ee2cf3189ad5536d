#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds into build/, proves an installed copy can be consumed with
# find_package(chimera), then runs every test tier through ctest (unit, mpi, gpu; gpu tests
# report SKIPPED without a device).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

chimera_install_deps
chimera_torch_python
chimera_build

chimera_log "installing into $CHIMERA_BUILD/install and building examples/consumer against it"
cmake --install "$CHIMERA_BUILD" --prefix "$CHIMERA_BUILD/install" >/dev/null
cmake -S "$CHIMERA_ROOT/examples/consumer" -B "$CHIMERA_BUILD/consumer" \
  -DCMAKE_PREFIX_PATH="$CHIMERA_BUILD/install" >"$CHIMERA_BUILD/consumer.configure.log" 2>&1 ||
  { cat "$CHIMERA_BUILD/consumer.configure.log"; exit 1; }
cmake --build "$CHIMERA_BUILD/consumer" >/dev/null
"$CHIMERA_BUILD/consumer/chimera-consumer"

chimera_log "running ctest"
cd "$CHIMERA_BUILD"
ctest --output-on-failure -j "$(nproc)" "$@"
