// SPDX-License-Identifier: Apache-2.0
// The backend the chain and calibration modes run on (--backend mpi|nccl) and the few
// memory-space operations the benchmark needs on it: staging host data in and out, and
// timing one call (steady clock for host backends, CUDA events on the backend's stream for
// NCCL). The CUDA half lives in bench_device_cuda.cpp, compiled only with CHIMERA_HAS_CUDA.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "chimera/backend.hpp"
#include "chimera/mesh.hpp"
#include "chimera/status.hpp"

namespace chimera::bench {

/// "nccl" when chimera was built with CUDA and this process sees a CUDA device, else "mpi".
std::string defaultBackendName();

/// Ok when the backend `kind` ("mpi" or "nccl") can run in this process; Unsupported saying
/// why not (nccl without CUDA in the build, or without a visible device). Local, not collective.
[[nodiscard]] Status backendAvailable(std::string_view kind);

/// Creates the backend `kind` ("mpi" or "nccl") over MPI_COMM_WORLD on `mesh`. Collective;
/// the same verdict on every rank. For nccl without CUDA in the build, or without a visible
/// device, Unsupported saying which.
[[nodiscard]] Status createBenchBackend(std::string_view kind, const Mesh& mesh, std::unique_ptr<Backend>& out);

/// Copies `bytes` from host memory into `dst` in the backend's memory space (and waits).
[[nodiscard]] Status copyToBackend(Backend& backend, void* dst, const void* src, std::size_t bytes);
/// Copies `bytes` from `src` in the backend's memory space to host memory (and waits).
[[nodiscard]] Status copyFromBackend(Backend& backend, void* dst, const void* src, std::size_t bytes);

/// Runs `operation` once and measures it to completion in seconds: steady clock around the
/// call and backend.synchronize() for host backends; for nccl CUDA events recorded on the
/// backend's stream around it, then synchronize.
[[nodiscard]] Status timeOnBackend(Backend& backend, const std::function<Status()>& operation, double& seconds);

/// Owns one backend allocation (at least 1 byte).
class BackendBuffer {
 public:
  explicit BackendBuffer(Backend& backend) : backend_(backend) {}
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  ~BackendBuffer() { backend_.deallocate(data_); }
  /// Allocates `bytes` (frees what it held); `size()` is `bytes` afterwards.
  [[nodiscard]] Status allocate(std::size_t bytes);
  /// The buffer, or nullptr when size() is 0 (the executor's convention for "holds nothing").
  void* data() const { return size_ > 0 ? data_ : nullptr; }
  /// Bytes requested.
  std::size_t size() const { return size_; }

 private:
  Backend& backend_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace chimera::bench

namespace chimera::detail {
#if defined(CHIMERA_HAS_CUDA)
/// CUDA devices this process sees (0 on error); `why` says what failed when 0.
int cudaDeviceCount(std::string& why);
/// cudaMemcpy in the given direction, as a Status.
[[nodiscard]] Status cudaCopy(void* dst, const void* src, std::size_t bytes, bool toDevice);
/// CUDA-event timing of `operation` on `backend.stream()`.
[[nodiscard]] Status cudaTime(Backend& backend, const std::function<Status()>& operation, double& seconds);
#endif
}  // namespace chimera::detail
