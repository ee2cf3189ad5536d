// SPDX-License-Identifier: Apache-2.0
// Ending the job from one rank (src/job): a blocking call that has no bounded form runs under a
// watchdog, returns what the call returns when in time, and ends the process (exit status 3,
// naming the call) when not; without MPI initialised the end is _Exit.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "job/job_end.hpp"
#include "job/stall_watchdog.hpp"

namespace chimera::detail {
namespace {

TEST(WatchedBlockingCall, ReturnsWhatTheCallReturnsInTime) {
  const int result = watchedBlockingCall(0, std::chrono::milliseconds(5000), "a quick call", [] { return 42; });
  EXPECT_EQ(result, 42);
}

TEST(WatchedBlockingCallDeathTest, EndsTheJobNamingACallThatNeverReturns) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";  // the watchdog is a thread
  EXPECT_EXIT(
      {
        (void)watchedBlockingCall(7, std::chrono::milliseconds(100), "MPI_Comm_split for axes tp", [] {
          std::this_thread::sleep_for(std::chrono::seconds(30));  // a peer that never joins
          return 0;
        });
      },
      ::testing::ExitedWithCode(kJobAbortExitCode),
      "rank 7 cannot go on: .*MPI_Comm_split for axes tp made no progress");
}

TEST(JobEndGrace, IsTheTimeoutPlusOneSecondAtMostFive) {
  EXPECT_EQ(jobEndGrace(std::chrono::milliseconds(100)), std::chrono::milliseconds(1100));
  EXPECT_EQ(jobEndGrace(std::chrono::milliseconds(600000)), std::chrono::milliseconds(5000));
}

}  // namespace
}  // namespace chimera::detail
