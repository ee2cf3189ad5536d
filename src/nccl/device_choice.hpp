// SPDX-License-Identifier: Apache-2.0
// Which CUDA device a rank drives, from its rank among the ranks of its node and the number
// of devices the process sees. CUDA-free, so unit-testable.
#pragma once

#include "chimera/status.hpp"

namespace chimera::detail {

/// The device for node-local rank `localRank` of `localRanks`, when the process sees
/// `visibleDevices` GPUs:
/// - one visible GPU: device 0 (one GPU per process: SLURM, Kubernetes or a per-rank
///   CUDA_VISIBLE_DEVICES; or several ranks sharing one GPU, where NCCL allows it);
/// - as many visible GPUs as local ranks or more: device `localRank` (all GPUs visible);
/// - otherwise InvalidArgument naming both counts (an ambiguous mapping is refused rather
///   than guessed). InvalidArgument also when no GPU is visible or the ranks are out of range.
[[nodiscard]] Status chooseCudaDevice(int localRank, int localRanks, int visibleDevices, int& device);

}  // namespace chimera::detail
