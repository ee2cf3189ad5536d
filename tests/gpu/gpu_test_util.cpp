// SPDX-License-Identifier: Apache-2.0
#include "gpu_test_util.hpp"

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
