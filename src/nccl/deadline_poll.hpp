// SPDX-License-Identifier: Apache-2.0
// The bounded wait behind every NCCL call of the backend: poll a state until it settles or a
// deadline passes, with a back-off from 1 us to 1 ms between polls. CUDA-free (the NCCL
// backend passes a probe over ncclCommGetAsyncError), so the deadline logic is unit-tested.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace chimera::detail {

/// What one poll found.
enum class PollState { Pending, Done, Failed };

/// Calls `probe()` until it returns Done or Failed, or until `timeout` has passed since the
/// call (then returns Pending). The probe runs at least once, and once more after the
/// deadline, so work that finished just before it counts as done.
template <typename Probe>
PollState pollUntilSettled(Probe&& probe, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(1);
  while (true) {
    const bool late = std::chrono::steady_clock::now() >= deadline;
    const PollState state = probe();
    if (state != PollState::Pending || late) return state;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace chimera::detail
