// SPDX-License-Identifier: Apache-2.0
// The CUDA half of bench_device.hpp (built only when chimera has CUDA).
#include <cuda_runtime.h>

#include <fmt/format.h>

#include "core/check.hpp"

#include "bench_device.hpp"

namespace chimera::detail {
namespace {

Status cudaStatus(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return Status::ok();
  return Status::backendError(fmt::format("{}: {}", call, cudaGetErrorString(error)));
}

/// Two CUDA events, destroyed on scope exit.
struct EventPair {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  ~EventPair() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
};

}  // namespace

int cudaDeviceCount(std::string& why) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    why = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(error));
    return 0;
  }
  if (count == 0) why = "cudaGetDeviceCount found 0 devices";
  return count;
}

Status cudaCopy(void* dst, const void* src, std::size_t bytes, bool toDevice) {
  return cudaStatus(cudaMemcpy(dst, src, bytes, toDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost),
                    "cudaMemcpy");
}

Status cudaTime(Backend& backend, const std::function<Status()>& operation, double& seconds) {
  // The runners issue their calls without a stream: the legacy default stream, timed here.
  cudaStream_t stream = nullptr;
  EventPair events;
  CHIMERA_RETURN_IF_ERROR(cudaStatus(cudaEventCreate(&events.start), "cudaEventCreate"));
  CHIMERA_RETURN_IF_ERROR(cudaStatus(cudaEventCreate(&events.stop), "cudaEventCreate"));
  CHIMERA_RETURN_IF_ERROR(cudaStatus(cudaEventRecord(events.start, stream), "cudaEventRecord"));
  CHIMERA_RETURN_IF_ERROR(operation());
  CHIMERA_RETURN_IF_ERROR(cudaStatus(cudaEventRecord(events.stop, stream), "cudaEventRecord"));
  CHIMERA_RETURN_IF_ERROR(backend.synchronize());
  CHIMERA_RETURN_IF_ERROR(cudaStatus(cudaEventSynchronize(events.stop), "cudaEventSynchronize"));
  float milliseconds = 0;
  CHIMERA_RETURN_IF_ERROR(
      cudaStatus(cudaEventElapsedTime(&milliseconds, events.start, events.stop), "cudaEventElapsedTime"));
  seconds = static_cast<double>(milliseconds) * 1e-3;
  return Status::ok();
}

}  // namespace chimera::detail
