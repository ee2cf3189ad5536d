// SPDX-License-Identifier: Apache-2.0
// Implements the GPU tests' helpers: skipping without a device, device buffers.
#include "gpu_test_util.hpp"

#include <cstdlib>

#include "chimera/backend.hpp"
#include "chimera/mesh.hpp"
#include "core/check.hpp"
#include "nccl/device_choice.hpp"

#include <memory>

namespace chimera::test {

int cudaDevices(std::string& why) {
  int count = 0;
  // Without a driver this is an error (e.g. cudaErrorInsufficientDriver), not a count of 0.
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    why = cudaGetErrorString(error);
    return 0;
  }
  if (count == 0) why = "cudaGetDeviceCount returned 0";
  return count;
}

bool launchedRank(detail::NcclBootstrapEnv& env, int& device, std::string& why) {
  if (std::getenv("CHIMERA_RANK") == nullptr) {
    why = "not started by chimera-rank-launch (CHIMERA_RANK unset): see scripts/gpu-check.sh";
    return false;
  }
  Status status = detail::readNcclBootstrapEnv(env);
  std::string cudaWhy;
  const int devices = cudaDevices(cudaWhy);
  if (status.isOk()) status = detail::chooseCudaDevice(env.localRank, env.localWorldSize, devices, device);
  if (!status.isOk()) {
    why = status.toString();
    return false;
  }
  return true;
}

Status launchedWorldId(const detail::NcclBootstrapEnv& env, int device, NcclUniqueId& out) {
  static std::unique_ptr<Backend> bootstrap;
  if (!bootstrap)
    CHIMERA_RETURN_IF_ERROR(createNcclBackend(Mesh::flat(env.worldSize), env.rank, device, env.id, bootstrap));
  NcclUniqueId id;
  if (env.rank == 0) CHIMERA_RETURN_IF_ERROR(createNcclUniqueId(id));
  void* buffer = nullptr;
  CHIMERA_RETURN_IF_ERROR(bootstrap->allocate(kNcclUniqueIdBytes, &buffer));
  Status status = bootstrap->copy(buffer, id.bytes.data(), kNcclUniqueIdBytes);
  if (status.isOk()) {
    status = bootstrap->broadcast(buffer, buffer, kNcclUniqueIdBytes, DataType::U8, 0, bootstrap->mesh().allAxes());
  }
  if (status.isOk()) status = bootstrap->copy(out.bytes.data(), buffer, kNcclUniqueIdBytes);
  if (status.isOk()) status = bootstrap->synchronize();
  bootstrap->deallocate(buffer);
  return status;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  void* pointer = nullptr;
  const cudaError_t error = cudaMalloc(&pointer, bytes);
  EXPECT_EQ(error, cudaSuccess) << "cudaMalloc(" << bytes << "): " << cudaGetErrorString(error);
  data_ = static_cast<std::byte*>(pointer);
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) {
    EXPECT_EQ(cudaFree(data_), cudaSuccess);
  }
}

void DeviceBuffer::upload(const std::vector<std::uint8_t>& host, std::size_t offset) {
  ASSERT_LE(offset + host.size(), bytes_);
  ASSERT_EQ(cudaMemcpy(data_ + offset, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
}

std::vector<std::uint8_t> DeviceBuffer::download(std::size_t count, std::size_t offset) const {
  std::vector<std::uint8_t> host(count);
  EXPECT_LE(offset + count, bytes_);
  EXPECT_EQ(cudaMemcpy(host.data(), data_ + offset, count, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

}  // namespace chimera::test
