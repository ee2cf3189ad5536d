#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# multihost.sh refuses to run without root with exit status 77 (which the tier reports as
# skipped) and a message naming the cause, and makes nothing. Usage: refuses_without_root.sh RIG.
set -uo pipefail
rig="$1"
as_nobody=()
if [ "$(id -u)" -eq 0 ]; then as_nobody=(setpriv --reuid 65534 --regid 65534 --clear-groups); fi
before="$(ip netns list 2>/dev/null | grep -c '^chimera-rig' || true)"
status=0
message="$("${as_nobody[@]}" bash "$rig" run --ranks 1,1 -- true 2>&1)" || status=$?
if [ "$status" -ne 77 ]; then
  echo "FAIL: without root the run exited $status, expected 77: $message" >&2
  exit 1
fi
if [[ "$message" != *"needs root"* ]]; then
  echo "FAIL: the message does not name the cause: $message" >&2
  exit 1
fi
after="$(ip netns list 2>/dev/null | grep -c '^chimera-rig' || true)"
if [ "$after" -gt "$before" ]; then
  echo "FAIL: a refused run made namespaces" >&2
  exit 1
fi
echo "refused as expected: $message"
