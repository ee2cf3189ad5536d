// SPDX-License-Identifier: Apache-2.0
// Environment variables (private): every variable the library reads goes through here, so
// that every malformed value is an InvalidArgument naming the variable and its value, and the
// backends, the executor and the Session accept the same spellings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Reads the on/off variable `name`: unset or empty gives `fallback`; `1`, `on`, `true` and
/// `0`, `off`, `false` are accepted; anything else is InvalidArgument naming the variable and
/// its value.
[[nodiscard]] Status readEnvSwitch(const char* name, bool fallback, bool& out);

/// Reads the positive integer variable `name`: unset or empty gives `fallback`; anything but
/// a decimal integer >= 1 is InvalidArgument naming the variable and its value.
[[nodiscard]] Status readEnvCount(const char* name, std::size_t fallback, std::size_t& out);

/// The value of `name`, or std::nullopt when it is unset or empty.
std::optional<std::string> readEnvText(const char* name);

/// The cost model `CHIMERA_TOPOLOGY` names, else `fallback` (the backend's
/// `defaultTopology`): what an Executor given no cost and a routed exchange given no topology
/// price with.
std::string topologyFromEnv(std::string fallback);

/// True when `name` is set at all (even empty): how a launcher's own variables are detected.
bool envIsSet(const char* name);

/// Reads the variable `name` whose value must be one of `choices`: unset or empty leaves `out`
/// unchanged; otherwise `out` becomes the index of the value in `choices`; anything else is
/// InvalidArgument naming the variable, its value and the choices.
[[nodiscard]] Status readEnvChoice(const char* name, std::span<const std::string_view> choices, std::size_t& out);

/// Reads the byte-size variable `name` (parseSize's spellings: 4096, 64K, 1M): unset or empty
/// leaves `out` unchanged; anything but a size >= 1 is InvalidArgument naming the variable and
/// its value.
[[nodiscard]] Status readEnvSize(const char* name, std::size_t& out);

/// Reads the non-negative int variable `name` (a rank or a count of ranks): unset or empty gives
/// `fallback`; anything else but a decimal integer in 0..INT_MAX is InvalidArgument naming the
/// variable and its value.
[[nodiscard]] Status readEnvIndex(const char* name, int fallback, int& out);

/// CHIMERA_LOG_LEVEL: `out` is one of spdlog's level names (trace debug info warn warning error
/// err critical off), "warn" when unset or empty. A malformed
/// value is InvalidArgument naming the variable and its value: the backends' factories return
/// it, while the loggers (which cannot fail) keep "warn".
[[nodiscard]] Status logLevelFromEnv(std::string& out);

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
/// Largest CHIMERA_TIMEOUT_MS accepted: one week (a deadline now + timeout must not overflow
/// the clock's nanoseconds).
inline constexpr std::int64_t kMaxTimeoutMs = 7LL * 24 * 3600 * 1000;

/// CHIMERA_CHECK_ARGS (cross-rank argument agreement before each collective), defaulting to
/// `fallback`. InvalidArgument on a malformed value, as readEnvSwitch.
[[nodiscard]] Status checkArgsFromEnv(bool& out, bool fallback = kCheckArgsByDefault);

/// CHIMERA_TIMEOUT_MS: how long (milliseconds) a backend waits for a collective or transfer
/// that makes no progress before it returns Timeout; unset or empty gives kDefaultTimeoutMs.
/// Shared by the MPI and NCCL backends. InvalidArgument naming the variable when the value is
/// not a decimal integer in 1..kMaxTimeoutMs.
[[nodiscard]] Status timeoutMsFromEnv(std::int64_t& out);

}  // namespace chimera::detail
