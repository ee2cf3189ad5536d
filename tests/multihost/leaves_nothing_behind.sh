#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# multihost.sh leaves nothing behind (namespace, hosts file, state, process) after a run that
# fails, a run stopped by SIGTERM, and a run killed outright (whose rig the next run removes).
# Usage: leaves_nothing_behind.sh PATH/TO/multihost.sh. Exit 77 where the rig cannot be made.
set -uo pipefail
rig="$1"
work="$(mktemp -d -t chimera-rig-test.XXXXXX)"
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# The rig id a run announced on stderr (its "==> rig N: ..." lines).
rig_id_of() { sed -n 's/^==> rig \([0-9]*\): .*/\1/p' "$1" | head -1; }

# Nothing of rig $1 is left, and no process runs `sleep $2`.
expect_clean() {
  local id="$1" marker="$2" what="$3"
  [ -n "$id" ] || { fail "$what: the run did not say which rig it used"; return; }
  if ip netns list | grep -qE "^chimera-rig${id}-"; then fail "$what: namespaces left: $(ip netns list | grep -E "^chimera-rig${id}-" | tr '\n' ' ')"; fi
  if compgen -G "/etc/netns/chimera-rig${id}-*" >/dev/null; then fail "$what: hosts files left in /etc/netns"; fi
  if [ -e "/run/chimera-rig/$id" ]; then fail "$what: state /run/chimera-rig/$id left"; fi
  if pgrep -f "^sleep $marker\$" >/dev/null; then fail "$what: a process started in the rig still runs (sleep $marker)"; fi
}

# Waits (10 s at most) until the run logged in $1 has its rig up and its command started.
wait_for_command() {
  local log="$1" marker="$2" tries
  for tries in $(seq 100); do
    pgrep -f "^sleep $marker\$" >/dev/null && return 0
    sleep 0.1
  done
  fail "the command of the run in $log did not start: $(cat "$log")"
}

# 1. A command that fails on every rank and leaves a process behind in its host.
marker=$((100000 + RANDOM))
status=0
"$rig" run --ranks 2,2 --timeout 60 -- sh -c "sleep $marker & exit 3" 2>"$work/failed.log" || status=$?
[ "$status" -ne 77 ] || { cat "$work/failed.log"; exit 77; }
[ "$status" -ne 0 ] || fail "a failing command: the run exited 0"
expect_clean "$(rig_id_of "$work/failed.log")" "$marker" "after a failing run"

# 2. A run stopped by SIGTERM (as Ctrl-C or a job scheduler would) while its command runs.
marker=$((200000 + RANDOM))
"$rig" run --ranks 1,3 --map node -- sleep "$marker" 2>"$work/stopped.log" &
run=$!
wait_for_command "$work/stopped.log" "$marker"
kill -TERM "$run"
status=0
wait "$run" || status=$?
[ "$status" -ne 0 ] || fail "a run stopped by SIGTERM exited 0"
expect_clean "$(rig_id_of "$work/stopped.log")" "$marker" "after SIGTERM"

# 3. A run killed outright (no trap runs): the next run removes its rig and what ran in it.
marker=$((300000 + RANDOM))
"$rig" run --ranks 2,2 -- sleep "$marker" 2>"$work/killed.log" &
run=$!
wait_for_command "$work/killed.log" "$marker"
kill -KILL "$run"
wait "$run" 2>/dev/null
"$rig" run --ranks 1,1 -- true 2>"$work/next.log" || fail "the run after a killed one failed: $(cat "$work/next.log")"
expect_clean "$(rig_id_of "$work/killed.log")" "$marker" "after SIGKILL and the next run"
expect_clean "$(rig_id_of "$work/next.log")" "$marker" "after the next run"

if [ "$failures" -ne 0 ]; then exit 1; fi
echo "nothing left behind after a failing, a stopped and a killed run"
