// SPDX-License-Identifier: Apache-2.0
// Tests the CHIMERA_* environment parser: spellings accepted, malformed values rejected.
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

TEST(EnvSwitch, CheckArgsDefaultsByBuildTypeExceptOnMpi) {
  ::unsetenv("CHIMERA_CHECK_ARGS");
  bool value = !detail::kCheckArgsByDefault;
  ASSERT_TRUE(detail::checkArgsFromEnv(value).isOk());
  EXPECT_EQ(value, detail::kCheckArgsByDefault);
  value = false;
  ASSERT_TRUE(detail::checkArgsFromEnv(value, detail::kMpiCheckArgsByDefault).isOk());
  EXPECT_TRUE(value);
  ::setenv("CHIMERA_CHECK_ARGS", "0", 1);
  ASSERT_TRUE(detail::checkArgsFromEnv(value, detail::kMpiCheckArgsByDefault).isOk());
  EXPECT_FALSE(value);
  ::setenv("CHIMERA_CHECK_ARGS", "1", 1);
  ASSERT_TRUE(detail::checkArgsFromEnv(value).isOk());
  EXPECT_TRUE(value);
  ::unsetenv("CHIMERA_CHECK_ARGS");
}

TEST(EnvTimeout, DefaultValueAndMalformedSpellings) {
  ::unsetenv("CHIMERA_TIMEOUT_MS");
  std::int64_t ms = 0;
  ASSERT_TRUE(detail::timeoutMsFromEnv(ms).isOk());
  EXPECT_EQ(ms, 600000);
  ::setenv("CHIMERA_TIMEOUT_MS", "2500", 1);
  ASSERT_TRUE(detail::timeoutMsFromEnv(ms).isOk());
  EXPECT_EQ(ms, 2500);
  for (const char* bad : {"0", "-5", "soon", "10s", "99999999999999999999999"}) {
    ::setenv("CHIMERA_TIMEOUT_MS", bad, 1);
    const Status status = detail::timeoutMsFromEnv(ms);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << bad;
    EXPECT_NE(status.message().find("CHIMERA_TIMEOUT_MS"), std::string::npos) << status.message();
  }
  ::unsetenv("CHIMERA_TIMEOUT_MS");
}

TEST(EnvValues, ChoicesSizesAndIndicesNameTheVariableAndTheValue) {
  constexpr const char* kName = "CHIMERA_TEST_VALUE";
  ::unsetenv(kName);
  static constexpr std::string_view kChoices[] = {"a", "b"};
  std::size_t index = 7;
  ASSERT_TRUE(detail::readEnvChoice(kName, kChoices, index).isOk());
  EXPECT_EQ(index, 7u);  // unset leaves it
  ::setenv(kName, "b", 1);
  ASSERT_TRUE(detail::readEnvChoice(kName, kChoices, index).isOk());
  EXPECT_EQ(index, 1u);
  ::setenv(kName, "c", 1);
  Status status = detail::readEnvChoice(kName, kChoices, index);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("CHIMERA_TEST_VALUE='c' is not one of a b"), std::string::npos) << status.message();

  std::size_t bytes = 5;
  ::setenv(kName, "64K", 1);
  ASSERT_TRUE(detail::readEnvSize(kName, bytes).isOk());
  EXPECT_EQ(bytes, 65536u);
  for (const char* bad : {"0", "-1", "64Q", "lots"}) {
    ::setenv(kName, bad, 1);
    status = detail::readEnvSize(kName, bytes);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << bad;
    EXPECT_NE(status.message().find(std::string("CHIMERA_TEST_VALUE='") + bad + "'"), std::string::npos)
        << status.message();
  }
  EXPECT_EQ(bytes, 65536u);

  int rank = -1;
  ::unsetenv(kName);
  ASSERT_TRUE(detail::readEnvIndex(kName, 3, rank).isOk());
  EXPECT_EQ(rank, 3);
  ::setenv(kName, "0", 1);
  ASSERT_TRUE(detail::readEnvIndex(kName, 3, rank).isOk());
  EXPECT_EQ(rank, 0);
  for (const char* bad : {"-1", "1x", "99999999999"}) {
    ::setenv(kName, bad, 1);
    status = detail::readEnvIndex(kName, 3, rank);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << bad;
    EXPECT_NE(status.message().find(std::string("CHIMERA_TEST_VALUE='") + bad + "'"), std::string::npos)
        << status.message();
  }
  ::unsetenv(kName);
}

TEST(EnvLogLevel, DefaultsToWarnAndAMalformedLevelIsAnError) {
  ::unsetenv("CHIMERA_LOG_LEVEL");
  std::string level;
  ASSERT_TRUE(detail::logLevelFromEnv(level).isOk());
  EXPECT_EQ(level, "warn");
  ::setenv("CHIMERA_LOG_LEVEL", "debug", 1);
  ASSERT_TRUE(detail::logLevelFromEnv(level).isOk());
  EXPECT_EQ(level, "debug");
  ::setenv("CHIMERA_LOG_LEVEL", "loud", 1);
  const Status status = detail::logLevelFromEnv(level);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("CHIMERA_LOG_LEVEL='loud'"), std::string::npos) << status.message();
  ::unsetenv("CHIMERA_LOG_LEVEL");
}

}  // namespace
}  // namespace chimera
