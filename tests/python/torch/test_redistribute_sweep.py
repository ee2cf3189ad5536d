# SPDX-License-Identifier: Apache-2.0
# Fused DTensor redistribution on 8 ranks against DTensor's own, on seeded random cases: 1-D, 2-D
# and 3-D meshes, tensors of 1 to 3 dims (some of them not divisible by their shards, which
# chimera leaves to DTensor), sources with Shard, Replicate and Partial (sum, max, min) over any
# mesh dim, targets with Shard and Replicate. Equal local tensors and placements, exact (small
# integers); every case with even shards and a change of placement is planned by chimera.
import random

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

import chimera.torch as ct

from conftest import agree

MESHES = [(8,), (2, 4), (4, 2), (2, 2, 2)]
CASES = 32
_meshes = {}


def _mesh(shape):
    if shape not in _meshes:
        _meshes[shape] = init_device_mesh("cpu", shape, mesh_dim_names=tuple(f"m{i}" for i in range(len(shape))))
    return _meshes[shape]


def _even(shape, placements, mesh_shape):
    """Whether every sharded tensor dim divides by the product of the mesh dims sharding it."""
    ways = [1] * len(shape)
    for p, n in zip(placements, mesh_shape):
        if isinstance(p, Shard):
            ways[p.dim] *= n
    return all(size % w == 0 for size, w in zip(shape, ways))


@pytest.mark.parametrize("case", range(CASES))
def test_random_transition_matches_dtensor(world, case):
    _, size, gloo = world
    if size != 8:
        pytest.skip("the meshes are of 8 ranks")
    rnd = random.Random(500 + case)
    mesh_shape = MESHES[case % len(MESHES)]
    mesh = _mesh(mesh_shape)
    shape = tuple(rnd.choice([4, 8, 16, 24, 6] if case % 5 else [5, 6, 8]) for _ in range(rnd.choice([1, 2, 3])))

    reduce_op = rnd.choice(["sum", "sum", "max", "min"])  # DTensor takes one Partial op per placement list

    def placement(partial_ok):
        c = rnd.random()
        if c < 0.3:
            return Replicate()
        if c < 0.45 and partial_ok:
            return Partial(reduce_op)
        return Shard(rnd.randrange(len(shape)))

    src = tuple(placement(True) for _ in mesh_shape)
    dst = tuple(placement(False) for _ in mesh_shape)
    dtype = rnd.choice([torch.float32, torch.float64, torch.int64])
    full = (torch.arange(int(torch.tensor(shape).prod())) % 13 - 6).reshape(shape).to(dtype)
    base = distribute_tensor(full, mesh, [Replicate() if isinstance(p, Partial) else p for p in src])
    local = base.to_local().clone()
    coord = mesh.get_coordinate()
    # Partial sums: the value on coordinate 0 of every sum dim, 0 elsewhere; max and min: the
    # value everywhere. Both reduce to `full` in any order.
    if any(isinstance(p, Partial) and p.reduce_op == "sum" and coord[i] != 0 for i, p in enumerate(src)):
        local = torch.zeros_like(local)
    d = DTensor.from_local(local, mesh, src, run_check=False, shape=base.shape, stride=base.stride())
    want = d.redistribute(mesh, dst)
    ct.reset_stats()
    with ct.fused_redistribute():
        got = d.redistribute(mesh, dst)
    planned = ct.stats()["planned"]
    ok = got.placements == want.placements and torch.equal(got.to_local(), want.to_local())
    if _even(shape, src, mesh_shape) and _even(shape, dst, mesh_shape) and src != dst:
        ok = ok and planned == 1
    agree(ok, gloo, f"case {case}: mesh {mesh_shape} {shape} {dtype} {src} -> {dst} (planned {planned})")
