#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds into build/, and runs the main demo on 8 local MPI ranks:
# the collective benchmark (our backend vs the plain MPI call, checked element by element).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

chimera_install_deps
chimera_build

bench="$CHIMERA_BUILD/benchmarks/chimera-bench"
# shellcheck disable=SC2046
mpirun_flags=$(chimera_mpirun_flags)
for collective in allreduce reducescatter allgather alltoall; do
  chimera_log "chimera-bench -C $collective on 8 ranks"
  # shellcheck disable=SC2086
  mpirun -np 8 $mpirun_flags "$bench" -C "$collective" -b 1M -e 16M -f 4 -c 1
done
