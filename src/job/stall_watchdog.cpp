// SPDX-License-Identifier: Apache-2.0
// Implements the StallWatchdog: one thread that checks how long the current stretch has run.
#include "job/stall_watchdog.hpp"

#include <fmt/format.h>

#include "common/env.hpp"
#include "core/check.hpp"
#include "job/job_end.hpp"

namespace chimera::detail {

StallWatchdog::StallWatchdog(int rank, std::chrono::milliseconds limit)
    : rank_(rank), limit_(limit), thread_([this] { watch(); }) {}

StallWatchdog::~StallWatchdog() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StallWatchdog::enter(std::string_view what, int iteration) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    what_ = what;
    iteration_ = iteration;
    since_ = std::chrono::steady_clock::now();
    if (armed_) return;
    armed_ = true;
  }
  wake_.notify_all();
}

void StallWatchdog::leave() {
  const std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
}

void StallWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!armed_) {
      wake_.wait(lock);
      continue;
    }
    const auto deadline = since_ + limit_;
    if (std::chrono::steady_clock::now() >= deadline) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since_);
      endJob("job", rank_,
             Status::timeout(fmt::format("{}{} made no progress for {} ms (limit {} ms, from CHIMERA_TIMEOUT_MS); "
                                         "a peer stalled in it or never joined it",
                                         what_, iteration_ >= 0 ? fmt::format(", iteration {},", iteration_) : "",
                                         ms.count(), limit_.count())),
             limit_);
    }
    wake_.wait_until(lock, deadline);
  }
}

Status toolStallLimit(std::chrono::milliseconds& out) {
  std::int64_t timeoutMs = 0;
  CHIMERA_RETURN_IF_ERROR(timeoutMsFromEnv(timeoutMs));
  out = std::chrono::milliseconds(timeoutMs + 2000);
  return Status::ok();
}

}  // namespace chimera::detail
