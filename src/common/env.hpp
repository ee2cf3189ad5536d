// SPDX-License-Identifier: Apache-2.0
// Environment switches (private): one parser for every CHIMERA_* on/off variable, so the
// backends, the executor and the Session accept the same spellings.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Reads the on/off variable `name`: unset or empty gives `fallback`; `1`, `on`, `true` and
/// `0`, `off`, `false` are accepted; anything else is InvalidArgument naming the variable and
/// its value.
[[nodiscard]] Status readEnvSwitch(const char* name, bool fallback, bool& out);

/// Reads the positive integer variable `name`: unset or empty gives `fallback`; anything but
/// a decimal integer >= 1 is InvalidArgument naming the variable and its value.
[[nodiscard]] Status readEnvCount(const char* name, std::size_t fallback, std::size_t& out);

/// Default of CHIMERA_CHECK_ARGS for the NCCL backend and the executor: on in debug builds,
/// off when NDEBUG is defined (the NCCL check synchronises the stream). The MPI backend's
/// default is on in every build (kMpiCheckArgsByDefault, docs/reliability.md).
inline constexpr bool kCheckArgsByDefault =
#ifdef NDEBUG
    false;
#else
    true;
#endif

/// Default of CHIMERA_CHECK_ARGS for the MPI backend: on in every build type (one small
/// exchange per call; docs/reliability.md has its measured cost).
inline constexpr bool kMpiCheckArgsByDefault = true;

/// Default of CHIMERA_TIMEOUT_MS: ten minutes.
inline constexpr std::int64_t kDefaultTimeoutMs = 600000;

/// CHIMERA_CHECK_ARGS (cross-rank argument agreement before each collective), defaulting to
/// `fallback`. InvalidArgument on a malformed value, as readEnvSwitch.
[[nodiscard]] Status checkArgsFromEnv(bool& out, bool fallback = kCheckArgsByDefault);

/// CHIMERA_TIMEOUT_MS: how long (milliseconds) a backend waits for a collective or transfer
/// that makes no progress before it returns Timeout; unset or empty gives kDefaultTimeoutMs.
/// Shared by the MPI and NCCL backends. InvalidArgument naming the variable when the value is
/// not a decimal integer >= 1.
[[nodiscard]] Status timeoutMsFromEnv(std::int64_t& out);

}  // namespace chimera::detail
