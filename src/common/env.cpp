// SPDX-License-Identifier: Apache-2.0
#include "common/env.hpp"

#include <cstdlib>
#include <string_view>

#include "common/check.hpp"

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

Status checkArgsFromEnv(bool& out) { return readEnvSwitch("CHIMERA_CHECK_ARGS", kCheckArgsByDefault, out); }

}  // namespace chimera::detail
