// SPDX-License-Identifier: Apache-2.0
// JSON (private): nlohmann::ordered_json for tool output (`--json`) and profile files, plus the
// two things it does not do the way chimera needs: parsing returns a Status (no exception
// leaves a parse, and duplicate keys are errors), and writing
// keeps every double in fmt's shortest round-trip form, the form our outputs always had.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera::detail {

/// A JSON value whose objects keep insertion order, so that output reads as it was built.
using Json = nlohmann::ordered_json;

/// Parses one JSON document (surrounding whitespace allowed, nothing else after it). On
/// failure returns InvalidArgument naming the problem and where it is ("line 2, column 9"),
/// and `out` is unchanged. Duplicate object keys and numbers beyond double range are rejected.
[[nodiscard]] Status parseJson(std::string_view text, Json& out);

/// The member named `key`, or nullptr when absent or when `value` is not an object.
const Json* findMember(const Json& value, std::string_view key);

/// The value when it is an integer (written without fraction or exponent) that fits int64.
std::optional<std::int64_t> intValue(const Json& value);

/// Serialises `value`. `indent` < 0: one line, no spaces; `indent` >= 0: one member or element
/// per line, nested levels indented by `indent` spaces. Doubles are written as the shortest text
/// that reads back to the same value, with ".0" when that text looks like an integer; NaN and
/// infinities are written as null.
std::string dumpJson(const Json& value, int indent = -1);

}  // namespace chimera::detail
