#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Started by mpirun on every rank of a multi-host launch:
#   calibrate_hosts.sh BENCH LAYOUT DIR
# `chimera-bench --calibrate` across the hosts, its profile and cache in DIR (made by rank 0's
# host, shared by the rig's namespaces); rank 0 then checks that the profile is a host-network
# one with the launch's placement (blocks of 4), that both links were fitted, and that it was
# cached for the layout (hosts-LAYOUT.json). The ratio of the links is not checked: on a machine
# shared with other work the fixed cost of a step hides the link rates at calibration sizes.
set -euo pipefail
bench="$1"
layout="$2"
dir="$3"
mkdir -p "$dir"
export CHIMERA_TOPOLOGY_CACHE="$dir/cache"
run=("$bench" --calibrate -b 16K -e 256K -n 2 -w 1 --out "$dir/profile.json")
if [ "${OMPI_COMM_WORLD_RANK:-0}" != 0 ]; then exec "${run[@]}"; fi
"${run[@]}"
python3 - "$dir/profile.json" "$dir/cache/hosts-$layout.json" <<'PY'
import json, sys
profile = json.load(open(sys.argv[1]))
assert profile["fabric"] == "host-network", profile["fabric"]
assert profile["ranks_per_domain"] == 4 and "domains" not in profile, "expected the launch's blocks of 4"
local, cross = profile["local_link"]["bandwidth_bytes_per_s"], profile["cross_link"]["bandwidth_bytes_per_s"]
assert local > 0 and cross > 0, f"cross link {cross} B/s, local {local} B/s"
assert json.load(open(sys.argv[2])) == profile, "the cached profile differs from --out"
print(f"calibrate_hosts.sh: local {local / 1e9:.3g} GB/s, cross {cross / 1e6:.3g} MB/s")
PY
