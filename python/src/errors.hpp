// SPDX-License-Identifier: Apache-2.0
// Status -> Python exception: every non-ok Status becomes the exception named after its code
// (chimera.InvalidArgument, chimera.Mismatch, ...) carrying the C++ message.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "chimera/status.hpp"

namespace chimera::python {

/// Raises the exception of `status`'s code. Precondition: !status.isOk().
[[noreturn]] void raiseStatus(const Status& status);

/// Raises when `status` is an error; returns otherwise.
inline void check(const Status& status) {
  if (!status.isOk()) raiseStatus(status);
}

/// Runs `call` (returning Status) with the GIL released, so other Python threads run during a
/// collective, then raises its error with the GIL held again (raising needs it).
template <typename Call>
void checkWithoutGil(Call&& call) {
  Status status;
  {
    nanobind::gil_scoped_release release;
    status = call();
  }
  check(status);
}

/// Raises ValueError (bad tensors: layout, dtype, device, size) with `message`.
[[noreturn]] void raiseValueError(const std::string& message);

}  // namespace chimera::python
