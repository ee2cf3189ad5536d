# SPDX-License-Identifier: Apache-2.0
"""torchtitan's llama3 debug model trained on CPU: the chimera process group with
``chimera.torch.fused_redistribute()``, then the same run on gloo, from the same seed.

    mpirun -np 8 python examples/torchtitan/train.py --steps 10 --json out.json

Mesh by default ``pp=2, dp_shard=2, tp=2`` (the product must be the number of ranks), torchtitan's
``full_dtensor`` SPMD backend (parameters, activations and inputs are DTensors, so DTensor's
redistributions, explicit and implicit, are what chimera sees). torchtitan is used as shipped:
its Trainer builds the meshes, parallelises the model (FSDP2, TP + SP, pipeline stages), loads
data and steps; the launcher only creates the process group first (torchtitan then keeps it),
points torchtitan at a tokenizer and corpus made locally (assets.py: nothing is downloaded) and
applies the CPU patches of cpu_patches.py. The first run (chimera) is in the MPI processes; each
later one in a fresh process per rank that each MPI rank starts (torchtitan's second Trainer in
one process trips over meshes of the first), without MPI (a chimera run there is on chimera's gloo
transport). Every run meets in the one store of the launch, which MPI rank 0 makes on a free port
(``chimera.torch.rendezvous.mpi_store``), under a prefix of its own, so launches on one host never
collide and the ranks may be on several hosts. ``--backends chimera-unfused`` runs on the chimera process
group with DTensor's own redistributions (fusion off): as the first run of a launch, it is on MPI
as ``chimera`` is in another. ``--json`` writes the losses and step times of each run, the largest
difference of chimera's losses from gloo's and what chimera planned (``chimera.torch.stats()``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path

import cpu_patches

cpu_patches.before_import()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import chimera.torch as ct  # noqa: E402
from chimera.torch import rendezvous  # noqa: E402

# The runs --backends names.
BACKENDS = ("chimera", "chimera-unfused", "gloo")
# The bound of the rendezvous and of every process group's waits.
TIMEOUT = timedelta(minutes=5)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--json", help="write the results here (rank 0)")
    p.add_argument("--pp", type=int, default=2, help="pipeline stages")
    p.add_argument("--dp-shard", type=int, default=2, help="FSDP degree")
    p.add_argument("--tp", type=int, default=2, help="tensor (+ sequence) parallel degree")
    p.add_argument("--model", default="llama3", choices=["llama3", "deepseek_v3"],
                   help="torchtitan's debug model: llama3 (dense) or deepseek_v3 (MoE)")
    p.add_argument("--ep", type=int, default=1, help="expert parallel degree (deepseek_v3; torchtitan takes it "
                   "out of dp_shard x tp)")
    p.add_argument("--schedule", default="Interleaved1F1B", help="torchtitan's pipeline schedule")
    p.add_argument("--layers", type=int, default=6, help="transformer blocks of the debug model (it has 6)")
    p.add_argument("--seq", type=int, default=256, help="sequence length")
    p.add_argument("--batch", type=int, default=4, help="local batch size (sequences per data-parallel rank)")
    p.add_argument("--spmd-backend", default="full_dtensor", choices=["full_dtensor", "spmd_types"],
                   help="torchtitan's SPMD backend (full_dtensor: DTensor redistributions chimera can route)")
    p.add_argument("--backends", default="chimera,gloo",
                   help="runs, in order, of: chimera (its process group, DTensor's redistributions through chimera's "
                        "plans), chimera-unfused (its process group, DTensor's own redistributions), gloo")
    p.add_argument("--max-loss-diff", type=float,
                   help="exit with status 1 when chimera's losses differ from gloo's by more than this, or "
                        "chimera planned no redistribution (a test's verdict)")
    p.add_argument("--verbose", action="store_true", help="torchtitan's own log lines on every rank")
    p.add_argument("--child-result", help=argparse.SUPPRESS)  # a later run's process: rank 0 writes here
    p.add_argument("--child-run", type=int, default=0, help=argparse.SUPPRESS)  # and its index in the launch
    return p.parse_args(argv)


def make_config(args, tokenizer: Path, data: Path, dump: Path):
    """torchtitan's debug-model configuration (llama3 or deepseek_v3), sized and placed for this run."""
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
    if args.model == "llama3":
        from torchtitan.models.llama3.config_registry import llama3_debugmodel as debugmodel
    else:
        from torchtitan.models.deepseek_v3.config_registry import deepseek_v3_debugmodel as debugmodel

    config = debugmodel()
    config.model_spec.model.layers = config.model_spec.model.layers[:args.layers]
    config.hf_assets_path = str(tokenizer)
    config.dump_folder = str(dump)
    config.dataloader = HuggingFaceTextDataLoader.Config(dataset="c4_test", dataset_path=str(data))
    config.training.seq_len = args.seq
    config.training.local_batch_size = args.batch
    config.training.steps = args.steps
    config.training.disable_cuda_graphs = True
    config.training.mixed_precision_param = "float32"
    config.parallelism.data_parallel_shard_degree = args.dp_shard
    config.parallelism.tensor_parallel_degree = args.tp
    config.parallelism.pipeline_parallel_degree = args.pp
    config.parallelism.expert_parallel_degree = args.ep
    config.parallelism.pipeline_parallel_schedule = args.schedule
    config.parallelism.spmd_backend = args.spmd_backend
    config.activation_checkpoint = None
    config.checkpoint.enable = False
    config.validator.enable = False
    config.debug.seed = 0
    config.debug.enable_structured_logging = False
    config.metrics.log_freq = 1
    return config


def train(backend: str, args, assets: tuple[Path, Path], store: dist.Store, run: int) -> dict:
    """One training run on `backend`, the `run`-th of the launch, meeting in `store`; returns its
    per-step losses and step times (all ranks agree)."""
    from torchtitan.trainer import Trainer  # noqa: F401  (imports the whole stack)

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    init = dict(store=dist.PrefixStore(f"run{run}/", store), rank=rank, world_size=world, timeout=TIMEOUT)
    if backend.startswith("chimera"):
        ct.init_process_group(**init)
    else:
        dist.init_process_group(backend, **init)
    config = make_config(args, *assets, Path(tempfile.mkdtemp(prefix=f"titan-{backend}-")))
    losses: dict[int, float] = {}
    step_ms: list[float] = []
    ct.reset_stats()
    routing = ct.fused_redistribute() if backend == "chimera" else contextlib.nullcontext()
    with routing:
        trainer = config.build()
        log, step = trainer.metrics_processor.log, trainer.train_step

        def record_loss(at, global_avg_loss, *rest, **kwargs):
            losses[at] = float(global_avg_loss)
            return log(at, global_avg_loss, *rest, **kwargs)

        def timed_step(*a, **kw):
            start = time.perf_counter()
            out = step(*a, **kw)
            step_ms.append((time.perf_counter() - start) * 1e3)
            return out

        trainer.metrics_processor.log, trainer.train_step = record_loss, timed_step
        try:
            trainer.train()
        finally:
            trainer.close()
    # The last pipeline stage computes the loss; pp is the outermost mesh dim, so the last rank has it.
    loss = torch.tensor([losses.get(s, float("nan")) for s in range(1, args.steps + 1)], dtype=torch.float64)
    dist.broadcast(loss, src=world - 1)
    ms = torch.tensor(step_ms, dtype=torch.float64)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    stats = ct.stats()
    dist.destroy_process_group()
    return {"losses": loss.tolist(), "step_ms": ms.tolist(), "stats": stats}


def run_in_child(backend: str, argv: list[str], found, run: int, work: Path) -> dict:
    """The `run`-th run, on `backend`, in a fresh process for this rank (no MPI: the MPI launcher's
    variables are left out), meeting in the launch's store (`found`: this rank's rendezvous);
    returns rank 0's results (other ranks: {})."""
    result = work / f"{backend}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "OPAL_", "PRTE_"))}
    env.update(found.environment())
    subprocess.run([sys.executable, __file__, *argv, "--backends", backend, "--child-result", str(result),
                    "--child-run", str(run)],
                   env=env, check=True)
    return json.loads(result.read_text()) if found.rank == 0 else {}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    child = args.child_result is not None
    if child:  # a client of the store rank 0's launcher process holds
        found = None
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=TIMEOUT)
    else:
        found = rendezvous.mpi_store(TIMEOUT)
        store = found.store
        os.environ.update(RANK=str(found.rank), WORLD_SIZE=str(found.world_size), LOCAL_RANK=str(found.local_rank))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.pp * args.dp_shard * args.tp != world:
        raise SystemExit(f"pp*dp_shard*tp = {args.pp * args.dp_shard * args.tp}, but {world} ranks")
    work = Path(tempfile.mkdtemp(prefix=f"chimera-titan-{rank}-"))
    # Offline: the corpus is a local folder; datasets and the hub must not look for anything online.
    os.environ.update(HF_HOME=str(work / "hf"), HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
                      HF_DATASETS_DISABLE_PROGRESS_BARS="1")
    warnings.filterwarnings("ignore", message=".*set_vital.*")
    import assets

    local = assets.make(work)

    import torchtitan.trainer  # noqa: F401
    from torchtitan.tools.logging import init_logger, logger

    cpu_patches.after_import()
    init_logger()
    if not args.verbose:
        logger.setLevel("ERROR")
    results = {}
    backends = args.backends.split(",")
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        raise SystemExit(f"--backends: unknown {', '.join(sorted(unknown))} (expected some of {', '.join(BACKENDS)})")
    if child:
        result = train(backends[0], args, local, store, args.child_run)
        if rank == 0:
            Path(args.child_result).write_text(json.dumps(result))
        return 0
    parent_argv = [a for i, a in enumerate(argv) if a != "--backends" and (i == 0 or argv[i - 1] != "--backends")]
    for i, backend in enumerate(backends):
        if i == 0:
            results[backend] = train(backend, args, local, store, i)
        else:
            results[backend] = run_in_child(backend, parent_argv, found, i, work)
        if rank == 0:
            r = results[backend]
            print(f"{backend}: losses {' '.join(f'{x:.6f}' for x in r['losses'])}; "
                  f"median step {statistics.median(r['step_ms']):.0f} ms", flush=True)
    if rank == 0:
        out = {"model": args.model, "mesh": {"pp": args.pp, "dp_shard": args.dp_shard, "tp": args.tp, "ep": args.ep},
               "steps": args.steps,
               "layers": args.layers, "seq": args.seq, "batch": args.batch, "spmd_backend": args.spmd_backend}
        for backend, r in results.items():
            out[f"losses_{backend}"] = r["losses"]
            out[f"step_ms_{backend}"] = r["step_ms"]
        if "chimera" in results and "gloo" in results:
            out["max_abs_loss_diff"] = max(abs(a - b) for a, b in zip(results["chimera"]["losses"],
                                                                      results["gloo"]["losses"]))
            print(f"max |loss chimera - loss gloo| = {out['max_abs_loss_diff']:.3g}")
        if "chimera" in results:
            stats = results["chimera"]["stats"] or {}
            out["planned_redistributions"] = stats.get("planned", 0)
            out["chimera_stats"] = stats
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        if args.max_loss_diff is not None:
            diff, planned = out.get("max_abs_loss_diff", float("inf")), out.get("planned_redistributions", 0)
            if not diff <= args.max_loss_diff or planned == 0:
                print(f"FAILED: max |loss diff| {diff:.3g} (at most {args.max_loss_diff:g} expected), "
                      f"{planned} redistributions planned by chimera", flush=True)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
