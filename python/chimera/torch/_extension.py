# SPDX-License-Identifier: Apache-2.0
"""Loads chimera.torch._C, the compiled torch extension: the c10d process group behind the
"chimera" backend, and nothing else (the rest of chimera.torch is Python over ``chimera``).

It is built against one torch (CMake target ``chimera_torch``); an installed copy sits next to
this file, a build tree's is named by ``CHIMERA_TORCH_EXTENSION`` (its path).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys


def load():
    """Returns the ``_C`` module, importing it once."""
    name = __package__ + "._C"
    if name in sys.modules:
        return sys.modules[name]
    path = os.environ.get("CHIMERA_TORCH_EXTENSION")
    if not path:
        try:
            return importlib.import_module(name)
        except ImportError as error:
            raise ImportError(
                f"chimera.torch: the compiled extension _C could not be imported from next to the package "
                f"({error}); install the package with `pip install --no-build-isolation .` from an environment "
                "that has torch (an isolated build has no torch and skips _C), or build the CMake target "
                "chimera_torch and set CHIMERA_TORCH_EXTENSION to its path"
            ) from error
    if not os.path.isfile(path):
        raise ImportError(f"chimera.torch: CHIMERA_TORCH_EXTENSION={path} is not a file")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
