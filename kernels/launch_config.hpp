// SPDX-License-Identifier: Apache-2.0
// Grid sizing for the chimera kernels (private): grids are sized from the current
// device's SM count, never from the problem size alone, and kernels loop grid-stride.
#pragma once

#include <cstdint>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Threads per block of every chimera kernel.
inline constexpr int kThreadsPerBlock = 256;
/// Resident blocks per SM the grid aims for (8 x 256 = 2048 threads, a full SM on sm_80+).
inline constexpr int kBlocksPerSm = 8;

/// Blocks for `threadsWanted` threads of work on the current device: enough to give every
/// thread one unit, at most kBlocksPerSm per SM, at least 1. The SM count is queried once per
/// device and cached (safe during stream capture: no stream work). BackendError when CUDA
/// cannot report the device.
[[nodiscard]] Status gridBlocks(std::int64_t threadsWanted, unsigned& blocks);

}  // namespace chimera::detail
