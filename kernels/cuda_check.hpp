// SPDX-License-Identifier: Apache-2.0
// CUDA runtime error checking (private): a failed call becomes a BackendError Status that
// names the call and carries CUDA's own message.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "chimera/status.hpp"

namespace chimera::detail {

/// BackendError "<what> failed: <cudaGetErrorString> (<cudaGetErrorName>)".
inline Status cudaStatus(cudaError_t error, const char* what) {
  return Status::backendError(
      fmt::format("{} failed: {} ({})", what, cudaGetErrorString(error), cudaGetErrorName(error)));
}

}  // namespace chimera::detail

/// Evaluates a CUDA runtime call and returns a BackendError Status from the enclosing
/// function when it did not return cudaSuccess.
#define CHIMERA_CUDA_RETURN(expr)                                                                             \
  do {                                                                                                        \
    const cudaError_t chimera_cuda_error_ = (expr);                                                           \
    if (chimera_cuda_error_ != cudaSuccess) return ::chimera::detail::cudaStatus(chimera_cuda_error_, #expr); \
  } while (0)
