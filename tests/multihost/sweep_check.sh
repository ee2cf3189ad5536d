#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#   sweep_check.sh BENCH DIR
# benchmarks/multihost/sweep.py at 256 KiB per rank (one run, both placements, tp_pp and pp_sp),
# then checks its rows: no wrong element, and where the stage link crosses the hosts (tp_pp in
# blocks, pp_sp round-robin) the planner fuses and its plan puts at most half the chain's bytes
# on the link, as counted by the rig's veth counters. Exit 77 (skipped) where no rig can be made.
set -euo pipefail
bench="$1"
dir="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$dir"
python3 "$root/benchmarks/multihost/sweep.py" --bench "$bench" --size 256K --repeats 1 --iters 2 --byte-iters 1 \
  --scenarios tp_pp,pp_sp --json "$dir/rows.json"
python3 - "$dir/rows.json" <<'PY'
import json, sys
rows = {(r["scenario"], r["placement"]): r for r in json.load(open(sys.argv[1]))["rows"]}
assert len(rows) == 4, sorted(rows)
assert all(r["wrong"] == 0 for r in rows.values()), rows
for key in (("tp_pp", "blocks"), ("pp_sp", "node")):
    r = rows[key]
    assert r["plan"] == "fused", (key, r)
    assert 0 < r["link_bytes_fused"] <= r["link_bytes_chain"] / 2, (key, r)
    print(f"sweep_check.sh: {key[0]} {key[1]}: link bytes chain {r['link_bytes_chain']}, fused {r['link_bytes_fused']}")
PY
