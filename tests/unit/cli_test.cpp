// SPDX-License-Identifier: Apache-2.0
// The shared flag table of the tools (common/cli.hpp).
#include "common/cli.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace chimera::detail {
namespace {

struct Parsed {
  int iters = 0;
  std::size_t bytes = 0;
  bool json = false;
  std::vector<std::string> positional;
};

Status parse(std::vector<std::string> args, Parsed& out, bool positional = false) {
  const CliFlag flags[] = {
      {"-n", "--iters", true, [&](std::string_view v) { return parseIntFlag("-n/--iters", v, 1, out.iters); }},
      {"-b", "", true, [&](std::string_view v) { return parseSizeFlag("-b", v, out.bytes); }},
      {"", "--json", false, [&](std::string_view) { return out.json = true, Status::ok(); }},
  };
  return parseFlags(args, flags, positional ? &out.positional : nullptr);
}

TEST(Cli, SpellingsValuesAndPositionals) {
  Parsed p;
  ASSERT_TRUE(parse({"--iters=7", "-b", "64K", "--json", "32M", "-"}, p, true).isOk());
  EXPECT_EQ(p.iters, 7);
  EXPECT_EQ(p.bytes, 65536u);
  EXPECT_TRUE(p.json);
  EXPECT_EQ(p.positional, (std::vector<std::string>{"32M", "-"}));
  Parsed q;
  ASSERT_TRUE(parse({"-n", "3"}, q).isOk());
  EXPECT_EQ(q.iters, 3);
}

TEST(Cli, EveryMistakeNamesTheFlagAndTheValue) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-n", "x"}, "-n/--iters: malformed number 'x'"},
      {{"-n", "5x"}, "-n/--iters: malformed number '5x'"},
      {{"-n", ""}, "-n/--iters: malformed number ''"},
      {{"-n", "99999999999"}, "-n/--iters: malformed number '99999999999'"},
      {{"-n", "0"}, "-n/--iters: 0 is below the minimum 1"},
      {{"-b", "12X"}, "-b: malformed size '12X'"},
      {{"-b", "0"}, "-b: size must be at least 1 byte"},
      {{"--frobnicate"}, "unknown option '--frobnicate'"},
      {{"-q", "1"}, "unknown option '-q'"},
      {{"--iters"}, "--iters needs a value"},
      {{"--json=yes"}, "--json takes no value"},
      {{"-n", "1", "--iters", "2"}, "option --iters given twice"},
      {{"32M"}, "unexpected argument '32M'"},
  };
  for (const auto& [args, needle] : cases) {
    Parsed p;
    const Status status = parse(args, p);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << args.front();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
  }
}

}  // namespace
}  // namespace chimera::detail
