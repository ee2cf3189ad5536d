// SPDX-License-Identifier: Apache-2.0
// Implements grid sizing for the CUDA kernels from the current device's SM count.
#include "kernels/launch_config.hpp"

#include <algorithm>
#include <array>
#include <atomic>

#include "core/check.hpp"
#include "kernels/cuda_check.hpp"

namespace chimera::detail {
namespace {

constexpr int kMaxCachedDevices = 64;

// 0 = not queried yet. Racing first queries store the same value.
std::array<std::atomic<int>, kMaxCachedDevices> smCountCache{};

Status smCount(int& out) {
  int device = 0;
  CHIMERA_CUDA_RETURN(cudaGetDevice(&device));
  if (device >= 0 && device < kMaxCachedDevices) {
    out = smCountCache[static_cast<std::size_t>(device)].load(std::memory_order_relaxed);
    if (out > 0) return Status::ok();
  }
  CHIMERA_CUDA_RETURN(cudaDeviceGetAttribute(&out, cudaDevAttrMultiProcessorCount, device));
  if (device >= 0 && device < kMaxCachedDevices) {
    smCountCache[static_cast<std::size_t>(device)].store(out, std::memory_order_relaxed);
  }
  return Status::ok();
}

}  // namespace

Status gridBlocks(std::int64_t threadsWanted, unsigned& blocks) {
  int sms = 0;
  CHIMERA_RETURN_IF_ERROR(smCount(sms));
  const std::int64_t wanted = (std::max<std::int64_t>(threadsWanted, 1) + kThreadsPerBlock - 1) / kThreadsPerBlock;
  blocks = static_cast<unsigned>(std::min<std::int64_t>(wanted, std::int64_t{sms} * kBlocksPerSm));
  return Status::ok();
}

}  // namespace chimera::detail
