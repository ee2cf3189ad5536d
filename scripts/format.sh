#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Formats the tracked C, C++ and CUDA files with clang-format (.clang-format at the root).
#   scripts/format.sh            rewrite the files in place
#   scripts/format.sh --check    change nothing; list each file that is not formatted and exit 1
# Extra arguments limit it to those files (e.g. the ones a change touches).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
command -v clang-format >/dev/null 2>&1 || { echo "format.sh: clang-format is not installed (apt-get install clang-format)" >&2; exit 2; }

cd "$CHIMERA_ROOT"
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh')
fi
if [ "$check" = 0 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -P "$(nproc)" -n 16 clang-format -i
  exit 0
fi
unformatted=()
for file in "${files[@]}"; do
  clang-format --dry-run -Werror "$file" >/dev/null 2>&1 || unformatted+=("$file")
done
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "format.sh: ${#unformatted[@]} file(s) differ from .clang-format (run scripts/format.sh):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  exit 1
fi
chimera_log "formatting: ${#files[@]} files match .clang-format"
