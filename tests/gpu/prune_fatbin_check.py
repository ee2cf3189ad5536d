#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""CPU-side check of scripts/prune_fatbin.py on a library of this build (libchimera: SASS for
sm_89 and sm_90, PTX for sm_90): keeping sm_89 leaves the file's size, ELF header and every
sm_89 SASS payload as they were and zeroes every other payload; keeping an architecture the
library lacks fails naming it.

usage: prune_fatbin_check.py SCRIPTS_DIR LIBRARY WORK_DIR
"""
import os
import subprocess
import sys

scripts, library, work = sys.argv[1:4]
sys.path.insert(0, scripts)
import prune_fatbin  # noqa: E402

os.makedirs(work, exist_ok=True)
pruned_path = os.path.join(work, "pruned.so")
tool = [sys.executable, os.path.join(scripts, "prune_fatbin.py")]
subprocess.run(tool + [library, pruned_path, "89"], check=True)
original = bytearray(open(library, "rb").read())
pruned = bytearray(open(pruned_path, "rb").read())
assert len(pruned) == len(original), "the size changed"
assert pruned[:64] == original[:64], "the ELF header changed"
kept = zeroed = 0
for kind, sm, start, payload in prune_fatbin.entries(original):
    before, after = original[start : start + payload], pruned[start : start + payload]
    if kind == 2 and sm == 89:  # SASS (kind 2) for sm_89
        assert after == before, f"sm_{sm} SASS at {start} changed"
        kept += 1
    else:
        assert after == bytes(payload), f"entry kind {kind} sm_{sm} at {start} was not zeroed"
        zeroed += 1 if any(before) else 0
assert kept > 0 and zeroed > 0, f"nothing to check: {kept} kept, {zeroed} zeroed entries"
at = 0
for start, end in sorted((s, s + n) for _, _, s, n in prune_fatbin.entries(original)):
    assert pruned[at:start] == original[at:start], f"bytes between {at} and {start}, outside every payload, changed"
    at = max(at, end)
assert pruned[at:] == original[at:], "bytes after the last payload changed"
missing = subprocess.run(tool + [library, pruned_path, "61"], capture_output=True, text=True)
assert missing.returncode != 0 and "no SASS for sm 61" in missing.stderr, missing.stderr
print(f"prune_fatbin: {kept} sm_89 entries kept, {zeroed} other entries zeroed, nothing else changed")
