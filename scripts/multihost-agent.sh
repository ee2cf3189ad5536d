#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The rsh agent of the multi-host rig (mpirun --mca plm_rsh_agent): called as ssh would be,
# `multihost-agent.sh [options] HOST COMMAND...`, it runs COMMAND (words joined and read by sh, as
# ssh's remote shell reads them) inside HOST's namespace of rig $CHIMERA_RIG_ID, with HOST's name.
set -euo pipefail
# ssh options, skipped; these take a value.
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "multihost-agent.sh: expected [options] HOST COMMAND..." >&2; exit 255; }
[ -n "${CHIMERA_RIG_ID:-}" ] || { echo "multihost-agent.sh: CHIMERA_RIG_ID is not set (run through multihost.sh run)" >&2; exit 255; }
host="$1"
shift
exec "$(dirname "${BASH_SOURCE[0]}")/multihost.sh" --id "$CHIMERA_RIG_ID" exec "$host" -- sh -c "$*"
