// SPDX-License-Identifier: Apache-2.0
// Implements the one parser of CHIMERA_* environment variables.
#include "common/env.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "common/size_text.hpp"
#include "core/check.hpp"

namespace chimera::detail {

std::string topologyFromEnv(std::string fallback) {
  std::optional<std::string> named = readEnvText("CHIMERA_TOPOLOGY");
  return named ? std::move(*named) : std::move(fallback);
}

std::optional<std::string> readEnvText(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  return std::string(text);
}

bool envIsSet(const char* name) { return std::getenv(name) != nullptr; }

Status readEnvChoice(const char* name, std::span<const std::string_view> choices, std::size_t& out) {
  const std::optional<std::string> value = readEnvText(name);
  if (!value) return Status::ok();
  std::size_t index = 0;
  for (const std::string_view choice : choices) {
    if (*value == choice) {
      out = index;
      return Status::ok();
    }
    ++index;
  }
  return Status::invalidArgument(fmt::format("{}='{}' is not one of {}", name, *value, fmt::join(choices, " ")));
}

Status readEnvSize(const char* name, std::size_t& out) {
  const std::optional<std::string> value = readEnvText(name);
  if (!value) return Status::ok();
  std::size_t bytes = 0;
  CHIMERA_CHECK_ARG(parseSize(*value, bytes).isOk() && bytes >= 1, "{}='{}' is not a positive size (4096, 64K, 1M)",
                    name, *value);
  out = bytes;
  return Status::ok();
}

Status readEnvIndex(const char* name, int fallback, int& out) {
  const std::optional<std::string> value = readEnvText(name);
  if (!value) {
    out = fallback;
    return Status::ok();
  }
  int parsed = 0;
  const auto [end, error] = std::from_chars(value->data(), value->data() + value->size(), parsed);
  CHIMERA_CHECK_ARG(error == std::errc() && end == value->data() + value->size() && parsed >= 0,
                    "{}='{}' is not a non-negative integer", name, *value);
  out = parsed;
  return Status::ok();
}

Status logLevelFromEnv(std::string& out) {
  static constexpr std::string_view kNames[] = {"trace", "debug", "info",     "warn", "warning",
                                                "error", "err",   "critical", "off"};
  std::size_t index = 3;  // warn
  CHIMERA_RETURN_IF_ERROR(readEnvChoice("CHIMERA_LOG_LEVEL", kNames, index));
  out = std::string(kNames[index]);
  return Status::ok();
}

Status readEnvSwitch(const char* name, bool fallback, bool& out) {
  const std::optional<std::string> text = readEnvText(name);
  if (!text) {
    out = fallback;
    return Status::ok();
  }
  const std::string_view value(*text);
  const bool on = value == "1" || value == "on" || value == "true";
  const bool off = value == "0" || value == "off" || value == "false";
  CHIMERA_CHECK_ARG(on || off, "{}='{}' is not one of 0 1 on off true false", name, value);
  out = on;
  return Status::ok();
}

Status readEnvCount(const char* name, std::size_t fallback, std::size_t& out) {
  const std::optional<std::string> text = readEnvText(name);
  if (!text) {
    out = fallback;
    return Status::ok();
  }
  const std::string_view value(*text);
  std::size_t parsed = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  CHIMERA_CHECK_ARG(error == std::errc() && end == value.data() + value.size() && parsed >= 1,
                    "{}='{}' is not an integer >= 1", name, value);
  out = parsed;
  return Status::ok();
}

Status checkArgsFromEnv(bool& out, bool fallback) { return readEnvSwitch("CHIMERA_CHECK_ARGS", fallback, out); }

Status timeoutMsFromEnv(std::int64_t& out) {
  const std::optional<std::string> text = readEnvText("CHIMERA_TIMEOUT_MS");
  if (!text) {
    out = kDefaultTimeoutMs;
    return Status::ok();
  }
  const std::string_view value(*text);
  std::int64_t parsed = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  CHIMERA_CHECK_ARG(
      error == std::errc() && end == value.data() + value.size() && parsed >= 1 && parsed <= kMaxTimeoutMs,
      "CHIMERA_TIMEOUT_MS='{}' is not a number of milliseconds in 1..{}", value, kMaxTimeoutMs);
  out = parsed;
  return Status::ok();
}

}  // namespace chimera::detail
