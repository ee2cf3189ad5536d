// SPDX-License-Identifier: Apache-2.0
// Byte sizes as the tools and benchmarks read and print them ("64K", "32M") (private).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera {

/// Parses a byte size with an optional binary suffix: "4096", "64K", "32M", "1G" (K=1024).
/// InvalidArgument on malformed text or overflow.
[[nodiscard]] Status parseSize(std::string_view text, std::size_t& out);
/// Formats a byte count the way parseSize reads it back when exact ("32M"), else plain bytes.
std::string formatSize(std::size_t bytes);

}  // namespace chimera
