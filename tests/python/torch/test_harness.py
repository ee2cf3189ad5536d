# SPDX-License-Identifier: Apache-2.0
"""The chimera backend in PyTorch's own multi-process test harness (``MultiProcessTestCase``,
which torch 2.15 starts by spawn; older versions forked): no mpirun, no torchrun, each test's
ranks started by this process and joined through a FileStore, as PyTorch's c10d tests run. Run
as a script:

    python test_harness.py

Each test checks its results on every rank against values computed locally or on a gloo group
over the same ranks (the ``agree`` of the other torch tests).
"""

import os
import sys
import unittest

import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcessTestCase

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chimera.torch as ct  # noqa: E402  registers the backend "chimera"
from chimera.torch import moe  # noqa: E402

from conftest import agree  # noqa: E402
from test_moe import _check_case  # noqa: E402


class ChimeraHarnessRanks(MultiProcessTestCase):
    @property
    def world_size(self) -> int:
        return 4

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def tearDown(self):
        super().tearDown()
        try:
            os.remove(self.file_name)
        except OSError:
            pass

    def _init(self):
        """The default group on chimera from the harness's FileStore; a gloo group over the same
        ranks for the verdicts."""
        store = dist.FileStore(self.file_name, self.world_size)
        dist.init_process_group("chimera", store=store, rank=self.rank, world_size=self.world_size)
        return dist.new_group(backend="gloo")

    def test_collectives_and_any_source_recv(self):
        gloo = self._init()
        n, r = self.world_size, self.rank
        t = torch.arange(6, dtype=torch.float32) + r
        dist.all_reduce(t)
        ok = torch.equal(t, 4 * torch.arange(6, dtype=torch.float32) + sum(range(n)))
        # Uneven all_to_all_single: rank r sends j + 1 rows of value 10 r + j to rank j.
        send = torch.cat([torch.full((j + 1, 2), 10.0 * r + j) for j in range(n)])
        recv = torch.empty(((r + 1) * n, 2))
        dist.all_to_all_single(recv, send, [(r + 1)] * n, [j + 1 for j in range(n)])
        ok = ok and torch.equal(recv, torch.cat([torch.full((r + 1, 2), 10.0 * s + r) for s in range(n)]))
        # recv from any source: rank 0 takes one message from each other rank, in any order.
        if r == 0:
            senders = set()
            for _ in range(n - 1):
                got = torch.empty(1)
                src = dist.recv(got)
                senders.add(src)
                ok = ok and got.item() == 100.0 * src
            ok = ok and senders == set(range(1, n))
        else:
            dist.send(torch.tensor([100.0 * r]), 0)
        agree(ok, gloo, "collectives and any-source recv in the harness")
        dist.destroy_process_group()

    def test_routed_moe_dispatch_and_combine(self):
        """chimera.torch.moe on the gloo mesh backend bootstrapped from the harness's store:
        forward and gradients equal the one-process reference, several programs and shapes."""
        gloo = self._init()
        world = (self.rank, self.world_size, gloo)
        n = self.world_size
        _check_case(world, 2 * n, 2, 8, seed=61)
        _check_case(world, n, 1, 8, seed=62, program="per_expert")
        _check_case(world, 4 * n, 3, 5, seed=63, program="fused")
        names = {backend.name for backend in moe._BACKENDS.values()}
        agree(names == {"gloo"}, gloo, f"moe ran on {names}, not the gloo mesh backend")
        dist.destroy_process_group()

    def test_fused_redistribute_on_a_sub_mesh(self):
        """DTensor redistributions on a 2 x 2 mesh's sub-mesh go through chimera inside
        fused_redistribute() and give DTensor's own values."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        gloo = self._init()
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        full = torch.arange(8 * 6, dtype=torch.float64).reshape(8, 6)
        d = distribute_tensor(full, mesh["tp"], [Shard(0)])
        before = ct.stats()["planned"]
        with ct.fused_redistribute():
            r = d.redistribute(mesh["tp"], [Replicate()])
            s = r.redistribute(mesh["tp"], [Shard(1)])
        planned = ct.stats()["planned"] - before
        ok = torch.equal(r.to_local(), full) and torch.equal(s.full_tensor(), full) and planned >= 2
        agree(ok, gloo, f"fused redistribute in the harness: {planned} planned")
        dist.destroy_process_group()


if __name__ == "__main__":
    unittest.main()  # not torch's run_tests, which wants xmlrunner when CI is set
