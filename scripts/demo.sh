#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds into build/, and runs the main demo on 8 local MPI ranks:
# the paper's six hybrid-parallel chains, each run as written (baseline) and as
# chimera's fused plan in the same run, the fused output checked element by element against
# the baseline's on every rank, with the cost model's predicted speedup next to the measured one.
# Environment: DEMO_SIZE (bytes per rank, default 16M), DEMO_ITERS (default 7).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

chimera_install_deps
chimera_build

bench="$CHIMERA_BUILD/bin/chimera-bench"
size="${DEMO_SIZE:-16M}"
iters="${DEMO_ITERS:-7}"
json="$(mktemp -t chimera-demo.XXXXXX.json)"
trap 'rm -f "$json"' EXIT
mpirun_flags=$(chimera_mpirun_flags)

chimera_log "chimera-bench --scenario all on 8 ranks, $size per rank, median of $iters iterations"
status=0
# shellcheck disable=SC2086
mpirun -np 8 $mpirun_flags "$bench" --scenario all --backend mpi -b "$size" -e "$size" -n "$iters" -w 2 -c 1 \
  --json "$json" || status=$?

chimera_log "summary"
python3 - "$json" <<'PY'
import json, sys
for row in json.load(open(sys.argv[1]))["rows"]:
    speedup, predicted = row["speedup"], row["predicted_speedup"]
    verdict = "faster" if speedup >= 1 else "slower"
    factor = speedup if speedup >= 1 else 1 / speedup
    pred = f"{predicted:.2f}x" if predicted is not None else "n/a"
    wrong = "unchecked" if row["wrong"] is None else f'{row["wrong"]} wrong'
    print(f'{row["scenario"]}: fused {factor:.2f}x {verdict} than baseline (predicted {pred}), {wrong}')
PY
exit "$status"
