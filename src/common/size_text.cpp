// SPDX-License-Identifier: Apache-2.0
// Byte sizes as the tools and benchmarks read and print them ("64K", "32M").
#include "common/size_text.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <limits>
#include <utility>

namespace chimera {

Status parseSize(std::string_view text, std::size_t& out) {
  if (text.empty()) return Status::invalidArgument("empty size");
  std::size_t value = 0;
  std::size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const auto digit = static_cast<std::size_t>(text[i] - '0');
    if (value > (std::numeric_limits<std::size_t>::max() - digit) / 10)
      return Status::invalidArgument(fmt::format("size '{}' overflows", text));
    value = value * 10 + digit;
  }
  if (i == 0)
    return Status::invalidArgument(fmt::format("malformed size '{}' (expected e.g. 4096, 64K, 32M, 1G)", text));
  std::size_t scale = 1;
  if (i < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[i]))) {
      case 'K': scale = std::size_t{1} << 10; break;
      case 'M': scale = std::size_t{1} << 20; break;
      case 'G': scale = std::size_t{1} << 30; break;
      default:
        return Status::invalidArgument(fmt::format("malformed size '{}' (expected e.g. 4096, 64K, 32M, 1G)", text));
    }
    ++i;
    if (i < text.size() && (text[i] == 'B' || text[i] == 'b')) ++i;
    if (i != text.size())
      return Status::invalidArgument(fmt::format("malformed size '{}' (expected e.g. 4096, 64K, 32M, 1G)", text));
  }
  if (value > std::numeric_limits<std::size_t>::max() / scale)
    return Status::invalidArgument(fmt::format("size '{}' overflows", text));
  out = value * scale;
  return Status::ok();
}

std::string formatSize(std::size_t bytes) {
  constexpr std::array<std::pair<std::size_t, char>, 3> kUnits{
      {{std::size_t{1} << 30, 'G'}, {std::size_t{1} << 20, 'M'}, {std::size_t{1} << 10, 'K'}}};
  for (const auto& [unit, suffix] : kUnits) {
    if (bytes >= unit && bytes % unit == 0) return fmt::format("{}{}", bytes / unit, suffix);
  }
  return fmt::format("{}", bytes);
}

}  // namespace chimera
