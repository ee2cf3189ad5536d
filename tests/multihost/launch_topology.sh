#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Started by mpirun on every rank of a multi-host launch, with no profile and no cache:
#   launch_topology.sh BENCH SCENARIO HOSTS
# runs `chimera-bench --scenario SCENARIO` on the launch's own topology; rank 0 then checks that
# the cost model is the host-network topology of where the ranks really run (HOSTS, as
# hosts:H0,H1,...) and that the planner's decision is the fused plan (the stage hand-off of
# tp_pp in blocks and of pp_sp round-robin crosses the hosts with each byte once).
set -euo pipefail
bench="$1"
scenario="$2"
hosts="$3"
export CHIMERA_TOPOLOGY_CACHE=none
run=("$bench" --scenario "$scenario" -b 256K -e 256K -n 1 -w 0 --chunks 1)
if [ "${OMPI_COMM_WORLD_RANK:-0}" != 0 ]; then exec "${run[@]}"; fi
out="$("${run[@]}")"
printf '%s\n' "$out"
if ! grep -qF "cost model 'hosts:$hosts'" <<<"$out"; then
  echo "launch_topology.sh: expected the cost model 'hosts:$hosts'" >&2
  exit 1
fi
plan="$(awk -v s="$scenario" '$1 == s { print $10 }' <<<"$out")"
if [ "$plan" != fused ]; then
  echo "launch_topology.sh: $scenario: expected the planner to fuse, its decision is '$plan'" >&2
  exit 1
fi
