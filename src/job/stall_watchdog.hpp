// SPDX-License-Identifier: Apache-2.0
// A watchdog for programs that mix chimera with plain MPI calls (chimera's tools): a blocking
// MPI call has no timeout, so a peer that stalls while this rank waits in one would keep the
// job alive forever. The program names each stretch of work as it enters it; when one takes
// longer than the limit, the watchdog ends the job (job_end.hpp) naming it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string_view>
#include <thread>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Ends the job when the program stays in one stretch of work (from an `enter` to the next
/// `enter` or `leave`) longer than `limit`. Stretches cover the calls that wait for peers; local
/// work (set-up, filling and checking buffers) runs outside them, unbounded. Set the limit
/// above the backend's CHIMERA_TIMEOUT_MS, so that a stall inside a chimera call is reported by
/// the backend (which names the late ranks) first.
class StallWatchdog {
 public:
  /// Starts the watchdog thread for world rank `rank`.
  StallWatchdog(int rank, std::chrono::milliseconds limit);
  /// Stops the thread.
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  /// Starts a new stretch: iteration `iteration` (-1: none) of `what` ("chimera-bench allreduce
  /// 16777216 B: MPI baseline"), which the caller keeps alive until the next `enter`. Cheap
  /// enough for a timed loop: a lock and two stores.
  void enter(std::string_view what, int iteration = -1);
  /// Ends the current stretch; the watchdog waits for the next.
  void leave();

 private:
  void watch();

  int rank_;
  std::chrono::milliseconds limit_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool armed_ = false;
  std::string_view what_;
  int iteration_ = -1;
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
  std::thread thread_;
};

/// Runs `call`, a blocking call that has no bounded form (MPI_Comm_split, MPI_Comm_create_group,
/// MPI_Finalize), under a StallWatchdog of `limit` for world rank `rank`: when it has not returned
/// by then, a peer stalled or died inside it, and the job ends (job_end.hpp) naming `what`.
/// Returns what `call` returns.
template <typename Call>
auto watchedBlockingCall(int rank, std::chrono::milliseconds limit, std::string_view what, Call&& call) {
  StallWatchdog watchdog(rank, limit);
  watchdog.enter(what);
  auto result = call();
  watchdog.leave();
  return result;
}

/// The watchdog limit of chimera's tools: CHIMERA_TIMEOUT_MS (default 600000) plus 2 s.
/// InvalidArgument when the variable is malformed.
[[nodiscard]] Status toolStallLimit(std::chrono::milliseconds& out);

}  // namespace chimera::detail
