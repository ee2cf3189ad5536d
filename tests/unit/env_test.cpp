// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/env.hpp"

namespace chimera {
namespace {

TEST(EnvSwitch, UnsetKeepsFallbackAndEverySpellingIsRead) {
  constexpr const char* kName = "CHIMERA_TEST_SWITCH";
  ::unsetenv(kName);
  bool value = false;
  ASSERT_TRUE(detail::readEnvSwitch(kName, true, value).isOk());
  EXPECT_TRUE(value);
  ::setenv(kName, "", 1);
  ASSERT_TRUE(detail::readEnvSwitch(kName, false, value).isOk());
  EXPECT_FALSE(value);
  for (const char* on : {"1", "on", "true"}) {
    ::setenv(kName, on, 1);
    ASSERT_TRUE(detail::readEnvSwitch(kName, false, value).isOk()) << on;
    EXPECT_TRUE(value) << on;
  }
  for (const char* off : {"0", "off", "false"}) {
    ::setenv(kName, off, 1);
    ASSERT_TRUE(detail::readEnvSwitch(kName, true, value).isOk()) << off;
    EXPECT_FALSE(value) << off;
  }
  ::setenv(kName, "yes", 1);
  const Status bad = detail::readEnvSwitch(kName, true, value);
  EXPECT_EQ(bad.code(), StatusCode::InvalidArgument);
  EXPECT_NE(bad.message().find("CHIMERA_TEST_SWITCH='yes'"), std::string::npos) << bad.message();
  ::unsetenv(kName);
}

TEST(EnvSwitch, CheckArgsDefaultsByBuildType) {
  ::unsetenv("CHIMERA_CHECK_ARGS");
  bool value = !detail::kCheckArgsByDefault;
  ASSERT_TRUE(detail::checkArgsFromEnv(value).isOk());
  EXPECT_EQ(value, detail::kCheckArgsByDefault);
  ::setenv("CHIMERA_CHECK_ARGS", "1", 1);
  ASSERT_TRUE(detail::checkArgsFromEnv(value).isOk());
  EXPECT_TRUE(value);
  ::unsetenv("CHIMERA_CHECK_ARGS");
}

}  // namespace
}  // namespace chimera
