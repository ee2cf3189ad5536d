# SPDX-License-Identifier: Apache-2.0
"""The rendezvous of an MPI launch (mpirun, srun): where torch.distributed's store listens,
agreed through MPI before any store exists.

MPI rank 0 listens on a port the kernel hands it (port 0), so that two jobs can never meet at one
port, and sends every rank, through MPI, that port and the addresses of its host (those its host
name resolves to first, then every interface's; loopback only to ranks of its own host and network
namespace). Each rank connects to the first of them that answers, and every rank learns whether
every other one did before any goes on. A failure anywhere (rank 0 cannot listen, a rank reaches
none of the addresses) raises RendezvousError on every rank, naming the rank and the cause; every
wait is bounded by the timeout. ``MASTER_ADDR`` and ``MASTER_PORT`` set by the user win: rank 0
listens there, and fails every rank when it cannot.

Two forms: ``mpi_store()`` makes the store itself on rank 0 (what ``chimera.torch.init_process_group``
passes to ``torch.distributed.init_process_group(store=...)``); ``mpi_environment()`` only sets
``MASTER_ADDR``/``MASTER_PORT`` (and ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) for an ``env://``
initialisation, in which case rank 0 gives the port back just before torch binds it again.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import json
import os
import secrets
import socket
import struct
import time
from dataclasses import dataclass

import torch.distributed as dist

import chimera

from . import _extension
from .options import ENVIRONMENT

# How long one connection attempt to one of rank 0's addresses may take before the next is tried.
CONNECT_TIMEOUT_S = 5.0
# The store key under which rank 0 leaves the job's token: a rank that reads it back has reached
# this job's store, not another job's listening on the same port elsewhere.
_TOKEN_KEY = "chimera/rendezvous/token"
# Variables in which launchers give a process its rank on its host.
_LOCAL_RANK = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK")
_SIOCGIFADDR = 0x8915


class RendezvousError(chimera.BackendError):
    """The rendezvous failed; raised on every rank, naming the ranks where it failed and why."""


@dataclass
class Rendezvous:
    """What one rank knows after the rendezvous."""

    rank: int  #: MPI world rank
    world_size: int
    local_rank: int  #: rank among the ranks of this host
    address: str  #: the address this rank reached rank 0 at (MASTER_ADDR)
    port: int  #: the port rank 0 listens on (MASTER_PORT)
    store: dist.TCPStore | None = None  #: the job's store (mpi_store), None for mpi_environment

    def environment(self) -> dict[str, str]:
        """The torch.distributed variables of this rank."""
        return {"RANK": str(self.rank), "WORLD_SIZE": str(self.world_size), "LOCAL_RANK": str(self.local_rank),
                "MASTER_ADDR": self.address, "MASTER_PORT": str(self.port)}


def default_timeout() -> datetime.timedelta:
    """``CHIMERA_TIMEOUT_MS`` when set (options.ENVIRONMENT, read and checked once), else torch's
    default process-group timeout."""
    if ENVIRONMENT.timeout is not None:
        return ENVIRONMENT.timeout
    from torch.distributed.constants import default_pg_timeout

    return default_pg_timeout


def mpi_store(timeout: datetime.timedelta | None = None) -> Rendezvous:
    """The rendezvous with rank 0's TCPStore made on a free port (or MASTER_PORT) and every rank
    connected to it: ``result.store`` is ready for ``torch.distributed.init_process_group(store=...)``.
    Collective over MPI_COMM_WORLD (initialises MPI when nobody has); RendezvousError or
    chimera.Timeout on every rank when it fails."""
    return _rendezvous(timeout or default_timeout(), make_store=True)


def mpi_environment(port: int | None = None, timeout: datetime.timedelta | None = None) -> dict[str, str]:
    """Sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT from the MPI launch for an
    ``env://`` initialisation and returns them; values already set are kept. MASTER_ADDR is an
    address of rank 0's host that this rank reached; MASTER_PORT (``port`` when given, else one
    the kernel handed rank 0) is one rank 0 could listen on. Collective over MPI_COMM_WORLD;
    RendezvousError or chimera.Timeout on every rank when it fails (a MASTER_PORT in use, say)."""
    if port is not None and "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(port)
    found = _rendezvous(timeout or default_timeout(), make_store=False).environment()
    for key, value in found.items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in found}


def _rendezvous(timeout: datetime.timedelta, make_store: bool) -> Rendezvous:
    extension = _extension.load()
    rank, size = extension.mpi_world()
    deadline = time.monotonic() + timeout.total_seconds()
    host = _host()
    user_address = os.environ.get("MASTER_ADDR") or None
    user_port = _user_port()
    listener = None
    offer: dict = {"host": host}
    if rank == 0:
        try:
            listener, offer["addresses"], offer["port"] = _listen(user_address, user_port, size, timeout, make_store)
            if make_store:
                offer["token"] = secrets.token_hex(16)
                listener.set(_TOKEN_KEY, offer["token"])
        except Exception as error:  # noqa: BLE001 (whatever it is, every rank must hear of it)
            where = f"{user_address or '*'}:{user_port or 0}"
            offer["error"] = f"rank 0 (host {host['name']}) cannot listen at {where}: {_describe(error)}"
    offers = _all_gather(extension, offer, deadline, "rank 0's address and port")
    first = offers[0]
    if "error" in first:
        raise RendezvousError(f"chimera.torch rendezvous failed: {first['error']}")
    port = int(first["port"])
    addresses = list(first["addresses"])
    error = None
    if rank == 0:
        address, store = (addresses[0] if addresses else "127.0.0.1"), listener
    else:
        same_host = (host["boot"], host["net"]) == (first["host"]["boot"], first["host"]["net"])
        if same_host and user_address is None:
            addresses.append("127.0.0.1")
        address, store = None, None
        try:
            address, store = _connect(addresses, port, first.get("token"), size, timeout, deadline)
        except Exception as failure:  # noqa: BLE001
            error = (f"rank {rank} (host {host['name']}) cannot reach rank 0 (host {first['host']['name']}) at port "
                     f"{port}: {_describe(failure)}")
    verdicts = _all_gather(extension, {"error": error}, deadline, "every rank's connection to rank 0")
    if rank == 0 and not make_store:
        listener.close()  # torch's env:// rendezvous binds the port again
    failed = [(r, v["error"]) for r, v in enumerate(verdicts) if v.get("error")]
    if failed:
        listed = "; ".join(message for _, message in failed[:4]) + ("; ..." if len(failed) > 4 else "")
        raise RendezvousError(f"chimera.torch rendezvous failed on rank(s) "
                              f"{', '.join(str(r) for r, _ in failed)} of {size}: {listed}")
    return Rendezvous(rank, size, _local_rank(rank, [o["host"] for o in offers]), address, port, store)


def _user_port() -> int | None:
    text = os.environ.get("MASTER_PORT", "").strip()
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise chimera.InvalidArgument(f"MASTER_PORT={text!r}: expected a port number in [1, 65535]")
    return int(text)


def _listen(user_address: str | None, user_port: int | None, size: int, timeout: datetime.timedelta,
            make_store: bool):
    """Rank 0: (what listens, the addresses to publish, the port). The store (make_store) or a plain
    socket listens on every interface, as torch's TCPStore does."""
    if user_address is not None:
        _check_local(user_address, f"MASTER_ADDR={user_address} is not an address of this host")
        addresses = [user_address]
    else:
        addresses = _addresses()
    if make_store:
        store = dist.TCPStore(user_address or "127.0.0.1", user_port or 0, size, is_master=True, timeout=timeout,
                              wait_for_workers=False)
        return store, addresses, int(store.port)
    listener = _socket_listening(user_port or 0)
    return listener, addresses, int(listener.getsockname()[1])


def _socket_listening(port: int) -> socket.socket:
    """A TCP socket listening on every interface (IPv6 and IPv4 where the host has IPv6) at `port`."""
    try:
        listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        family_address = ("::", port)
    except OSError:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        family_address = ("0.0.0.0", port)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore binds
        listener.bind(family_address)
        listener.listen(socket.SOMAXCONN)
    except OSError:
        listener.close()
        raise
    return listener


def _connect(addresses: list[str], port: int, token: str | None, size: int, timeout: datetime.timedelta,
             deadline: float):
    """(the first of `addresses` at which rank 0 answers at `port`, the store there when `token` is
    given: the one that holds it)."""
    if not addresses:
        raise RendezvousError("rank 0's host has no address but loopback, and this rank is on another host "
                              "(set MASTER_ADDR)")
    tried = []
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            tried.append(f"{address}: not tried, the timeout passed")
            break
        try:
            socket.create_connection((address, port), timeout=min(left, CONNECT_TIMEOUT_S)).close()
        except OSError as error:
            tried.append(f"{address}: {_describe(error)}")
            continue
        if token is None:
            return address, None
        try:
            store = dist.TCPStore(address, port, size, is_master=False,
                                  timeout=datetime.timedelta(seconds=min(left, CONNECT_TIMEOUT_S)),
                                  wait_for_workers=False)
            if store.check([_TOKEN_KEY]) and store.get(_TOKEN_KEY).decode() == token:
                store.set_timeout(timeout)
                return address, store
            tried.append(f"{address}: the store there is another job's")
        except Exception as error:  # noqa: BLE001
            tried.append(f"{address}: {_describe(error)}")
    raise RendezvousError("tried " + "; ".join(tried))


def _all_gather(extension, mine: dict, deadline: float, what: str) -> list[dict]:
    left_ms = max(1, int((deadline - time.monotonic()) * 1000))
    gathered = extension.mpi_all_gather_bytes(json.dumps(mine).encode(), left_ms, f"chimera.torch rendezvous ({what})")
    return [json.loads(g) for g in gathered]


def _host() -> dict:
    """This process's host name, boot id and network namespace: ranks with the boot id and network
    namespace of rank 0 reach it on loopback too; ranks with its name and boot id share its host."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
    except OSError:
        boot = None
    try:
        net = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        net = None
    return {"name": socket.gethostname(), "boot": boot, "net": net}


def _local_rank(rank: int, hosts: list[dict]) -> int:
    for key in _LOCAL_RANK:
        value = os.environ.get(key, "")
        if value.isdigit():
            return int(value)
    mine = (hosts[rank]["name"], hosts[rank]["boot"])
    return sum(1 for h in hosts[:rank] if (h["name"], h["boot"]) == mine)


def _addresses() -> list[str]:
    """This host's addresses other hosts may reach it at, best first: those its host name resolves
    to, then every interface's (IPv4, then global IPv6); never loopback or link-local, and only
    addresses this host holds."""
    found = []
    try:
        found += [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)]
    except OSError:
        pass
    for _, name in socket.if_nameindex():
        found += _ipv4_of(name)
    found += _ipv6_global()
    usable = []
    for address in found:
        parsed = ipaddress.ip_address(address.split("%")[0])
        if parsed.is_loopback or parsed.is_link_local or parsed.is_unspecified or address in usable:
            continue
        try:
            _check_local(address, "")
        except OSError:
            continue
        usable.append(address)
    return usable


def _ipv4_of(interface: str) -> list[str]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            answer = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", interface.encode()[:15]))
        except OSError:  # no IPv4 address
            return []
    return [socket.inet_ntoa(answer[20:24])]


def _ipv6_global() -> list[str]:
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            rows = [line.split() for line in f]
    except OSError:
        return []
    return [str(ipaddress.IPv6Address(bytes.fromhex(row[0]))) for row in rows if len(row) >= 4 and row[3] == "00"]


def _check_local(address: str, what: str) -> None:
    """OSError (with `what` in front) unless this host holds `address` (a socket can bind it)."""
    try:
        infos = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)
        family, _, _, _, sockaddr = infos[0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind(sockaddr)
    except OSError as error:
        raise OSError(error.errno, f"{what}: {error.strerror or error}" if what else str(error)) from error


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"
