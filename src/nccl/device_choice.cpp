// SPDX-License-Identifier: Apache-2.0
// Device choice of a rank on its node.
#include "nccl/device_choice.hpp"

#include "core/check.hpp"

namespace chimera::detail {

Status chooseCudaDevice(int localRank, int localRanks, int visibleDevices, int& device) {
  CHIMERA_CHECK_ARG(localRanks >= 1 && localRank >= 0 && localRank < localRanks,
                    "node-local rank {} of {} ranks is out of range", localRank, localRanks);
  CHIMERA_CHECK_ARG(visibleDevices >= 1, "no CUDA device is visible to node-local rank {}", localRank);
  if (visibleDevices == 1) {
    device = 0;
    return Status::ok();
  }
  CHIMERA_CHECK_ARG(localRanks <= visibleDevices,
                    "{} ranks on this node but {} CUDA devices visible to each: make one GPU visible per rank "
                    "(CUDA_VISIBLE_DEVICES) or all of them, at least one per rank",
                    localRanks, visibleDevices);
  device = localRank;
  return Status::ok();
}

}  // namespace chimera::detail
