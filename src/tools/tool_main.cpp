// SPDX-License-Identifier: Apache-2.0
#include "tools/tool_main.hpp"

#include <cstdio>
#include <vector>

#include "common/cli.hpp"
#include "core/check.hpp"

namespace chimera::detail {
namespace {

Status parse(int argc, char** argv, const ToolSpec& tool, ToolOptions& out, bool& help) {
  // The flag table needs the spellings with their dashes to outlive the parse.
  std::vector<std::string> names;
  for (const std::string_view key : tool.keys) names.push_back("--" + std::string(key));
  for (const std::string_view key : tool.switches) names.push_back("--" + std::string(key));
  std::vector<CliFlag> flags;
  std::size_t i = 0;
  for (const std::string_view key : tool.keys) {
    flags.push_back({"", names[i++], true, [&out, key](std::string_view v) {
                       out.values[std::string(key)] = v;
                       return Status::ok();
                     }});
  }
  for (const std::string_view key : tool.switches) {
    flags.push_back({"", names[i++], false, [&out, key](std::string_view) {
                       out.switches.insert(std::string(key));
                       return Status::ok();
                     }});
  }
  flags.push_back({"-h", "--help", false, [&help](std::string_view) { return help = true, Status::ok(); }});
  CHIMERA_RETURN_IF_ERROR(parseFlags(argumentList(argc, argv), flags));
  if (help) return Status::ok();
  for (const std::string_view key : tool.required) {
    CHIMERA_CHECK_ARG(out.values.count(std::string(key)) != 0, "missing --{} (see --help)", key);
  }
  return Status::ok();
}

}  // namespace

int toolMain(int argc, char** argv, const ToolSpec& tool) {
  ToolOptions options;
  bool help = false;
  Status status = parse(argc, argv, tool, options, help);
  if (status.isOk() && help) {
    std::fwrite(tool.usage.data(), 1, tool.usage.size(), stdout);
    return 0;
  }
  std::string output;
  if (status.isOk()) status = tool.run(options, output);
  if (!status.isOk()) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(tool.name.size()), tool.name.data(), status.message().c_str());
    return 2;
  }
  std::fputs(output.c_str(), stdout);
  return 0;
}

}  // namespace chimera::detail
