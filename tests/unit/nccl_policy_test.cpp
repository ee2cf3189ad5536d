// SPDX-License-Identifier: Apache-2.0
// The CUDA-free decisions of the NCCL backend, checked on every machine: which GPU a rank
// drives, what the NCCL library found at run time can do, and the parsing of its settings.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "common/env.hpp"
#include "nccl/deadline_poll.hpp"
#include "nccl/device_choice.hpp"
#include "nccl/nccl_bootstrap_env.hpp"
#include "nccl/nccl_options.hpp"
#include "nccl/nccl_version.hpp"

namespace chimera {
namespace {

using std::chrono::milliseconds;

TEST(CudaDeviceChoice, OneVisibleGpuPerProcessIsDeviceZeroOnEveryRank) {
  // SLURM / Kubernetes / per-rank CUDA_VISIBLE_DEVICES: 8 ranks on a node, each sees one GPU.
  for (int localRank = 0; localRank < 8; ++localRank) {
    int device = -1;
    ASSERT_TRUE(detail::chooseCudaDevice(localRank, 8, 1, device).isOk()) << localRank;
    EXPECT_EQ(device, 0) << localRank;
  }
}

TEST(CudaDeviceChoice, AllGpusVisibleGivesTheNodeLocalRank) {
  for (int localRank = 0; localRank < 8; ++localRank) {
    int device = -1;
    ASSERT_TRUE(detail::chooseCudaDevice(localRank, 8, 8, device).isOk());
    EXPECT_EQ(device, localRank);
  }
  int device = -1;
  ASSERT_TRUE(detail::chooseCudaDevice(3, 4, 8, device).isOk()) << "more GPUs than ranks";
  EXPECT_EQ(device, 3);
}

TEST(CudaDeviceChoice, AmbiguousOrImpossibleMappingsAreNamed) {
  int device = -1;
  const Status fewer = detail::chooseCudaDevice(5, 8, 4, device);
  EXPECT_EQ(fewer.code(), StatusCode::InvalidArgument);
  EXPECT_NE(fewer.message().find("8 ranks on this node but 4 CUDA devices"), std::string::npos) << fewer.message();
  const Status none = detail::chooseCudaDevice(0, 1, 0, device);
  EXPECT_EQ(none.code(), StatusCode::InvalidArgument);
  EXPECT_NE(none.message().find("no CUDA device"), std::string::npos) << none.message();
  EXPECT_EQ(detail::chooseCudaDevice(2, 2, 2, device).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(detail::chooseCudaDevice(-1, 2, 2, device).code(), StatusCode::InvalidArgument);
}

TEST(NcclVersion, FeaturesFollowTheRuntimeVersion) {
  detail::NcclFeatures f;
  ASSERT_TRUE(detail::ncclFeaturesFor(detail::ncclVersionCode(2, 18, 1), f).isOk());
  EXPECT_EQ(f.text, "2.18.1");
  EXPECT_FALSE(f.allToAll);
  EXPECT_FALSE(f.groupedAbort);
  EXPECT_FALSE(f.multiRankPerGpu);
  ASSERT_TRUE(detail::ncclFeaturesFor(detail::ncclVersionCode(2, 28, 9), f).isOk());
  EXPECT_TRUE(f.allToAll);
  EXPECT_TRUE(f.groupedAbort);
  EXPECT_FALSE(f.multiRankPerGpu);
  ASSERT_TRUE(detail::ncclFeaturesFor(detail::ncclVersionCode(2, 31, 0), f).isOk());
  EXPECT_TRUE(f.multiRankPerGpu);
  ASSERT_TRUE(detail::ncclFeaturesFor(detail::ncclVersionCode(3, 0, 0), f).isOk());
  EXPECT_EQ(f.text, "3.0.0");
  EXPECT_TRUE(f.allToAll && f.groupedAbort && f.multiRankPerGpu);
}

TEST(NcclVersion, TooOldLibraryIsAClearUnsupported) {
  detail::NcclFeatures f;
  const Status old = detail::ncclFeaturesFor(detail::ncclVersionCode(2, 17, 1), f);
  EXPECT_EQ(old.code(), StatusCode::Unsupported);
  EXPECT_NE(old.message().find("2.17.1"), std::string::npos) << old.message();
  EXPECT_NE(old.message().find(">= 2.18.0"), std::string::npos) << old.message();
  // Before 2.9 NCCL encoded versions as major*1000 + minor*100 + patch.
  const Status ancient = detail::ncclFeaturesFor(2708, f);
  EXPECT_EQ(ancient.code(), StatusCode::Unsupported);
  EXPECT_NE(ancient.message().find("2.7.8"), std::string::npos) << ancient.message();
}

TEST(NcclOptions, TimeoutAcceptsOnlyPlainMillisecondsInRange) {
  // The one CHIMERA_TIMEOUT_MS parser, shared with the MPI backend.
  std::int64_t value = 0;
  for (const char* good : {"1", "600000", "604800000"}) {
    ::setenv("CHIMERA_TIMEOUT_MS", good, 1);
    ASSERT_TRUE(detail::timeoutMsFromEnv(value).isOk()) << good;
    EXPECT_EQ(value, std::stoll(good));
  }
  // Values past a week used to be accepted up to INT64_MAX and overflow the deadline arithmetic.
  for (const char* bad : {"0", "-5", "+5", " 5", "5 ", "5ms", "1e3", "soon", "99999999999999999999", "604800001"}) {
    ::setenv("CHIMERA_TIMEOUT_MS", bad, 1);
    const Status status = detail::timeoutMsFromEnv(value);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << "'" << bad << "'";
    EXPECT_NE(status.message().find(std::string("'") + bad + "'"), std::string::npos) << status.message();
  }
  ::unsetenv("CHIMERA_TIMEOUT_MS");
}

TEST(NcclOptions, EnvironmentIsReadAndMalformedValuesNamed) {
  ::setenv("CHIMERA_TIMEOUT_MS", "2500", 1);
  ::setenv("CHIMERA_NCCL_ALLTOALL", "grouped", 1);
  ::setenv("CHIMERA_CHECK_ARGS", "on", 1);
  detail::NcclBackendOptions options;
  ASSERT_TRUE(detail::ncclBackendOptionsFromEnv(options).isOk());
  EXPECT_EQ(options.timeout, milliseconds(2500));
  EXPECT_TRUE(options.groupedAllToAll);
  EXPECT_TRUE(options.checkArgs);
  ::setenv("CHIMERA_TIMEOUT_MS", "18446744073709551616", 1);
  const Status overflow = detail::ncclBackendOptionsFromEnv(options);
  EXPECT_EQ(overflow.code(), StatusCode::InvalidArgument);
  ::setenv("CHIMERA_TIMEOUT_MS", "100", 1);
  ::setenv("CHIMERA_NCCL_ALLTOALL", "pairwise", 1);
  const Status mode = detail::ncclBackendOptionsFromEnv(options);
  EXPECT_EQ(mode.code(), StatusCode::InvalidArgument);
  EXPECT_NE(mode.message().find("pairwise"), std::string::npos) << mode.message();
  ::unsetenv("CHIMERA_NCCL_ALLTOALL");
  ::setenv("CHIMERA_LOG_LEVEL", "verbose", 1);
  const Status level = detail::ncclBackendOptionsFromEnv(options);
  EXPECT_EQ(level.code(), StatusCode::InvalidArgument);
  EXPECT_NE(level.message().find("CHIMERA_LOG_LEVEL='verbose'"), std::string::npos) << level.message();
  ::unsetenv("CHIMERA_LOG_LEVEL");
  ::unsetenv("CHIMERA_TIMEOUT_MS");
  ::unsetenv("CHIMERA_CHECK_ARGS");
  ASSERT_TRUE(detail::ncclBackendOptionsFromEnv(options).isOk());
  EXPECT_EQ(options.timeout, milliseconds(600000));
  EXPECT_FALSE(options.groupedAllToAll);
}

TEST(NcclBootstrapEnv, UniqueIdRoundTripsThroughHex) {
  NcclUniqueId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<char>(i * 37 + 5);
  const std::string hex = detail::uniqueIdToHex(id);
  ASSERT_EQ(hex.size(), 2 * kNcclUniqueIdBytes);
  NcclUniqueId back;
  ASSERT_TRUE(detail::uniqueIdFromHex(hex, back).isOk());
  EXPECT_EQ(back.bytes, id.bytes);
  EXPECT_EQ(detail::uniqueIdFromHex(hex.substr(1), back).code(), StatusCode::InvalidArgument);
  std::string bad = hex;
  bad[17] = 'g';
  const Status status = detail::uniqueIdFromHex(bad, back);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("position 17"), std::string::npos) << status.message();
}

TEST(NcclBootstrapEnv, LauncherVariablesAreReadAndCheckedWithNames) {
  NcclUniqueId id;
  id.bytes[0] = 42;
  ::setenv("CHIMERA_NCCL_UNIQUE_ID", detail::uniqueIdToHex(id).c_str(), 1);
  ::setenv("CHIMERA_RANK", "5", 1);
  ::setenv("CHIMERA_WORLD_SIZE", "8", 1);
  ::unsetenv("CHIMERA_LOCAL_RANK");
  ::unsetenv("CHIMERA_LOCAL_WORLD_SIZE");
  detail::NcclBootstrapEnv env;
  ASSERT_TRUE(detail::readNcclBootstrapEnv(env).isOk());
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.worldSize, 8);
  EXPECT_EQ(env.localRank, 5) << "defaults to the global rank (one node)";
  EXPECT_EQ(env.localWorldSize, 8);
  EXPECT_EQ(env.id.bytes[0], 42);
  ::setenv("CHIMERA_LOCAL_RANK", "1", 1);
  ::setenv("CHIMERA_LOCAL_WORLD_SIZE", "4", 1);
  ASSERT_TRUE(detail::readNcclBootstrapEnv(env).isOk());
  EXPECT_EQ(env.localRank, 1);
  EXPECT_EQ(env.localWorldSize, 4);
  ::setenv("CHIMERA_RANK", "8", 1);
  Status status = detail::readNcclBootstrapEnv(env);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("CHIMERA_RANK=8 outside CHIMERA_WORLD_SIZE=8"), std::string::npos)
      << status.message();
  ::setenv("CHIMERA_RANK", "x1", 1);
  status = detail::readNcclBootstrapEnv(env);
  EXPECT_NE(status.message().find("CHIMERA_RANK='x1'"), std::string::npos) << status.message();
  ::setenv("CHIMERA_RANK", "1", 1);
  ::unsetenv("CHIMERA_NCCL_UNIQUE_ID");
  status = detail::readNcclBootstrapEnv(env);
  EXPECT_NE(status.message().find("CHIMERA_NCCL_UNIQUE_ID is not set"), std::string::npos) << status.message();
  ::unsetenv("CHIMERA_WORLD_SIZE");
  status = detail::readNcclBootstrapEnv(env);
  EXPECT_NE(status.message().find("CHIMERA_WORLD_SIZE is not set"), std::string::npos) << status.message();
  for (const char* name : {"CHIMERA_RANK", "CHIMERA_LOCAL_RANK", "CHIMERA_LOCAL_WORLD_SIZE"}) ::unsetenv(name);
}

TEST(DeadlinePoll, SettledStatesReturnAtOnceAndPendingEndsAtTheDeadline) {
  using detail::PollState;
  int polls = 0;
  EXPECT_EQ(
      detail::pollUntilSettled([&] { return ++polls < 5 ? PollState::Pending : PollState::Done; }, milliseconds(10000)),
      PollState::Done);
  EXPECT_EQ(polls, 5);
  EXPECT_EQ(detail::pollUntilSettled([] { return PollState::Failed; }, milliseconds(10000)), PollState::Failed);
  // A peer that never answers: the wait ends at the deadline, not before and not long after.
  const auto start = std::chrono::steady_clock::now();
  polls = 0;
  EXPECT_EQ(detail::pollUntilSettled([&] { return ++polls, PollState::Pending; }, milliseconds(200)),
            PollState::Pending);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, milliseconds(200));
  EXPECT_LT(waited, milliseconds(2000)) << "polls back off to 1 ms, so the overshoot is small (loaded machine: 10x)";
  EXPECT_GT(polls, 10);
  // Work that finishes at the deadline still counts: one more poll after it.
  const auto begin = std::chrono::steady_clock::now();
  EXPECT_EQ(detail::pollUntilSettled(
                [&] {
                  return std::chrono::steady_clock::now() - begin >= milliseconds(50) ? PollState::Done
                                                                                      : PollState::Pending;
                },
                milliseconds(50)),
            PollState::Done);
}

}  // namespace
}  // namespace chimera
