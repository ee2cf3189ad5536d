# SPDX-License-Identifier: Apache-2.0
"""What torchtitan 0.3.0 needs to train on CPU, patched from outside (its files stay as shipped).

torchtitan has no CPU switch: it assumes an accelerator in a few places. Each patch below
replaces one attribute torchtitan looks up at call time; docs/torch.md lists them.

- ``before_import()``: the device type. torchtitan reads it once, at import, from
  ``torch._utils._get_available_device_type`` ("cuda" when nothing is found); it must answer
  "cpu" before torchtitan is imported.
- ``after_import()``:
  * the memory monitor (``metrics.DeviceMemoryMonitor``) asks the device module for names,
    properties and allocator statistics torch.cpu does not have: a CPU monitor reports the
    process's peak resident memory instead;
  * FlexAttention: torch 2.15 has no CPU backward for ``flex_attention`` and compiles it (and
    ``create_block_mask``) with inductor: attention runs as ``scaled_dot_product_attention`` on
    the dense boolean mask the same ``mask_mod`` gives (the block-causal document mask), and the
    block mask is built eagerly;
  * ``set_pg_timeouts`` opens with ``barrier(device_ids=[current_device()])``, a CUDA-only
    argument: the timeouts stay as created (the run is short);
  * FSDP2's gradient reduce-scatter: torchtitan sets the gradient divide factor to 1 (it scales
    by the global token count itself), which FSDP2 then issues as ``ReduceOp.PREMUL_SUM(1.0)``,
    an NCCL-only op (gloo refuses it): the FSDP modules are also told to reduce with a plain
    SUM (``set_force_sum_reduction_for_comms``), followed by FSDP's division by the same factor 1;
  * the peak FLOPS for MFU come from ``lspci`` (NVIDIA names): on CPU the figure is NaN and no
    subprocess is started.
CUDA graphs and compilation are configuration (``training.disable_cuda_graphs``,
``compile.enable``), set by the launcher, not patched.
"""

from __future__ import annotations

import resource

import torch
import torch.nn.functional as F


def before_import() -> None:
    """Makes torchtitan see the CPU as its device. Call before importing torchtitan."""
    torch._utils._get_available_device_type = lambda: "cpu"  # noqa: SLF001


class CpuMemoryMonitor:
    """torchtitan's DeviceMemoryMonitor interface for the CPU: peak resident memory of the process."""

    def __init__(self, device: str = "cpu"):
        import os

        self.device = torch.device(device)
        self.device_name = "cpu"
        self.device_index = 0
        self.device_capacity = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.device_capacity_gib = self.device_capacity / 2**30

    def get_peak_stats(self):
        from torchtitan.components.metrics import DeviceMemStats

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        pct = 100 * peak / self.device_capacity
        return DeviceMemStats(peak / 2**30, pct, peak / 2**30, pct, 0, 0)

    def reset_peak_stats(self) -> None:
        pass  # the kernel's peak cannot be reset; the figure is the process's peak so far


def _sdpa_attention(q, k, v, *, score_mod, block_mask, scale, enable_gqa, return_aux, kernel_options):
    """FlexAttention's call, computed by SDPA on the mask ``block_mask.mask_mod`` describes."""
    from torch.nn.attention.flex_attention import AuxOutput, create_mask

    if score_mod is not None or return_aux.lse or return_aux.max_scores:
        raise NotImplementedError("the CPU attention of examples/torchtitan handles mask_mod only")
    mask = create_mask(block_mask.mask_mod, q.shape[0], None, q.shape[2], k.shape[2], device=q.device)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)
    return out, AuxOutput()


def _keep_timeouts(timeout, parallel_dims) -> None:  # noqa: ARG001 (set_pg_timeouts' signature)
    pass


def _divide_by_one_with_sum(model) -> None:
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def after_import() -> None:
    """Applies the patches to the imported torchtitan modules."""
    from torch.nn.attention.flex_attention import create_block_mask
    from torchtitan.components import metrics
    from torchtitan.distributed import fsdp
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.models.common import attention
    from torchtitan.tools import utils as tool_utils

    metrics.DeviceMemoryMonitor = CpuMemoryMonitor
    attention.FlexAttention._compiled_flex_attn = staticmethod(_sdpa_attention)
    attention._compiled_create_block_mask = create_block_mask  # noqa: SLF001
    dist_utils.set_pg_timeouts = _keep_timeouts
    tool_utils.get_peak_flops = lambda device_name: float("nan")
    fsdp.disable_fsdp_gradient_division = _divide_by_one_with_sum
