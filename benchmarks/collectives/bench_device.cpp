// SPDX-License-Identifier: Apache-2.0
// Implements the benchmark's backend choice (--backend) and its host-memory staging.
#include "bench_device.hpp"

#include <chrono>
#include <cstring>

#include "bench_context.hpp"
#include "chimera/mpi_backend.hpp"
#include "core/check.hpp"
#if defined(CHIMERA_HAS_CUDA)
#include "chimera/nccl_backend.hpp"
#endif

namespace chimera::bench {
namespace {

bool onDevice(const Backend& backend) { return backend.name() == "nccl"; }

/// Whether nccl can run here; the reason when it cannot.
Status ncclAvailable() {
#if defined(CHIMERA_HAS_CUDA)
  std::string why;
  if (detail::cudaDeviceCount(why) > 0) return Status::ok();
  return Status::unsupported("--backend nccl: no CUDA device is visible to this process (" + why + ")");
#else
  return Status::unsupported(
      "--backend nccl: chimera-bench was built without CUDA (configure with -DCHIMERA_WITH_CUDA=ON)");
#endif
}

}  // namespace

std::string defaultBackendName() { return ncclAvailable().isOk() ? "nccl" : "mpi"; }

Status backendAvailable(std::string_view kind) { return kind == "nccl" ? ncclAvailable() : Status::ok(); }

Status createBenchBackend(std::string_view kind, const Mesh& mesh, std::unique_ptr<Backend>& out) {
  if (kind == "mpi") return agreeOnStatus(createMpiBackend(mesh, out));
  CHIMERA_CHECK_ARG(kind == "nccl", "--backend: unknown backend '{}'", kind);
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(backendAvailable(kind)));
#if defined(CHIMERA_HAS_CUDA)
  return agreeOnStatus(createNcclBackendMpi(mesh, out));
#else
  return Status::internal("unreachable: nccl reported available without CUDA");
#endif
}

Status copyToBackend(Backend& backend, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return Status::ok();
#if defined(CHIMERA_HAS_CUDA)
  if (onDevice(backend)) return detail::cudaCopy(dst, src, bytes, /*toDevice=*/true);
#endif
  CHIMERA_CHECK_ARG(!onDevice(backend), "copy to a device backend without CUDA");
  std::memcpy(dst, src, bytes);
  return Status::ok();
}

Status copyFromBackend(Backend& backend, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return Status::ok();
  CHIMERA_RETURN_IF_ERROR(backend.synchronize());
#if defined(CHIMERA_HAS_CUDA)
  if (onDevice(backend)) return detail::cudaCopy(dst, src, bytes, /*toDevice=*/false);
#endif
  CHIMERA_CHECK_ARG(!onDevice(backend), "copy from a device backend without CUDA");
  std::memcpy(dst, src, bytes);
  return Status::ok();
}

Status timeOnBackend(Backend& backend, const std::function<Status()>& operation, double& seconds) {
#if defined(CHIMERA_HAS_CUDA)
  if (onDevice(backend)) return detail::cudaTime(backend, operation, seconds);
#endif
  const auto start = std::chrono::steady_clock::now();
  CHIMERA_RETURN_IF_ERROR(operation());
  CHIMERA_RETURN_IF_ERROR(backend.synchronize());
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::ok();
}

Status BackendBuffer::allocate(std::size_t bytes) {
  backend_.deallocate(data_);
  data_ = nullptr;
  size_ = 0;
  CHIMERA_RETURN_IF_ERROR(backend_.allocate(std::max<std::size_t>(bytes, 1), &data_));
  size_ = bytes;
  return Status::ok();
}

}  // namespace chimera::bench
