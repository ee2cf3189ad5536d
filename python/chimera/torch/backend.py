# SPDX-License-Identifier: Apache-2.0
"""The torch.distributed backend "chimera": registration, the choice of host transport, chimera's
own Backend over a mesh of torch ranks on that transport, and init_process_group under an MPI
launch (on the store of rendezvous.py)."""

from __future__ import annotations

import atexit
import datetime
import os

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

import chimera

from . import _extension, rendezvous
from .options import ENVIRONMENT, MESH_DEFAULT_TIMEOUT, resolve

BACKEND_NAME = "chimera"


# Environment variables an MPI launcher sets for the processes it starts, with the world size.
_MPI_LAUNCH_SIZE = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")


# The transport the default group asked for (its Options), which mesh_backend follows too.
_WORLD = {"transport": None}


def transport(world_size: int, requested: str | None = None) -> str:
    """The host transport of a process group in a world of ``world_size`` ranks: the one
    ``requested`` (``chimera.torch.Options.transport``; the default group's when None), else
    ``"mpi"`` when MPI launched exactly that many processes (mpirun), else ``"gloo"`` (torchrun,
    a multi-process test harness: bootstrapped from the c10d Store). ``CHIMERA_TORCH_TRANSPORT=mpi|gloo``
    overrides both."""
    chosen = ENVIRONMENT.transport or requested or _WORLD["transport"]
    if chosen:
        return chosen
    return "mpi" if _mpi_launch_size() == world_size else "gloo"


def _mpi_launch_size() -> int | None:
    """The number of processes an MPI launcher started, None outside an MPI launch."""
    for key in _MPI_LAUNCH_SIZE:
        value = os.environ.get(key, "")
        if value.isdigit():
            return int(value)
    return None


def mesh_backend(mesh_text: str, ranks) -> chimera.Backend:
    """chimera's host Backend laid out as ``mesh_text`` (``"dp=2,tp=4"``) over the torch global
    ranks ``ranks``: mesh coordinate i (row-major) is torch rank ``ranks[i]``, in any order (a
    DeviceMesh's ranks, a sub-mesh). Collective over those ranks; torch.distributed must be
    initialised. On the host transport of ``transport()``: the MPI backend when MPI launched the
    world with torch's ranks as MPI's, else the gloo mesh backend, whose groups (one gloo process
    group per group of axes, made by its members) meet in torch's default store under a prefix
    naming the mesh; every wait is bounded by ``CHIMERA_TIMEOUT_MS`` (default 600000), as chimera's
    MPI backend's."""
    ranks = [int(r) for r in ranks]
    world = dist.get_world_size()
    if transport(world) == "mpi" and chimera.world() == (dist.get_rank(), world):
        return chimera.mpi_backend(chimera.Mesh(mesh_text), ranks=None if ranks == list(range(world)) else ranks)
    from torch.distributed import distributed_c10d as c10d

    timeout_ms = (ENVIRONMENT.timeout or MESH_DEFAULT_TIMEOUT) // datetime.timedelta(milliseconds=1)
    store = c10d._get_default_store()  # noqa: SLF001 (torch has no public accessor)

    def make_group(prefix: str, rank: int, size: int, wait_ms: int):
        return dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, size,
                                     datetime.timedelta(milliseconds=wait_ms))

    capsule = _extension.load().gloo_mesh_backend(mesh_text, ranks, dist.get_rank(), store, make_group, timeout_ms)
    return chimera._chimera._adopt_backend(capsule)  # noqa: SLF001 (the package's own hand-over)


def _create_backend(dist_opts, backend_options):
    """torch's hook: the backend of one group, with ``backend_options`` (``pg_options``: a
    ``chimera.torch.Options`` or None) resolved against the environment and torch's timeout."""
    options = resolve(backend_options, getattr(dist_opts, "timeout", None))
    ranks = [int(r) for r in dist_opts.global_ranks_in_group]
    size = int(dist_opts.group_size)
    rank = int(dist_opts.group_rank)
    is_world = not (ranks and dist.is_initialized())
    world = size if is_world else dist.get_world_size()
    if is_world:
        _WORLD["transport"] = options.transport
    gloo = None
    if transport(world, options.transport) == "gloo":
        # A gloo backend of the same group, from the group's own store: chimera's host transport.
        store = dist.PrefixStore("chimera/gloo/", dist_opts.store)
        gloo = dist.ProcessGroupGloo(store, rank, size, options.timeout)
    if options.redistribute:
        from .redistribute import route_process_wide

        route_process_wide()
    extension = _extension.load()
    timeout_ms = options.timeout // datetime.timedelta(milliseconds=1)
    backend = extension.create_backend(rank, size, ranks, world, str(dist_opts.group_id), dist_opts.store,
                                       timeout_ms, options.abort_on_timeout, gloo)
    # torch's ProcessGroup for it, named "chimera" (a plugin's is named "custom"). Returning a
    # ProcessGroup makes torch take it as it is, so do here what torch does for a backend:
    # the TORCH_DISTRIBUTED_DEBUG=DETAIL wrapper and one registration per device.
    group = extension.named_process_group(dist_opts.store, rank, size)
    backend_type = dist.ProcessGroup.BackendType.CUSTOM
    group._set_default_backend(backend_type)  # noqa: SLF001
    made_by_torch = getattr(dist_opts, "process_group", None)
    if made_by_torch is not None and made_by_torch.bound_device_id is not None:
        group.bound_device_id = made_by_torch.bound_device_id
    if dist.get_debug_level() == dist.DebugLevel.DETAIL and dist.is_gloo_available():
        from torch.distributed import distributed_c10d as c10d

        backend = c10d._create_process_group_wrapper(  # noqa: SLF001
            wrapped_pg=backend, store_prefix=str(dist_opts.group_id), store=dist_opts.store, rank=rank,
            world_size=size, timeout=options.timeout)
    for device in _devices():
        group._register_backend(torch.device(device), backend_type, backend)  # noqa: SLF001
    return group


def _devices() -> list[str]:
    return ["cpu", "cuda"] if _extension.load().cuda_supported() else ["cpu"]


def _finalize(extension) -> None:
    # At exit, before `import chimera`'s own handler (atexit runs newest first): chimera's native
    # objects are freed while MPI is still up, then MPI is finalised by whoever initialised it.
    chimera._chimera._shutdown()
    extension.finalize_mpi()


def register() -> None:
    """Registers the backend with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:  # noqa: SLF001 (no public query exists)
        return
    atexit.register(_finalize, _extension.load())
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=_devices())


def init_process_group(backend: str = BACKEND_NAME, **kwargs) -> None:
    """``torch.distributed.init_process_group`` with ``backend``; under an MPI launch without
    ``init_method`` or ``store``, on the store of the MPI rendezvous (rendezvous.mpi_store: rank 0's
    store on a free port at an address every rank reached; ``MASTER_ADDR``/``MASTER_PORT`` win),
    with rank and world size from MPI."""
    register()
    if "init_method" not in kwargs and "store" not in kwargs and _mpi_launch_size() is not None:
        found = rendezvous.mpi_store(kwargs.get("timeout"))
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            os.environ.setdefault(key, found.environment()[key])
        kwargs = {"store": found.store, "rank": found.rank, "world_size": found.world_size, **kwargs}
    dist.init_process_group(backend, **kwargs)
