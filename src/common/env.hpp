// SPDX-License-Identifier: Apache-2.0
// Environment switches (private): one parser for every CHIMERA_* on/off variable, so the
// backends, the executor and the Session accept the same spellings.
#pragma once

#include <cstddef>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Reads the on/off variable `name`: unset or empty gives `fallback`; `1`, `on`, `true` and
/// `0`, `off`, `false` are accepted; anything else is InvalidArgument naming the variable and
/// its value.
[[nodiscard]] Status readEnvSwitch(const char* name, bool fallback, bool& out);

/// Reads the positive integer variable `name`: unset or empty gives `fallback`; anything but
/// a decimal integer >= 1 is InvalidArgument naming the variable and its value.
[[nodiscard]] Status readEnvCount(const char* name, std::size_t fallback, std::size_t& out);

/// Default of CHIMERA_CHECK_ARGS: on in debug builds, off when NDEBUG is defined.
inline constexpr bool kCheckArgsByDefault =
#ifdef NDEBUG
    false;
#else
    true;
#endif

/// CHIMERA_CHECK_ARGS (cross-rank argument agreement before each collective), defaulting to
/// kCheckArgsByDefault. InvalidArgument on a malformed value, as readEnvSwitch.
[[nodiscard]] Status checkArgsFromEnv(bool& out);

}  // namespace chimera::detail
