// SPDX-License-Identifier: Apache-2.0
// Logging (private): spdlog behind one header. One logger per subsystem, the rank in the
// pattern, level from CHIMERA_LOG_LEVEL (trace|debug|info|warn|error|critical|off; default
// warn; a malformed value fails backend creation), colour only when stderr is a terminal and
// not under mpirun.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string_view>

namespace chimera::detail {

/// Tells the logging setup this process's world rank (shown as "[r3]"); call once the rank is known.
void setLogRank(int rank);

/// The logger of subsystem `name` ("mpi", "planner", "exec", ...), created on first use.
std::shared_ptr<spdlog::logger> logger(std::string_view name);

}  // namespace chimera::detail

#define CHIMERA_LOG_TRACE(subsystem, ...) ::chimera::detail::logger(subsystem)->trace(__VA_ARGS__)
#define CHIMERA_LOG_DEBUG(subsystem, ...) ::chimera::detail::logger(subsystem)->debug(__VA_ARGS__)
#define CHIMERA_LOG_INFO(subsystem, ...) ::chimera::detail::logger(subsystem)->info(__VA_ARGS__)
#define CHIMERA_LOG_WARN(subsystem, ...) ::chimera::detail::logger(subsystem)->warn(__VA_ARGS__)
#define CHIMERA_LOG_ERROR(subsystem, ...) ::chimera::detail::logger(subsystem)->error(__VA_ARGS__)
