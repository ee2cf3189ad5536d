// SPDX-License-Identifier: Apache-2.0
// Tests logging: CHIMERA_LOG_LEVEL and the rank in the pattern.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/log.hpp"

namespace chimera {
namespace {

// One process, one logging setup: the environment is read when the first logger is made,
// so this binary holds only this test.
TEST(Log, LevelFromEnvironmentRankInPatternNoColourUnderMpirun) {
  ::setenv("CHIMERA_LOG_LEVEL", "info", 1);
  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  detail::setLogRank(3);
  testing::internal::CaptureStderr();
  CHIMERA_LOG_INFO("test", "hello {}", 42);
  CHIMERA_LOG_DEBUG("test", "below the level {}", 1);
  detail::logger("test")->flush();
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("[r3]"), std::string::npos) << out;
  EXPECT_NE(out.find("[chimera:test]"), std::string::npos) << out;
  EXPECT_NE(out.find("hello 42"), std::string::npos) << out;
  EXPECT_EQ(out.find("below the level"), std::string::npos) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << "colour escape in non-terminal output: " << out;
}

}  // namespace
}  // namespace chimera
