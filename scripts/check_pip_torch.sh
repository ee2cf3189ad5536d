#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks that a standalone `pip install --no-build-isolation .` (not the CMake build test.sh
# reuses) builds the torch extension chimera.torch._C, and that the installed copy registers the
# "chimera" backend and all-reduces on 2 ranks under mpirun, with one libchimera (the package's)
# serving chimera._chimera and _C. Not part of test.sh: it compiles libchimera once more (CPU only; 38 minutes the first time on the 2-core machine shared
# with other builds, incremental after: the build is kept in $CHIMERA_BUILD/pip-standalone).
#
# TORCH_PYTHON (default: build/venv/bin/python, test.sh's venv) is a Python with torch,
# scikit-build-core and nanobind. The check's venv sees its packages through a .pth file, so
# torch is not installed (or downloaded) again, while the chimera package goes into the venv.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TORCH_PYTHON="${TORCH_PYTHON:-$CHIMERA_BUILD/venv/bin/python}"
venv="$CHIMERA_BUILD/pip-torch-venv"
"$TORCH_PYTHON" -c "import torch, scikit_build_core, nanobind" ||
  { echo "TORCH_PYTHON=$TORCH_PYTHON needs torch, scikit-build-core and nanobind" >&2; exit 1; }
# Every site-packages folder it imports from (its own may itself point elsewhere by a .pth file).
sites="$("$TORCH_PYTHON" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("site-packages")))')"
base="$("$TORCH_PYTHON" -c 'import sys; print(sys._base_executable)')"
if [ ! -x "$venv/bin/python" ]; then
  chimera_log "creating $venv (packages of $TORCH_PYTHON through a .pth file)"
  "$base" -m venv "$venv"
  venv_site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$sites" >"$venv_site/torch_env.pth"
fi

chimera_log "pip install --no-build-isolation $CHIMERA_ROOT into $venv"
start=$SECONDS
launcher=()
for flag in "${CHIMERA_LAUNCHER[@]}"; do launcher+=(-C "cmake.define.${flag#-D}"); done
(cd "$CHIMERA_ROOT" && "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
  -C build-dir="$CHIMERA_BUILD/pip-standalone" -C cmake.define.CHIMERA_WITH_CUDA=OFF "${launcher[@]}" .)
chimera_log "pip install took $((SECONDS - start)) s"

installed="$("$venv/bin/python" -c 'import chimera, os; print(os.path.dirname(chimera.__file__))')"
ls "$installed"/torch/_C*.so >/dev/null || { echo "no chimera/torch/_C*.so in $installed" >&2; exit 1; }
chimera_log "2-rank all_reduce on the installed chimera.torch ($installed)"
mpirun -np 2 $(chimera_mpirun_flags) "$venv/bin/python" -c '
import os, torch, torch.distributed as dist
import chimera, chimera.torch as ct
assert "CHIMERA_TORCH_EXTENSION" not in os.environ
assert ct._extension.load().__file__.startswith(os.path.dirname(ct.__file__)), ct._extension.load().__file__
ct.init_process_group()
assert dist.get_backend() == "chimera", dist.get_backend()
t = torch.arange(4, dtype=torch.float32) + dist.get_rank()
dist.all_reduce(t)
assert torch.equal(t, torch.arange(4, dtype=torch.float32) * 2 + 1), t
maps = {line.split()[-1] for line in open("/proc/self/maps") if "libchimera" in line}
assert len(maps) == 1 and next(iter(maps)).startswith(os.path.dirname(chimera.__file__)), maps
print(f"rank {dist.get_rank()}: all_reduce on the installed chimera.torch ok: {t.tolist()}")
dist.destroy_process_group()
'
