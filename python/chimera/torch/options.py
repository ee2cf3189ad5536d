# SPDX-License-Identifier: Apache-2.0
"""The options of chimera's torch.distributed backend, and the environment variables that set them.

``chimera.torch.Options`` is what torch hands a backend as ``pg_options`` / ``backend_options``::

    dist.init_process_group("chimera", pg_options=chimera.torch.Options(timeout=timedelta(seconds=30)))
    dist.new_group(ranks, backend="chimera", pg_options=chimera.torch.Options(abort_on_timeout=False))

Every field left ``None`` takes the value of its environment variable when that is set, else its
default. A variable that is set **overrides** the field (it is the launcher's word on a script's
choice, as ``CHIMERA_TIMEOUT_MS`` always was):

=============================== ======================== =============================================
field                           variable                 default
=============================== ======================== =============================================
``timeout`` (timedelta)         ``CHIMERA_TIMEOUT_MS``   the ``timeout`` torch gives the group
                                (1..604800000)           (``init_process_group`` / ``new_group``'s)
``abort_on_timeout`` (bool)     ``CHIMERA_ABORT_ON_``    ``True``: a Timeout on the MPI transport or
                                ``TIMEOUT`` (0/1)        NCCL ends the job
``transport`` (``"mpi"`` /      ``CHIMERA_TORCH_``       ``"mpi"`` when MPI launched the whole world,
``"gloo"``)                     ``TRANSPORT``            else ``"gloo"``
``redistribute`` (bool)         ``CHIMERA_TORCH_``       ``False``; ``True`` routes every DTensor
                                ``REDISTRIBUTE`` (0/1)   redistribution through chimera
=============================== ======================== =============================================

The variables are read once, at ``import chimera.torch`` (``ENVIRONMENT``), and checked there: a
malformed value raises ``ValueError`` naming the variable and what it accepts.
"""

from __future__ import annotations

import dataclasses
import datetime
import os

# The largest timeout: one week (chimera's backends add it to the clock; it must not overflow).
MAX_TIMEOUT_MS = 7 * 24 * 3600 * 1000
# The timeout of chimera's own Backend over a mesh (mesh_backend) when CHIMERA_TIMEOUT_MS is not
# set: ten minutes, the default of chimera's MPI and NCCL backends (MpiBackendOptions::timeoutMs).
MESH_DEFAULT_TIMEOUT = datetime.timedelta(minutes=10)
TRANSPORTS = ("mpi", "gloo")
_SWITCH = {"0": False, "off": False, "false": False, "1": True, "on": True, "true": True}


def _timeout(value: datetime.timedelta, what: str) -> datetime.timedelta:
    if not isinstance(value, datetime.timedelta):
        raise TypeError(f"{what}: a datetime.timedelta, got {type(value).__name__}")
    ms = value // datetime.timedelta(milliseconds=1)
    if not 1 <= ms <= MAX_TIMEOUT_MS:
        raise ValueError(f"{what}={value}: expected 1 ms to one week")
    return datetime.timedelta(milliseconds=ms)


def _transport(value: str, what: str) -> str:
    if value not in TRANSPORTS:
        raise ValueError(f"{what}={value!r}: expected 'mpi' or 'gloo'")
    return value


@dataclasses.dataclass(frozen=True)
class Options:
    """The options of one chimera process group (see the module's table). ``None``: not set."""

    timeout: datetime.timedelta | None = None
    abort_on_timeout: bool | None = None
    transport: str | None = None
    redistribute: bool | None = None

    def __post_init__(self) -> None:
        if self.timeout is not None:
            object.__setattr__(self, "timeout", _timeout(self.timeout, "Options.timeout"))
        for name in ("abort_on_timeout", "redistribute"):
            if getattr(self, name) not in (None, True, False):
                raise TypeError(f"Options.{name}: True, False or None, got {getattr(self, name)!r}")
        if self.transport is not None:
            _transport(self.transport, "Options.transport")

    def over(self, other: Options) -> Options:
        """These options, with the fields left None taken from ``other``."""
        mine = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dataclasses.replace(other, **{name: value for name, value in mine.items() if value is not None})


def _read_environment(environ=os.environ) -> Options:
    """The options the environment variables set, checked (ValueError naming a malformed one)."""
    def text(value: str | None) -> str | None:
        value = (value or "").strip()
        return value or None

    def switch(name: str, value: str | None) -> bool | None:
        value = text(value)
        if value is None:
            return None
        if value.lower() not in _SWITCH:
            raise ValueError(f"{name}={value!r}: expected 0/1, on/off or true/false")
        return _SWITCH[value.lower()]

    timeout = None
    if (value := text(environ.get("CHIMERA_TIMEOUT_MS"))) is not None:
        if not value.isdigit() or not 1 <= int(value) <= MAX_TIMEOUT_MS:
            raise ValueError(f"CHIMERA_TIMEOUT_MS={value!r}: expected a number of milliseconds in 1..{MAX_TIMEOUT_MS}")
        timeout = datetime.timedelta(milliseconds=int(value))
    transport = text(environ.get("CHIMERA_TORCH_TRANSPORT"))
    if transport is not None:
        transport = _transport(transport.lower(), "CHIMERA_TORCH_TRANSPORT")
    return Options(timeout=timeout,
                   abort_on_timeout=switch("CHIMERA_ABORT_ON_TIMEOUT", environ.get("CHIMERA_ABORT_ON_TIMEOUT")),
                   transport=transport,
                   redistribute=switch("CHIMERA_TORCH_REDISTRIBUTE", environ.get("CHIMERA_TORCH_REDISTRIBUTE")))


# What the environment sets, read once at import.
ENVIRONMENT = _read_environment()


def resolve(options: object | None, torch_timeout: datetime.timedelta | None) -> Options:
    """The options a group runs with: the environment over ``options`` (an ``Options`` or None;
    TypeError for anything else) over the defaults, the timeout's being ``torch_timeout`` (torch's
    default_pg_timeout when None; at most one week). ``transport`` stays None when nothing sets
    it (backend.transport chooses)."""
    if options is None:
        options = Options()
    if not isinstance(options, Options):
        raise TypeError(f"the chimera backend takes chimera.torch.Options as pg_options, got {type(options).__name__}")
    if torch_timeout is None:
        from torch.distributed.constants import default_pg_timeout as torch_timeout
    torch_timeout = min(torch_timeout, datetime.timedelta(milliseconds=MAX_TIMEOUT_MS))
    defaults = Options(timeout=torch_timeout, abort_on_timeout=True, redistribute=False)
    return ENVIRONMENT.over(options.over(defaults))
