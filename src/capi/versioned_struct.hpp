// SPDX-License-Identifier: Apache-2.0
// The check of a versioned C struct's header (size, magic, version; chimera.h "Versioned
// structs") before the C API reads or fills the struct.
#pragma once

#include <cstddef>

#include "chimera/chimera.h"
#include "chimera/status.hpp"
#include "core/check.hpp"

namespace chimera::detail {

/// Ok when `value` (a C struct whose first fields are `size`, `magic` and `version`) was set up
/// by its initializer, is of a layout version this library knows (1 to `knownVersion`) and is
/// at least as large as that layout (`layoutBytes[version - 1]`; without it, the layouts of
/// every version are this header's). InvalidArgument naming the struct (`name`), the field at
/// fault and the initializer to use otherwise.
template <typename CStruct>
[[nodiscard]] Status checkVersionedStruct(const CStruct& value, unsigned int knownVersion, const char* name,
                                          const char* initializer, const std::size_t* layoutBytes = nullptr) {
  CHIMERA_CHECK_ARG(value.magic == CHIMERA_STRUCT_MAGIC,
                    "{} has magic {:#x}, not CHIMERA_STRUCT_MAGIC: declare it with {} before setting its fields", name,
                    value.magic, initializer);
  CHIMERA_CHECK_ARG(value.version >= 1 && value.version <= knownVersion,
                    "{} has version {}, which this library does not know (it knows versions 1 to {}): build against "
                    "the chimera.h of the library you run, and declare it with {}",
                    name, value.version, knownVersion, initializer);
  const std::size_t bytes = layoutBytes != nullptr ? layoutBytes[value.version - 1] : sizeof(CStruct);
  CHIMERA_CHECK_ARG(value.size >= bytes, "{} has size {} bytes, smaller than the {} bytes of version {}: declare it with {}",
                    name, value.size, bytes, value.version, initializer);
  return Status::ok();
}

}  // namespace chimera::detail
