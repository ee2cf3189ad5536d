// SPDX-License-Identifier: Apache-2.0
// The NCCL backend's local work on device memory, ordered on its stream: allocation, copies,
// box pack/unpack (one kernel launch per 16 boxes) and scaling through the CUDA kernels.
#include <cuda_runtime_api.h>

#include <vector>

#include "box/box_ops.hpp"
#include "common/log.hpp"
#include "core/check.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/pack.hpp"
#include "kernels/reduce.hpp"
#include "nccl/nccl_backend_impl.hpp"

namespace chimera::detail {
namespace {

constexpr const char* kLog = "nccl";

cudaStream_t cudaStreamOf(Stream stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

Status NcclBackend::allocate(std::size_t bytes, void** out) {
  CHIMERA_CHECK_ARG(out != nullptr, "allocate: null output pointer");
  CHIMERA_CHECK_ARG(bytes > 0, "allocate: 0 bytes requested");
  CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
  CHIMERA_CUDA_RETURN(cudaMalloc(out, bytes));
  return Status::ok();
}

void NcclBackend::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  if (cudaSetDevice(device_) != cudaSuccess || cudaFree(ptr) != cudaSuccess) {
    CHIMERA_LOG_WARN(kLog, "cudaFree({}) on device {} failed: {}", ptr, device_,
                     cudaGetErrorString(cudaGetLastError()));
  }
}

Status NcclBackend::copy(void* dst, const void* src, std::size_t bytes, Stream stream) {
  if (bytes == 0) return Status::ok();
  CHIMERA_CHECK_ARG(dst != nullptr && src != nullptr, "copy of {} bytes with a null pointer", bytes);
  CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
  CHIMERA_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamOf(stream)));
  return Status::ok();
}

Status NcclBackend::packBox(const void* tensor, std::span<const std::int64_t> shape, const Box& box, void* packed,
                            DataType dtype, Stream stream) {
  BoxCopy copy;
  CHIMERA_RETURN_IF_ERROR(toTensorBox(shape, box, copy.box));
  copy.tensor = const_cast<void*>(tensor);  // read only by packBoxes
  copy.packed = packed;
  CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
  return detail::packBoxes(&copy, 1, dtype, stream);
}

Status NcclBackend::unpackBox(const void* packed, void* tensor, std::span<const std::int64_t> shape, const Box& box,
                              DataType dtype, Stream stream) {
  BoxCopy copy;
  CHIMERA_RETURN_IF_ERROR(toTensorBox(shape, box, copy.box));
  copy.tensor = tensor;
  copy.packed = const_cast<void*>(packed);  // read only by unpackBoxes
  CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
  return detail::unpackBoxes(&copy, 1, dtype, stream);
}

Status NcclBackend::packBoxes(const void* tensor, std::span<const std::int64_t> shape, std::span<const Box> boxes,
                              std::span<void* const> packed, DataType dtype, Stream stream) {
  CHIMERA_CHECK_ARG(boxes.size() == packed.size(), "packBoxes: {} boxes but {} packed buffers", boxes.size(),
                    packed.size());
  std::vector<BoxCopy> copies(boxes.size());
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    CHIMERA_RETURN_IF_ERROR(toTensorBox(shape, boxes[i], copies[i].box));
    copies[i].tensor = const_cast<void*>(tensor);  // read only by packBoxes
    copies[i].packed = packed[i];
  }
  CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
  return detail::packBoxes(copies.data(), copies.size(), dtype, stream);
}

Status NcclBackend::unpackBoxes(std::span<const void* const> packed, void* tensor, std::span<const std::int64_t> shape,
                                std::span<const Box> boxes, DataType dtype, Stream stream) {
  CHIMERA_CHECK_ARG(boxes.size() == packed.size(), "unpackBoxes: {} boxes but {} packed buffers", boxes.size(),
                    packed.size());
  std::vector<BoxCopy> copies(boxes.size());
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    CHIMERA_RETURN_IF_ERROR(toTensorBox(shape, boxes[i], copies[i].box));
    copies[i].tensor = tensor;
    copies[i].packed = const_cast<void*>(packed[i]);  // read only by unpackBoxes
  }
  CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
  return detail::unpackBoxes(copies.data(), copies.size(), dtype, stream);
}

bool NcclBackend::capturing(Stream stream) const {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(cudaStreamOf(stream), &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone;
}

Status NcclBackend::scale(const void* input, void* output, std::size_t count, DataType dtype, double factor,
                          Stream stream) {
  CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
  return scaleBuffer(input, output, count, dtype, factor, stream);
}

}  // namespace chimera::detail
