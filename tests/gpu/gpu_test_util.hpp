// SPDX-License-Identifier: Apache-2.0
// Helpers of the GPU tests: skipping without a device, RAII device buffers.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl/nccl_bootstrap_env.hpp"

namespace chimera::test {

/// Number of usable CUDA devices; 0 with `why` set when there is none (no driver, no GPU).
int cudaDevices(std::string& why);

/// Skips the current test, naming the reason, unless at least `n` CUDA devices are present.
#define CHIMERA_REQUIRE_DEVICES(n)                                                                              \
  do {                                                                                                          \
    std::string chimera_why_;                                                                                   \
    const int chimera_devices_ = ::chimera::test::cudaDevices(chimera_why_);                                    \
    if (chimera_devices_ == 0) GTEST_SKIP() << "no CUDA device: " << chimera_why_;                              \
    if (chimera_devices_ < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " << chimera_devices_; \
  } while (0)

/// This process's rank of a world started by chimera-rank-launch, and the device it drives
/// (as createNcclBackendFromEnv picks it). False with `why` set when the process was not
/// launched that way (CHIMERA_RANK unset) or the environment is malformed.
bool launchedRank(detail::NcclBootstrapEnv& env, int& device, std::string& why);

/// A fresh NCCL unique id for one more world among the launched ranks (collective over
/// them). The launcher's id serves one communicator creation only (its bootstrap root lives in
/// the launcher), so the first call makes a flat world from it, kept for the process, and
/// every call has rank 0 create a new id and broadcast it over that world.
Status launchedWorldId(const detail::NcclBootstrapEnv& env, int device, NcclUniqueId& out);

/// Skips the current test unless the process is a rank started by chimera-rank-launch with
/// at least `n` ranks; fills `env` and `device`.
#define CHIMERA_REQUIRE_LAUNCHED_RANKS(env, device, n)                                                        \
  do {                                                                                                        \
    CHIMERA_REQUIRE_DEVICES(1);                                                                               \
    std::string chimera_why_;                                                                                 \
    if (!::chimera::test::launchedRank(env, device, chimera_why_)) GTEST_SKIP() << chimera_why_;              \
    if ((env).worldSize < (n)) GTEST_SKIP() << "needs " << (n) << " launched ranks, got " << (env).worldSize; \
  } while (0)

/// Device memory of `bytes` bytes, freed on destruction. Construction failure is a test failure.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Base of the allocation (256-byte aligned by cudaMalloc).
  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  /// Copies `host` to the buffer at byte `offset` (synchronous).
  void upload(const std::vector<std::uint8_t>& host, std::size_t offset = 0);
  /// Copies `count` bytes from byte `offset` to the host (synchronous).
  std::vector<std::uint8_t> download(std::size_t count, std::size_t offset = 0) const;

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace chimera::test
