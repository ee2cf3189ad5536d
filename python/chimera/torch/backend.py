# SPDX-License-Identifier: Apache-2.0
"""The torch.distributed backend "chimera": registration and an MPI-launch helper."""

from __future__ import annotations

import atexit
import hashlib
import os

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

import chimera

from . import _extension

BACKEND_NAME = "chimera"


def _create_backend(dist_opts, _backend_options):
    ranks = [int(r) for r in dist_opts.global_ranks_in_group]
    size = int(dist_opts.group_size)
    world = dist.get_world_size() if ranks and dist.is_initialized() else size
    timeout = getattr(dist_opts, "timeout", None)
    timeout_ms = int(timeout.total_seconds() * 1000) if hasattr(timeout, "total_seconds") else 0
    return _extension.load().create_backend(
        int(dist_opts.group_rank), size, ranks, world, str(dist_opts.group_id), dist_opts.store, timeout_ms
    )


def _finalize(extension) -> None:
    # At exit, before `import chimera`'s own handler (atexit runs newest first): chimera's native
    # objects are freed while MPI is still up, then MPI is finalised by whoever initialised it.
    chimera._chimera._shutdown()
    extension.finalize_mpi()


def register() -> None:
    """Registers the backend with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:  # noqa: SLF001 (no public query exists)
        return
    extension = _extension.load()
    atexit.register(_finalize, extension)
    devices = ["cpu", "cuda"] if extension.cuda_supported() else ["cpu"]
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=devices)


def mpi_environment(port: int | None = None) -> dict[str, str]:
    """Sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT from an MPI launch.

    Values already set are kept. The rendezvous port defaults to one derived from the MPI job
    (so concurrent jobs on one host do not collide). Raises chimera.BackendError (a RuntimeError)
    when MPI cannot be initialised.
    """
    rank, size = _extension.load().mpi_world()
    job = os.environ.get("PMIX_NAMESPACE") or os.environ.get("OMPI_MCA_orte_ess_jobid") or "chimera"
    if port is None:
        port = 20000 + int(hashlib.sha1(job.encode()).hexdigest(), 16) % 20000
    env = {
        "RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", str(rank)),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    for key, value in env.items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in env}


def init_process_group(backend: str = BACKEND_NAME, **kwargs) -> None:
    """``torch.distributed.init_process_group`` under mpirun: fills the rendezvous variables from
    the MPI launch first (see mpi_environment), then initialises with ``backend``."""
    register()
    if "init_method" not in kwargs and "store" not in kwargs:
        mpi_environment()
    dist.init_process_group(backend, **kwargs)
