// SPDX-License-Identifier: Apache-2.0
// Zero-copy access to a caller's tensor (anything with __dlpack__: torch, NumPy, CuPy, JAX):
// the checks that turn a DLPack view into a (pointer, bytes, dtype) or a ValueError naming the
// tensor, what was expected and what was given. Nothing here copies.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chimera/types.hpp"

namespace chimera::python {

namespace nb = nanobind;

/// Where a backend's buffers must live.
enum class MemorySpace : std::uint8_t {
  Host,    ///< CPU memory (also CUDA pinned host memory): the MPI backend
  Device,  ///< CUDA device (or managed) memory: the NCCL backend
};

/// A checked view of one tensor: C-contiguous, of a chimera dtype, in the expected memory space.
struct TensorView {
  void* data = nullptr;
  std::size_t bytes = 0;
  std::size_t elements = 0;
  DataType dtype = DataType::F32;
  std::vector<std::int64_t> shape;
};

/// Checks `array` (argument `name` of `call`) and returns its view. ValueError when it is not
/// C-contiguous, its dtype is not one chimera communicates, or it lives outside `space`.
TensorView viewTensor(const nb::ndarray<>& array, const char* call, const char* name, MemorySpace space);

/// The same for any Python object: ValueError naming `name` when it does not export DLPack
/// (`__dlpack__`), then the checks above. Never converts or copies.
TensorView viewObject(nb::handle obj, const char* call, const char* name, MemorySpace space);

/// ValueError unless `view` holds exactly `expected` bytes; `why` says where the expectation
/// comes from ("the local tensor of layout tp=S0 for 8x4 f32").
void expectBytes(const TensorView& view, std::size_t expected, const char* call, const char* name,
                 const std::string& why);

/// ValueError unless `view` has dtype `expected`; `why` says where the expectation comes from.
void expectDtype(const TensorView& view, DataType expected, const char* call, const char* name, const std::string& why);

/// "shape (4, 8) bf16" for messages.
std::string describe(const TensorView& view);

}  // namespace chimera::python
