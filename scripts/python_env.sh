#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sourced by test.sh: the Python stage's virtual environment under build/ (torch, numpy, pytest,
# mpi4py, expecttest (torch.testing needs it for the DistributedTest suite), the build requirements and
# torchtitan from pip, through a wheelhouse kept between runs) and
# the package installed into it with `pip install` from the repository root.

CHIMERA_VENV="${CHIMERA_VENV:-$CHIMERA_BUILD/venv}"
# Wheels kept between runs and clones (CHIMERA_WHEELHOUSE overrides).
CHIMERA_WHEELHOUSE="${CHIMERA_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/chimera/wheels}"
# Every version is pinned; torch above all: chimera.torch._C is built against it (docs/torch.md, Versions).
CHIMERA_PYTHON_REQUIREMENTS=(numpy==2.4.6 pytest==9.2.0 mpi4py==4.1.2 torch==2.15.0 expecttest==0.3.0 scikit-build-core==1.1.2
  nanobind==3.1.0)
# examples/torchtitan: torchtitan and everything it imports, pinned and installed without
# dependency resolution (--no-deps). The set is torchtitan 0.3.0's requirements resolved next to
# the packages above, less wandb, which torchtitan imports only when wandb logging is on and which
# brings telemetry packages; `pip check` therefore names wandb as missing.
CHIMERA_TORCHTITAN_REQUIREMENTS=(
  torchtitan==0.3.0 absl-py==2.5.1 aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 anyio==4.16.0
  attrs==26.1.0 certifi==2026.10.19.post1 charset-normalizer==3.5.3 click==8.5.1 datasets==4.7.0 dill==0.4.0
  docstring_parser==0.18.0 einops==0.8.2 frozenlist==1.8.0 fsspec==2026.2.0 grpcio==1.85.3 h11==0.16.0
  hf-xet==1.8.0 httpcore==1.0.9 httpx==0.29.0 huggingface_hub==1.33.0 idna==3.20 Markdown==3.11.3
  multidict==7.2.1 multiprocess==0.70.18 pandas==3.1.1 pillow==13.0.0 propcache==0.5.4 protobuf==7.36.2
  pyarrow==26.0.1 python-dateutil==4.0.0 PyYAML==6.0.4 requests==2.34.2 safetensors==0.8.0 spmd_types==0.2.3
  tensorboard-data-server==0.7.2 tensorboard==2.21.0 tokenizers==0.23.3 torch_checkpointing==0.1.1
  torchdata==0.11.0 tqdm==4.70.1 typeguard==4.6.1 tyro==1.0.17 tzdata==2026.6 urllib3==2.8.0 Werkzeug==3.1.9
  xxhash==4.1.0 yarl==1.25.1
)

# The Python linter (pyproject.toml's [tool.ruff] says which rules), pinned like the rest.
CHIMERA_RUFF_REQUIREMENT=ruff==0.17.5

# Creates the venv when missing (with the system packages it needs).
chimera_python_venv() {
  local saved=("${CHIMERA_PACKAGES[@]}")
  CHIMERA_PACKAGES=(python3-venv python3-dev)
  chimera_install_deps
  CHIMERA_PACKAGES=("${saved[@]}")
  if [ ! -x "$CHIMERA_VENV/bin/python" ]; then
    chimera_log "creating $CHIMERA_VENV"
    python3 -m venv "$CHIMERA_VENV"
  fi
  mkdir -p "$CHIMERA_WHEELHOUSE"
}

# Creates the venv when missing and installs what it lacks (quiet; nothing to do on a rerun).
chimera_python_env() {
  chimera_python_venv
  chimera_wheelhouse_install "${CHIMERA_PYTHON_REQUIREMENTS[@]}"
  chimera_wheelhouse_install --no-deps "${CHIMERA_TORCHTITAN_REQUIREMENTS[@]}"
  chimera_log "installed ${CHIMERA_PYTHON_REQUIREMENTS[*]} and torchtitan into $CHIMERA_VENV from $CHIMERA_WHEELHOUSE"
}

# pip install [--no-deps] REQUIREMENT... into the venv from the wheelhouse; what the wheelhouse lacks
# is downloaded into it first. pip's HTTP cache does not keep these downloads here (the registry's
# answers are not cacheable), so a fresh clone installs from the wheelhouse without the ~3 GB
# torch download, and only a missing wheel is fetched.
chimera_wheelhouse_install() {
  local pip=("$CHIMERA_VENV/bin/python" -m pip --disable-pip-version-check) flags=()
  if [ "$1" = --no-deps ]; then flags=(--no-deps); shift; fi
  if ! "${pip[@]}" install -q --no-index --find-links "$CHIMERA_WHEELHOUSE" "${flags[@]}" "$@" >/dev/null 2>&1; then
    chimera_log "downloading $* into $CHIMERA_WHEELHOUSE"
    "${pip[@]}" download -q -d "$CHIMERA_WHEELHOUSE" "${flags[@]}" "$@"
    "${pip[@]}" install -q --no-index --find-links "$CHIMERA_WHEELHOUSE" "${flags[@]}" "$@"
  fi
}

# ruff over every tracked Python file (the venv gets ruff alone when it is new; seconds). Lint
# only: the files are checked, never rewritten.
chimera_python_lint() {
  chimera_python_venv
  chimera_wheelhouse_install "$CHIMERA_RUFF_REQUIREMENT"
  (cd "$CHIMERA_ROOT" && "$CHIMERA_VENV/bin/ruff" check --no-cache --output-format concise .)
  chimera_log "python lint: $CHIMERA_RUFF_REQUIREMENT finds nothing in $(git -C "$CHIMERA_ROOT" ls-files '*.py' | wc -l) files"
}

# The value of NAME in the CMake cache of $CHIMERA_BUILD.
chimera_cached() { sed -n "s/^$1:[A-Z]*=//p" "$CHIMERA_BUILD/CMakeCache.txt"; }

# pip install . into the venv, reusing the main build: it was configured with
# CHIMERA_BUILD_PYTHON=ON, so the extension is built already and libchimera is not compiled a
# second time; scikit-build-core gets the build's own generator and options (so it changes no
# compile flag) and installs the extension with the shared libchimera beside it.
chimera_python_install() {
  local options=()
  for name in BUILD_SHARED_LIBS CHIMERA_BUILD_TESTS CHIMERA_BUILD_BENCHMARKS CHIMERA_BUILD_EXAMPLES CHIMERA_WITH_CUDA \
    CHIMERA_WITH_MPI CHIMERA_PYTHON_TEST_INTERPRETER; do
    options+=(-C "cmake.define.$name=$(chimera_cached "$name")")
  done
  chimera_log "pip install $CHIMERA_ROOT into $CHIMERA_VENV (from the build in $CHIMERA_BUILD)"
  CMAKE_GENERATOR="$(chimera_cached CMAKE_GENERATOR)" "$CHIMERA_VENV/bin/python" -m pip install -q \
    --disable-pip-version-check --no-build-isolation -C build-dir="$CHIMERA_BUILD" \
    -C cmake.build-type="$(chimera_cached CMAKE_BUILD_TYPE)" "${options[@]}" "$CHIMERA_ROOT" \
    >"$CHIMERA_BUILD/python-install.log" 2>&1 || { tail -50 "$CHIMERA_BUILD/python-install.log"; return 1; }
  "$CHIMERA_VENV/bin/python" -c "import chimera; print('chimera', chimera.__version__, 'cuda', chimera.has_cuda)"
}
