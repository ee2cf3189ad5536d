// SPDX-License-Identifier: Apache-2.0
// Implements logging: spdlog loggers per subsystem, level from CHIMERA_LOG_LEVEL.
#include "common/log.hpp"

#include "common/env.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <unordered_map>

namespace chimera::detail {
namespace {

struct LogState {
  std::mutex mutex;
  int rank = -1;
  spdlog::sink_ptr sink;
  std::unordered_map<std::string, std::shared_ptr<spdlog::logger>> loggers;
};

LogState& state() {
  static LogState instance;
  return instance;
}

bool underLauncher() { return envIsSet("OMPI_COMM_WORLD_RANK") || envIsSet("PMI_RANK") || envIsSet("PMIX_RANK"); }

// A malformed CHIMERA_LOG_LEVEL is the backend factories' error (logLevelFromEnv); a logger
// cannot fail, so it keeps the default.
spdlog::level::level_enum levelFromEnv() {
  std::string name;
  if (!logLevelFromEnv(name).isOk()) return spdlog::level::warn;
  return spdlog::level::from_str(name);
}

std::string pattern(int rank) {
  const std::string who = rank >= 0 ? "[r" + std::to_string(rank) + "]" : "[r?]";
  return "[%H:%M:%S.%e] " + who + " [chimera:%n] [%l] %v";
}

spdlog::sink_ptr makeSink() {
  if (isatty(STDERR_FILENO) != 0 && !underLauncher()) return std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  return std::make_shared<spdlog::sinks::stderr_sink_mt>();
}

}  // namespace

void setLogRank(int rank) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.rank = rank;
  for (auto& [name, log] : s.loggers) log->set_pattern(pattern(rank));
}

std::shared_ptr<spdlog::logger> logger(std::string_view name) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  const std::string key(name);
  if (auto it = s.loggers.find(key); it != s.loggers.end()) return it->second;
  if (!s.sink) s.sink = makeSink();
  auto log = std::make_shared<spdlog::logger>(key, s.sink);
  log->set_level(levelFromEnv());
  log->set_pattern(pattern(s.rank));
  s.loggers.emplace(key, log);
  return log;
}

}  // namespace chimera::detail
