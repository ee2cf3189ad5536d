// SPDX-License-Identifier: Apache-2.0
// The main shared by the analysis tools chimera-plan and chimera-model (private): flags in,
// one report out, or one line on stderr and exit status 2.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera::detail {

/// What an analysis tool was given: "--mesh X" is values["mesh"], "--json" is in switches.
struct ToolOptions {
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  /// The value of "--key", which must be given (a required key) or have been checked.
  const std::string& value(const std::string& key) const { return values.at(key); }
  /// True when "--key" was given.
  bool has(const std::string& key) const { return values.count(key) != 0 || switches.count(key) != 0; }
};

/// What distinguishes one analysis tool from another.
struct ToolSpec {
  std::string_view name;                       ///< "chimera-plan", the prefix of its errors
  std::string_view usage;                      ///< printed by -h/--help
  std::span<const std::string_view> keys;      ///< options with a value, without the dashes
  std::span<const std::string_view> required;  ///< those of `keys` that must be given
  std::span<const std::string_view> switches;  ///< options without a value
  std::function<Status(const ToolOptions&, std::string& output)> run;
};

/// Parses the command line (common/cli.hpp: unknown options, a missing value or an option
/// given twice are errors), prints the usage on -h/--help, else runs the tool and prints its
/// output. Returns the exit status: 0, or 2 after "NAME: message" on stderr.
int toolMain(int argc, char** argv, const ToolSpec& tool);

}  // namespace chimera::detail
