# SPDX-License-Identifier: Apache-2.0
"""One rank of a bad-argument run on the torch entry points (driven by run_faults.py, as
fault_rank is): the chimera process group, chimera's Backend over the launch's host transport
(chimera.torch.backend.mesh_backend), DTensor redistribution through chimera.torch and
chimera.torch.moe. The last rank alone passes a bad argument to one call; each rank writes
OUTDIR/rank<R>.txt as fault_rank does (code, ms, call_ms, next, next_ms, data, message; `data`: whether
the next good call's result was right, where the mode checks it), then waits (bounded) for the
others' reports and leaves with os._exit. Started by mpiexec (the MPI
transport) or torchrun (the gloo transport) alike.

Usage: bad_args_torch.py MODE OUTDIR LINGER_MS"""
import os
import sys
import time

import torch
import torch.distributed as dist

import chimera
import chimera.torch as ct
from chimera.torch.backend import mesh_backend


def code_of(error):
    """The status code a report names for `error` (the words fault_rank writes)."""
    if error is None:
        return "ok"
    # chimera's Python bindings raise ValueError for a tensor that fails their own checks.
    for cls, name in ((chimera.InvalidArgument, "invalid"), (ValueError, "invalid"), (chimera.Mismatch, "mismatch"),
                      (chimera.Timeout, "timeout")):
        if isinstance(error, cls):
            return name
    # The first code named: a message may quote another rank's error after its own code (a
    # receive's Mismatch quotes its sender's InvalidArgument).
    text = str(error).lower()
    found = [(text.find(word), name) for word, name in (("invalid argument", "invalid"), ("mismatch", "mismatch"),
                                                        ("timeout", "timeout")) if word in text]
    return min(found)[1] if found else type(error).__name__.lower()


def attempt(call):
    """(the error `call` raised or None, the data verdict it returned: True, False or None for
    a mode that does not check its result)."""
    try:
        return None, call()
    except Exception as error:  # noqa: BLE001 - every failure is reported, none may escape
        return error, None


def all_reduce(bad):
    # The rank at fault's tensor has one element more than its peers': the counts differ.
    tensor = torch.ones(16 + (1 if bad else 0))
    dist.all_reduce(tensor)
    return bool((tensor == dist.get_world_size()).all())


def root_tensor():
    """16 zeros, ones on rank 0 (the root of the broadcasts below)."""
    return torch.full((16,), 1.0 if dist.get_rank() == 0 else 0.0)


def broadcast(bad):
    # The rank at fault names a source rank outside the group (the process group's own check).
    tensor = root_tensor()
    dist.broadcast(tensor, src=dist.get_world_size() if bad else 0)
    return bool((tensor == 1).all())


_MESH_BACKEND: dict = {}


def world_backend():
    """chimera's Backend over every rank (mesh dp=N), made once, on the launch's transport."""
    if "backend" not in _MESH_BACKEND:
        _MESH_BACKEND["backend"] = mesh_backend(f"dp={dist.get_world_size()}", range(dist.get_world_size()))
    return _MESH_BACKEND["backend"]


def backend_broadcast(bad):
    # The Backend's own check: a root outside the group of dist.get_world_size() ranks.
    tensor = root_tensor()
    world_backend().broadcast(tensor, root=dist.get_world_size() if bad else 0)
    return bool((tensor == 1).all())


def backend_all_reduce(bad):
    # The binding's tensor check before the Backend is called (a non-contiguous tensor): the
    # rank refuses the collective (Backend::refuseCollective).
    tensor = torch.ones((4, 4))
    world_backend().all_reduce(tensor.t() if bad else tensor)
    return bool((tensor == dist.get_world_size()).all())


def backend_axes(bad):
    # Axes that name no axis of the mesh: the rank at fault cannot tell which group its peers
    # wait in, so it announces its failure to every rank (a fault notice: on the MPI transport a
    # message, on the gloo mesh backend a record in the store) and stands in for the peers'
    # agreement round; the next call works everywhere.
    tensor = torch.ones(16)
    world_backend().all_reduce(tensor, axes="tp" if bad else "dp")
    return bool((tensor == dist.get_world_size()).all())


def all_gather(bad):
    rank, size = dist.get_rank(), dist.get_world_size()
    out = torch.empty(size * 16 - (1 if bad else 0))
    dist.all_gather_into_tensor(out, torch.full((16,), float(rank)))


def reduce_scatter(bad):
    size = dist.get_world_size()
    out = torch.empty(16 + (1 if bad else 0))
    dist.reduce_scatter_tensor(out, torch.ones(size * 16))


def gather(bad):
    # The last rank is the root; as the root it passes a gather_list whose last tensor is one element short.
    rank, size = dist.get_rank(), dist.get_world_size()
    root = size - 1
    outs = [torch.empty(16) for _ in range(size)] if rank == root else None
    if bad:
        outs[-1] = torch.empty(15)
    dist.gather(torch.full((16,), float(rank)), outs, dst=root)


def scatter(bad):
    # The last rank is the root; as the root it passes a scatter_list whose first tensor is one element long.
    rank, size = dist.get_rank(), dist.get_world_size()
    root = size - 1
    ins = [torch.full((16,), float(r)) for r in range(size)] if rank == root else None
    if bad:
        ins[0] = torch.zeros(17)
    dist.scatter(torch.empty(16), ins, src=root)


def all_to_all(bad):
    # The rank at fault passes one input tensor too few.
    rank, size = dist.get_rank(), dist.get_world_size()
    ins = [torch.full((4,), float(rank)) for _ in range(size - (1 if bad else 0))]
    dist.all_to_all([torch.empty(4) for _ in range(size)], ins)


def all_to_all_single(bad):
    # Uneven splits (peer j gets j + 1 rows); the rank at fault's input splits sum to one row more than its input has.
    rank, size = dist.get_rank(), dist.get_world_size()
    splits = [j + 1 for j in range(size)]
    out = torch.empty((size * (rank + 1), 2))
    inp = torch.full((sum(splits), 2), float(rank))
    in_splits = list(splits)
    if bad:
        in_splits[0] += 1
    dist.all_to_all_single(out, inp, [rank + 1] * size, in_splits)


def dtensor(bad):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    size = dist.get_world_size()
    mesh = init_device_mesh("cpu", (size,))
    local = torch.ones((4 - (1 if bad else 0), 8))
    d = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size((4 * size, 8)),
                           stride=(8, 1))
    ct.redistribute(d, [Replicate()])


def send(bad):
    """Pairs of ranks (2k, 2k + 1): the odd rank sends, the even one receives; the last rank
    sends with a tag out of range, which its partner's receive must learn at once."""
    rank = dist.get_rank()
    if rank % 2:
        dist.send(torch.full((16,), float(rank)), rank - 1, tag=-1 if bad else 3)
    else:
        got = torch.empty(16)
        dist.recv(got, rank + 1, tag=3)
        if not torch.equal(got, torch.full((16,), float(rank + 1))):
            raise RuntimeError(f"recv from rank {rank + 1}: wrong data {got[:2].tolist()}")


def backend_send(bad):
    """Pairs as in `send`, on chimera's Backend: the last rank sends a transposed (non-contiguous)
    tensor, which the binding's check refuses (Backend::refuseTransfers: its partner's manifest
    exchange learns it)."""
    rank = dist.get_rank()
    if rank % 2:
        tensor = torch.full((4, 4), float(rank))
        world_backend().send(tensor.t() if bad else tensor, rank - 1)
        return True
    got = torch.empty((4, 4))
    world_backend().recv(got, rank + 1)
    return bool((got == rank + 1).all())


def moe_inputs(size):
    from chimera.torch import moe  # noqa: F401 - imported with the mode

    tokens = 6
    x = torch.ones((tokens, 4))
    idx = torch.stack([torch.tensor([t % (2 * size), (t + 1) % (2 * size)]) for t in range(tokens)])
    w = torch.full((tokens, 2), 0.5)
    return x, idx, w


def moe_top_k(bad):
    from chimera.torch import moe

    size = dist.get_world_size()
    x, idx, w = moe_inputs(size)
    if bad:  # K = 0 against the peers' K = 2
        idx, w = idx[:, :0], w[:, :0]
    moe.dispatch(x, idx, w, 2 * size)


def moe_replicated_id(bad):
    from chimera.torch import moe

    size = dist.get_world_size()
    x, idx, w = moe_inputs(size)
    if bad:
        idx = idx.clone()
        idx[-1, 0] = 2 * size
    moe.dispatch(x, idx, w, 2 * size, mesh=f"tp=2,ep={size // 2}", group="ep", layout="tp=R", program="fused")


MODES = {
    "bad-torch-allreduce": all_reduce,
    "bad-torch-broadcast": broadcast,
    "bad-backend-broadcast": backend_broadcast,
    "bad-backend-allreduce": backend_all_reduce,
    "bad-backend-axes": backend_axes,
    "bad-backend-send": backend_send,
    "bad-torch-allgather": all_gather,
    "bad-torch-reducescatter": reduce_scatter,
    "bad-torch-gather": gather,
    "bad-torch-scatter": scatter,
    "bad-torch-alltoall": all_to_all,
    "bad-torch-alltoall-single": all_to_all_single,
    "bad-torch-send": send,
    "bad-dtensor": dtensor,
    "bad-moe-topk": moe_top_k,
    "bad-moe-replicated-id": moe_replicated_id,
}


def main():
    mode, out, linger_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    start = time.monotonic()
    ct.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    call = MODES[mode]
    warm, _ = attempt(lambda: call(False))  # the groups, exchanges and plans of the good call exist
    bad = rank == size - 1
    begin = time.monotonic()
    error = attempt(lambda: call(bad))[0] if warm is None else warm
    call_ms = (time.monotonic() - begin) * 1000
    begin = time.monotonic()
    following, correct = attempt(lambda: call(False)) if warm is None else (warm, None)
    next_ms = (time.monotonic() - begin) * 1000
    message = " ".join(str(error).split()) if error is not None else ""
    data = "-" if correct is None else ("ok" if correct else "wrong")
    line = (f"code={code_of(error)} ms={int((time.monotonic() - start) * 1000)} call_ms={int(call_ms)} "
            f"next={'ok' if following is None else 'failed'} next_ms={int(next_ms)} data={data} message={message}\n")
    path = os.path.join(out, f"rank{rank}.txt")
    with open(path + ".tmp", "w") as f:
        f.write(line)
    os.rename(path + ".tmp", path)
    deadline = time.monotonic() + linger_ms / 1000
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(out, f"rank{r}.txt")) for r in range(size)):
            break
        time.sleep(0.02)
    sys.stdout.flush()
    os._exit(0 if error is None else 1)


if __name__ == "__main__":
    main()
