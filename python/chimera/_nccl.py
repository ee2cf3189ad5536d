# SPDX-License-Identifier: Apache-2.0
"""Which libnccl.so.2 the process uses.

chimera's extension links NCCL by soname (libnccl.so.2), found through its RPATH (the NCCL it was
built against). A pip-installed torch brings its own, newer NCCL (``nvidia/nccl/lib``) under the
same soname, and a process can hold only one: whichever loads first serves both. So before the
extension loads, this module loads the one to use:

- ``CHIMERA_NCCL_LIBRARY=/path/to/libnccl.so.2``: that file;
- ``CHIMERA_NCCL_LIBRARY=system``: nothing preloaded, the NCCL chimera was built against (a torch
  imported later then runs on it too, if it can: torch 2.15 needs symbols of its newer NCCL);
- unset (default): the NCCL of the installed ``nvidia-nccl`` wheel (torch's) when there is one, so
  that torch and chimera share the newer library (NCCL keeps its 2.x ABI), else the system one.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path
from typing import Optional

_SONAME = "libnccl.so.2"


def _wheel_nccl() -> Optional[str]:
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "lib" / _SONAME
        if candidate.is_file():
            return str(candidate)
    return None


def preload(has_cuda: bool) -> Optional[str]:
    """Loads the chosen libnccl (RTLD_GLOBAL) and returns its path, or None when none is preloaded."""
    if not has_cuda:
        return None
    choice = os.environ.get("CHIMERA_NCCL_LIBRARY", "").strip()
    if choice == "system":
        return None
    path = choice or _wheel_nccl()
    if path is None:
        return None
    if choice and not Path(choice).is_file():
        raise ImportError(f"CHIMERA_NCCL_LIBRARY={choice}: no such file")
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    return path


def loaded_library() -> Optional[str]:
    """The path of the libnccl mapped into this process (None when none is)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and os.path.basename(fields[5]).startswith("libnccl.so"):
                    return os.path.realpath(fields[5])
    except OSError:
        return None
    return None
