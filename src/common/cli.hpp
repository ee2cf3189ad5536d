// SPDX-License-Identifier: Apache-2.0
// Command-line flags (private): the one flag table every chimera tool, benchmark and test
// driver parses its arguments with, so that each rejects unknown flags and malformed numbers
// the same way, naming the flag and the bad value.
#pragma once

#include <fmt/format.h>

#include <charconv>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/status.hpp"

namespace chimera::detail {

/// One flag: its spellings and how its value is applied.
struct CliFlag {
  std::string_view shortName;  ///< "-b"; empty when there is none
  std::string_view longName;   ///< "--minbytes"; empty when there is none
  bool takesValue = true;      ///< false for a switch such as --json (its setter gets "")
  std::function<Status(std::string_view value)> set;
};

/// Parses `args` (the arguments after the program name) against `flags`: "-s VALUE",
/// "--long VALUE" and "--long=VALUE". An argument that does not start with '-' (or is "-"
/// alone) goes to `positional` when it is given and is an error otherwise. An unknown flag,
/// a missing value, a value given to a switch and a flag given twice are InvalidArgument
/// naming the flag; a setter's error is returned as it is.
[[nodiscard]] Status parseFlags(std::span<const std::string> args, std::span<const CliFlag> flags,
                                std::vector<std::string>* positional = nullptr);

/// The arguments of main after the program name.
std::vector<std::string> argumentList(int argc, char** argv);

/// Parses a decimal integer >= `minimum` into `out`. InvalidArgument naming `flag` and the
/// text otherwise: "-n/--iters: malformed number 'x'", "-n/--iters: 0 is below the minimum 1".
template <typename Int>
[[nodiscard]] Status parseIntFlag(std::string_view flag, std::string_view text, Int minimum, Int& out) {
  Int value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
    return Status::invalidArgument(fmt::format("{}: malformed number '{}'", flag, text));
  }
  if (value < minimum)
    return Status::invalidArgument(fmt::format("{}: {} is below the minimum {}", flag, text, minimum));
  out = value;
  return Status::ok();
}

/// Parses a byte size (4096, 64K, 1M, 2G) of at least one byte into `out`. InvalidArgument
/// naming `flag` and the text otherwise.
[[nodiscard]] Status parseSizeFlag(std::string_view flag, std::string_view text, std::size_t& out);

}  // namespace chimera::detail
