// SPDX-License-Identifier: Apache-2.0
// A rank's local part of a logical tensor under a Layout, as a caller's tensor: the logical
// spec it implies, and the exact-size check (or None on a rank that holds nothing) that the
// Executor and Session bindings apply before handing a pointer to C++.
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <initializer_list>
#include <utility>

#include "chimera/layout.hpp"
#include "chimera/tensor_spec.hpp"
#include "tensor_view.hpp"

namespace chimera::python {

/// A checked local buffer (nullptr and 0 on a rank that holds nothing).
struct LocalBuffer {
  void* data = nullptr;
  std::size_t bytes = 0;
};

/// The logical spec a rank's local tensor `view` implies under `layout` (each dim scaled by
/// the sizes of the axes splitting it).
TensorSpec specFromLocal(const TensorView& view, const Layout& layout);

/// `spec` when given (a TensorSpec), else the spec implied by the first (tensor, layout) pair
/// whose layout this rank holds and whose tensor is given. InvalidArgument when neither.
TensorSpec resolveSpec(nb::handle spec, std::initializer_list<std::pair<nb::handle, const Layout*>> candidates,
                       int rank, const char* call);

/// Checks `obj` as rank `rank`'s local tensor of `spec` placed as `layout`: exactly its bytes
/// and dtype when the rank holds a part, None or empty when it holds nothing (ValueError
/// naming `name` otherwise).
LocalBuffer localBuffer(nb::handle obj, const TensorSpec& spec, const Layout& layout, int rank, const char* call,
                        const char* name, MemorySpace space);

}  // namespace chimera::python
