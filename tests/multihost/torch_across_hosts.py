# SPDX-License-Identifier: Apache-2.0
"""chimera's torch backend across hosts, against gloo on the same ranks: the collectives, DTensor
redistributions through chimera.torch.redistribute, and chimera.torch.moe dispatch/combine (forward
and backward) against the per-(token, expert) all-to-all on gloo, every result compared exactly.

One process per rank, under mpirun (``chimera.torch.init_process_group()``: the MPI rendezvous,
nothing set by hand) or torchrun (``init_process_group("chimera")`` from torchrun's variables).
Every rank exits 1 when a check failed on any rank; rank 0 prints a summary line naming the hosts.
"""

from __future__ import annotations

import os
import socket
import sys

import torch
import torch.distributed as dist

import chimera.torch as ct
from chimera.torch import moe_routings
from chimera.torch.moe_baselines import ChimeraDispatcher, PerExpertDispatcher


def collectives(rank: int, world: int, gloo) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, chimera's result, gloo's result) of each collective on the same inputs."""
    x = torch.arange(4 * world * 3, dtype=torch.float64).reshape(4 * world, 3) + 1000 * rank
    out = []

    def both(name, run):
        out.append((name, run(None), run(gloo)))

    def all_reduce(group):
        t = x.clone()
        dist.all_reduce(t, group=group)
        return t

    def reduce_scatter(group):
        t = torch.empty(4, 3, dtype=x.dtype)
        dist.reduce_scatter_tensor(t, x, group=group)
        return t

    def all_gather(group):
        t = torch.empty(4 * world * world, 3, dtype=x.dtype)
        dist.all_gather_into_tensor(t, x, group=group)
        return t

    def all_to_all(group):
        t = torch.empty_like(x)
        dist.all_to_all_single(t, x, group=group)
        return t

    def all_to_all_uneven(group):
        # rank r sends (r + j) % 3 + 1 rows to rank j
        send = [(rank + j) % 3 + 1 for j in range(world)]
        recv = [(j + rank) % 3 + 1 for j in range(world)]
        t = torch.empty(sum(recv), 3, dtype=x.dtype)
        dist.all_to_all_single(t, x[:sum(send)], recv, send, group=group)
        return t

    def broadcast(group):
        t = x.clone()
        dist.broadcast(t, src=world - 1, group=group)
        return t

    def send_recv(group):
        t = torch.empty_like(x)
        ops = [dist.P2POp(dist.isend, x, (rank + 1) % world, group=group),
               dist.P2POp(dist.irecv, t, (rank - 1) % world, group=group)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return t

    for name, run in [("all_reduce", all_reduce), ("reduce_scatter_tensor", reduce_scatter),
                      ("all_gather_into_tensor", all_gather), ("all_to_all_single", all_to_all),
                      ("all_to_all_single uneven", all_to_all_uneven), ("broadcast", broadcast),
                      ("isend/irecv ring", send_recv)]:
        both(name, run)
    return out


def redistributions(rank: int, world: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(transition, chimera's local result, the exact local result) on a 2 x world/2 mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    full = torch.arange(8 * 12, dtype=torch.float64).reshape(8, 12) % 13 - 6
    out = []
    for source, target in [((Shard(0), Shard(1)), (Replicate(), Replicate())),
                           ((Shard(0), Replicate()), (Replicate(), Shard(1))),
                           ((Replicate(), Shard(1)), (Shard(1), Shard(0)))]:
        d = distribute_tensor(full, mesh, list(source))
        got = ct.redistribute(d, list(target)).to_local()
        want = distribute_tensor(full, mesh, list(target)).to_local()
        out.append((f"{source} -> {target}", got, want))
    # Partial sums over tp: each tp rank holds (its tp index + 1) x the tensor.
    tp_index = mesh.get_local_rank("tp")
    d = DTensor.from_local(full * (tp_index + 1), mesh, [Replicate(), Partial()], run_check=False)
    got = ct.redistribute(d, [Replicate(), Shard(0)]).to_local()
    tp = world // 2
    want = (full * (tp * (tp + 1) // 2)).chunk(tp, dim=0)[tp_index]
    out.append(("(Replicate, Partial) -> (Replicate, Shard(0))", got, want))
    return out


def moe(rank: int, world: int, gloo) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """chimera.torch.moe against the per-(token, expert) all-to-all on gloo: every output of one
    forward and backward step (received rows, ids, weights, counts, y, grad x, grad weights), as
    the planner decides and fused (across hosts: once per destination host, forward and
    backwards, its sums exact on these values)."""
    experts, topk, tokens, hidden = 2 * world, 2, 12, 8
    idx, weights = moe_routings.routing("uniform", tokens, experts, topk, seed=7, rank=rank)
    x = moe_routings.tokens(tokens, hidden, seed=7, rank=rank)
    grad_y = moe_routings.tokens(tokens, hidden, seed=8, rank=rank)
    want = moe_routings.forward_backward(PerExpertDispatcher(experts, gloo), x, idx, weights, grad_y)
    names = ["recv_x", "recv_expert", "recv_weight", "tokens_per_expert", "y", "grad_x", "grad_weights"]
    out = []
    for program in ("planned", "fused"):
        got = moe_routings.forward_backward(ChimeraDispatcher(experts, program), x, idx, weights, grad_y)
        out += [(f"moe {program} {n}", g, w) for n, g, w in zip(names, got, want)]
    # On the MPI transport, which knows where the ranks run, fused runs once per destination host
    # (its backwards too) wherever the ranks span hosts: a launch whose topology missed the hosts
    # would otherwise pass on the once-per-rank program. (The gloo transport of a torchrun launch
    # reports one host, so its exchange runs once per rank.)
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname(), group=gloo)
    if ct.backend.transport(world) == "mpi":
        handle = ChimeraDispatcher(experts, "fused").dispatch(x, idx, weights)[4]
        out.append(("moe fused once per host", torch.tensor(handle.exchange.once_per_host),
                    torch.tensor(len(set(hosts)) > 1)))
    return out


def main() -> int:
    if "TORCHELASTIC_RUN_ID" in os.environ:
        dist.init_process_group("chimera")
    else:
        ct.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    checks = collectives(rank, world, gloo) + redistributions(rank, world) + moe(rank, world, gloo)
    failed = [name for name, got, want in checks
              if got.shape != want.shape or got.dtype != want.dtype or not torch.equal(got, want)]
    for name in failed:
        print(f"rank {rank} ({socket.gethostname()}): {name} differs from gloo's", flush=True)
    verdict = torch.tensor([len(failed)], dtype=torch.int64)
    dist.all_reduce(verdict, group=gloo)
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname(), group=gloo)
    if rank == 0:
        transport = ct.backend.transport(world)
        print(f"torch across hosts ({transport} transport, ranks on {' '.join(hosts)}): {len(checks)} checks per "
              f"rank, {int(verdict.item())} failed", flush=True)
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 0 if verdict.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
