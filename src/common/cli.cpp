// SPDX-License-Identifier: Apache-2.0
#include "common/cli.hpp"

#include <algorithm>

#include "common/size_text.hpp"
#include "core/check.hpp"

namespace chimera::detail {

Status parseFlags(std::span<const std::string> args, std::span<const CliFlag> flags,
                  std::vector<std::string>* positional) {
  std::vector<bool> seen(flags.size(), false);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg.size() < 2 || arg.front() != '-') {
      CHIMERA_CHECK_ARG(positional != nullptr, "unexpected argument '{}' (see --help)", arg);
      positional->push_back(args[i]);
      continue;
    }
    std::string_view value;
    bool hasValue = false;
    if (arg.starts_with("--")) {
      if (const std::size_t eq = arg.find('='); eq != std::string_view::npos) {
        value = arg.substr(eq + 1);
        hasValue = true;
        arg = arg.substr(0, eq);
      }
    }
    const auto flag = std::find_if(flags.begin(), flags.end(), [arg](const CliFlag& f) {
      return (!f.longName.empty() && arg == f.longName) || (!f.shortName.empty() && arg == f.shortName);
    });
    CHIMERA_CHECK_ARG(flag != flags.end(), "unknown option '{}' (see --help)", arg);
    const auto index = static_cast<std::size_t>(flag - flags.begin());
    CHIMERA_CHECK_ARG(!seen[index], "option {} given twice", arg);
    seen[index] = true;
    if (!flag->takesValue) {
      CHIMERA_CHECK_ARG(!hasValue, "{} takes no value", arg);
      CHIMERA_RETURN_IF_ERROR(flag->set({}));
      continue;
    }
    if (!hasValue) {
      CHIMERA_CHECK_ARG(i + 1 < args.size(), "{} needs a value", arg);
      value = args[++i];
    }
    CHIMERA_RETURN_IF_ERROR(flag->set(value));
  }
  return Status::ok();
}

std::vector<std::string> argumentList(int argc, char** argv) {
  return argc > 1 ? std::vector<std::string>(argv + 1, argv + argc) : std::vector<std::string>{};
}

Status parseSizeFlag(std::string_view flag, std::string_view text, std::size_t& out) {
  std::size_t bytes = 0;
  const Status status = parseSize(text, bytes);
  if (!status.isOk()) return Status::invalidArgument(fmt::format("{}: {}", flag, status.message()));
  CHIMERA_CHECK_ARG(bytes > 0, "{}: size must be at least 1 byte", flag);
  out = bytes;
  return Status::ok();
}

}  // namespace chimera::detail
