// SPDX-License-Identifier: Apache-2.0
// Implements the one parser of CHIMERA_* environment variables.
#include "common/env.hpp"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "core/check.hpp"

namespace chimera::detail {

Status readEnvSwitch(const char* name, bool fallback, bool& out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    out = fallback;
    return Status::ok();
  }
  const std::string_view value(text);
  const bool on = value == "1" || value == "on" || value == "true";
  const bool off = value == "0" || value == "off" || value == "false";
  CHIMERA_CHECK_ARG(on || off, "{}='{}' is not one of 0 1 on off true false", name, value);
  out = on;
  return Status::ok();
}

Status readEnvCount(const char* name, std::size_t fallback, std::size_t& out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    out = fallback;
    return Status::ok();
  }
  const std::string_view value(text);
  std::size_t parsed = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  CHIMERA_CHECK_ARG(error == std::errc() && end == value.data() + value.size() && parsed >= 1,
                    "{}='{}' is not an integer >= 1", name, value);
  out = parsed;
  return Status::ok();
}

Status checkArgsFromEnv(bool& out, bool fallback) { return readEnvSwitch("CHIMERA_CHECK_ARGS", fallback, out); }

Status timeoutMsFromEnv(std::int64_t& out) {
  const char* text = std::getenv("CHIMERA_TIMEOUT_MS");
  if (text == nullptr || *text == '\0') {
    out = kDefaultTimeoutMs;
    return Status::ok();
  }
  const std::string_view value(text);
  std::int64_t parsed = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  CHIMERA_CHECK_ARG(error == std::errc() && end == value.data() + value.size() && parsed >= 1 &&
                        parsed <= kMaxTimeoutMs,
                    "CHIMERA_TIMEOUT_MS='{}' is not a number of milliseconds in 1..{}", value, kMaxTimeoutMs);
  out = parsed;
  return Status::ok();
}

}  // namespace chimera::detail
