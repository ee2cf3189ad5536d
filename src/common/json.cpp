// SPDX-License-Identifier: Apache-2.0
#include "common/json.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

namespace chimera::detail {

Status parseJson(std::string_view text, Json& out) {
  std::vector<std::set<std::string>> keys;  // the keys seen so far in each open object
  std::string problem;
  const Json::parser_callback_t check = [&](int, Json::parse_event_t event, Json& parsed) {
    if (!problem.empty()) return true;
    switch (event) {
      case Json::parse_event_t::object_start: keys.emplace_back(); break;
      case Json::parse_event_t::object_end: keys.pop_back(); break;
      case Json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second) {
          problem = fmt::format("duplicate object key {}", parsed.dump());
        }
        break;
      default: break;
    }
    return true;
  };
  try {
    Json parsed = Json::parse(text.begin(), text.end(), check);
    if (!problem.empty()) return Status::invalidArgument(fmt::format("invalid JSON: {}", problem));
    out = std::move(parsed);
    return Status::ok();
  } catch (const Json::exception& error) {
    // what() is "[json.exception.parse_error.101] parse error at line 2, column 7: ..." (the
    // position is that of the last character read), or out_of_range.406 for a number overflow.
    std::string_view message = error.what();
    if (const auto end = message.find("] "); end != std::string_view::npos) message.remove_prefix(end + 2);
    return Status::invalidArgument(fmt::format("invalid JSON: {}", message));
  }
}

const Json* findMember(const Json& value, std::string_view key) {
  if (!value.is_object()) return nullptr;
  const auto it = value.find(std::string(key));
  return it == value.end() ? nullptr : &*it;
}

std::optional<std::int64_t> intValue(const Json& value) {
  if (value.is_number_unsigned()) {
    const auto number = value.get<std::uint64_t>();
    if (number > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(number);
  }
  if (value.is_number_integer()) return value.get<std::int64_t>();
  return std::nullopt;
}

namespace {

void appendDouble(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";  // JSON has no NaN or infinity
    return;
  }
  // fmt's "{}" is the shortest text that reads back to the same double (nlohmann's own writer
  // is not always the shortest and switches to exponents earlier); keep a fraction or an
  // exponent so that the value reads back as a double.
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  out += text;
}

void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out.push_back('\n');
  out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(depth), ' ');
}

// Scalars other than doubles (null, bool, integers, strings with their escapes) are nlohmann's.
std::string scalar(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

void dumpTo(std::string& out, const Json& value, int indent, int depth) {
  if (value.is_number_float()) {
    appendDouble(out, value.get<double>());
    return;
  }
  if (!value.is_structured()) {
    out += scalar(value);
    return;
  }
  if (value.empty()) {
    out += value.is_array() ? "[]" : "{}";
    return;
  }
  out.push_back(value.is_array() ? '[' : '{');
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!first) out.push_back(',');
    first = false;
    newline(out, indent, depth + 1);
    if (value.is_object()) {
      out += scalar(Json(it.key()));
      out += indent < 0 ? ":" : ": ";
    }
    dumpTo(out, *it, indent, depth + 1);
  }
  newline(out, indent, depth);
  out.push_back(value.is_array() ? ']' : '}');
}

}  // namespace

std::string dumpJson(const Json& value, int indent) {
  std::string out;
  dumpTo(out, value, indent, 0);
  return out;
}

}  // namespace chimera::detail
