// SPDX-License-Identifier: Apache-2.0
// The C API on 8 ranks (mesh pp=2,tp=4): results, error strings, bad input, the plain
// collectives, redistribution and sessions, checked against values every rank computes.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "chimera/chimera.h"
#include "mpi_test_util.hpp"

namespace chimera::testing {
namespace {

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(chimeraCommInitMpi(&comm_, "pp=2,tp=4"), chimeraSuccess) << chimeraGetLastError();
    ASSERT_EQ(chimeraCommRank(comm_, &rank_), chimeraSuccess);
  }
  void TearDown() override { EXPECT_EQ(chimeraCommDestroy(comm_), chimeraSuccess); }
  chimeraComm_t comm_ = nullptr;
  int rank_ = 0;
};

TEST(CApiErrors, EveryResultHasItsOwnString) {
  std::vector<std::string> seen;
  for (int r = chimeraSuccess; r <= chimeraInternalError; ++r) {
    const std::string text = chimeraGetErrorString(static_cast<chimeraResult_t>(r));
    EXPECT_FALSE(text.empty());
    for (const std::string& other : seen) EXPECT_NE(text, other);
    seen.push_back(text);
  }
  EXPECT_EQ(std::string(chimeraGetErrorString(static_cast<chimeraResult_t>(99))), "unknown chimeraResult_t");
}

TEST(CApiErrors, BadInputNamesTheProblem) {
  EXPECT_EQ(chimeraCommInitMpi(nullptr, "pp=2,tp=4"), chimeraInvalidArgument);
  chimeraComm_t comm = nullptr;
  EXPECT_EQ(chimeraCommInitMpi(&comm, "pp=3,tp=4"), chimeraInvalidArgument);
  EXPECT_NE(std::string(chimeraGetLastError()).find("pp=3"), std::string::npos) << chimeraGetLastError();
  EXPECT_EQ(chimeraCommInitMpi(&comm, nullptr), chimeraInvalidArgument);
  float x = 0;
  EXPECT_EQ(chimeraAllReduce(&x, &x, 1, chimeraFloat32, chimeraSum, "tp", nullptr), chimeraInvalidArgument);
  int rank = 0;
  EXPECT_EQ(chimeraCommRank(nullptr, &rank), chimeraInvalidArgument);
  EXPECT_EQ(chimeraSessionFlush(nullptr), chimeraInvalidArgument);
  EXPECT_EQ(chimeraCommDestroy(nullptr), chimeraSuccess);
#ifndef CHIMERA_HAS_CUDA
  chimeraUniqueId id;
  EXPECT_EQ(chimeraGetUniqueId(&id), chimeraUnsupported);
  EXPECT_EQ(chimeraCommInitRank(&comm, "tp=8", 0, 0, id), chimeraUnsupported);
#endif
}

TEST_F(CApi, BadArgumentsOnACommunicator) {
  float x = 0;
  EXPECT_EQ(chimeraAllReduce(&x, &x, 1, chimeraFloat32, chimeraSum, "xx", comm_), chimeraInvalidArgument);
  EXPECT_NE(std::string(chimeraGetLastError()).find("xx"), std::string::npos) << chimeraGetLastError();
  EXPECT_EQ(chimeraAllReduce(&x, &x, 1, static_cast<chimeraDataType_t>(42), chimeraSum, "tp", comm_),
            chimeraInvalidArgument);
  EXPECT_EQ(chimeraAllReduce(&x, &x, 1, chimeraFloat32, static_cast<chimeraRedOp_t>(9), "tp", comm_),
            chimeraInvalidArgument);
  chimeraSession_t session = nullptr;
  EXPECT_EQ(chimeraSessionBegin(comm_, 2, &session), chimeraInvalidArgument);
  ASSERT_EQ(chimeraSessionBegin(comm_, 1, &session), chimeraSuccess);
  std::vector<float> buffer(64);
  chimeraTensor_t t, out;
  const bool stage0 = rank_ < 4;
  ASSERT_EQ(chimeraSessionTensor(session, stage0 ? buffer.data() : nullptr, stage0 ? 256 : 0, "8,8", chimeraFloat32,
                                 "pp=@0,tp=P", &t),
            chimeraSuccess)
      << chimeraGetLastError();
  EXPECT_EQ(chimeraSessionRecord(session, "allreduce", t, nullptr, 0, &out), chimeraInvalidArgument);
  EXPECT_EQ(chimeraSessionRecord(session, "allreduce:tp,send:pp", t, nullptr, 0, &out), chimeraInvalidArgument);
  EXPECT_EQ(chimeraSessionRecord(session, "allgather:tp:0", t, nullptr, 0, &out), chimeraInvalidArgument);
  EXPECT_EQ(chimeraSessionTensor(session, buffer.data(), 256, "8,8", chimeraFloat32, "pp=@0,tp=Q", &t),
            chimeraInvalidArgument);
  EXPECT_EQ(chimeraSessionFlush(session), chimeraSuccess);  // nothing was recorded
  EXPECT_EQ(chimeraSessionEnd(session), chimeraSuccess);
}

TEST_F(CApi, PlainCollectivesAndRedistribution) {
  // AllReduce over tp of rank values: the sum of the 4 ranks of this stage.
  const int stage = rank_ / 4;
  std::int32_t sum = rank_;
  ASSERT_EQ(chimeraAllReduce(&sum, &sum, 1, chimeraInt32, chimeraSum, "tp", comm_), chimeraSuccess);
  // AllGather over the world.
  std::vector<std::int32_t> all(8, -1);
  std::int32_t mine = 10 * rank_;
  ASSERT_EQ(chimeraAllGather(&mine, all.data(), 1, chimeraInt32, "pp+tp", comm_), chimeraSuccess);
  // Broadcast over pp from stage 1.
  std::int32_t fromStage1 = rank_;
  ASSERT_EQ(chimeraBroadcast(&fromStage1, &fromStage1, 1, chimeraInt32, 1, "pp", comm_), chimeraSuccess);
  // Redistribute a 8x4 tensor from tp=S0 (2 rows each) to tp=R: every rank gets all 8 rows.
  std::vector<float> shard(2 * 4), full(8 * 4);
  const int tpIndex = rank_ % 4;
  for (int i = 0; i < 8; ++i) shard[i] = static_cast<float>(tpIndex * 8 + i);
  ASSERT_EQ(chimeraRedistribute("8,4", chimeraFloat32, "tp=S0", "tp=R", shard.data(), shard.size() * 4, full.data(),
                                full.size() * 4, comm_),
            chimeraSuccess)
      << chimeraGetLastError();
  bool ok = sum == 4 * stage * 4 + 6 && fromStage1 == 4 + tpIndex;
  for (int r = 0; r < 8; ++r) ok = ok && all[r] == 10 * r;
  for (int i = 0; i < 32; ++i) ok = ok && full[i] == static_cast<float>(i);
  EXPECT_TRUE(ok);
  EXPECT_TRUE(allRanksAgree(ok));
}

// A 16x8 f32 partial sum on one pipeline stage, reduced over tp and handed to the other stage
// through a C session; `consume` declares what the receivers read.
struct HandOff {
  const char* from;     ///< "pp=@0,tp=P" or "pp=@1,tp=P"
  const char* handOff;  ///< "send:pp" or "send:pp:backward"
  std::function<chimeraResult_t(chimeraSession_t, chimeraTensor_t)> consume;
};

// Runs `h` with fusion off (0) or on (1); this rank's received tensor lands in `out`.
void runHandOff(chimeraComm_t comm, int rank, int fusion, const HandOff& h, std::vector<float>& out,
                chimeraSessionStats_t& stats) {
  const bool sender = (rank < 4) == (std::string(h.from).find("@0") != std::string::npos);
  std::vector<float> input(16 * 8);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>((i + rank) % 5);
  out.assign(16 * 8, -1);
  chimeraSessionConfig_t config = CHIMERA_SESSION_CONFIG_INITIALIZER;
  config.fusion = fusion;
  config.topology = "bytes";  // fuses this 512-byte hand-off, which the MPI backend's own model keeps as recorded
  chimeraSession_t session = nullptr;
  ASSERT_EQ(chimeraSessionBeginConfig(comm, &config, &session), chimeraSuccess) << chimeraGetLastError();
  chimeraTensor_t x, summed, handed;
  ASSERT_EQ(chimeraSessionTensor(session, sender ? input.data() : nullptr, sender ? 512 : 0, "16,8", chimeraFloat32,
                                 h.from, &x),
            chimeraSuccess);
  ASSERT_EQ(chimeraSessionRecord(session, "allreduce:tp", x, nullptr, 0, &summed), chimeraSuccess);
  ASSERT_EQ(chimeraSessionRecord(session, h.handOff, summed, sender ? nullptr : out.data(), sender ? 0 : 512, &handed),
            chimeraSuccess)
      << chimeraGetLastError();
  EXPECT_EQ(h.consume(session, handed), chimeraSuccess) << chimeraGetLastError();
  ASSERT_EQ(chimeraSessionGetStats(session, &stats), chimeraSuccess);
  EXPECT_EQ(chimeraSessionEnd(session), chimeraSuccess);
}

// What this rank received with fusion off and on, and the two sessions' counters.
struct HandOffRuns {
  std::vector<float> unfused, fused;
  chimeraSessionStats_t stats[2] = {CHIMERA_SESSION_STATS_INITIALIZER, CHIMERA_SESSION_STATS_INITIALIZER};
};

HandOffRuns runUnfusedAndFused(chimeraComm_t comm, int rank, const HandOff& h) {
  HandOffRuns runs;
  runHandOff(comm, rank, 0, h, runs.unfused, runs.stats[0]);
  runHandOff(comm, rank, 1, h, runs.fused, runs.stats[1]);
  return runs;
}

// `ok` (this rank's data check) on every rank, and the fused run's one chain sending fewer bytes.
void expectFusedSendsLess(const HandOffRuns& runs, bool ok) {
  EXPECT_TRUE(ok);
  EXPECT_EQ(runs.stats[0].fusedChains, 0u);
  EXPECT_EQ(runs.stats[1].fusedChains, 1u);
  EXPECT_LT(runs.stats[1].bytesSent, runs.stats[0].bytesSent);
  EXPECT_TRUE(allRanksAgree(ok));
}

// The tp sum of the sending stage's inputs at element i (senders: ranks `first`..`first`+3).
float handedSum(std::size_t i, int first) {
  float sum = 0;
  for (int r = first; r < first + 4; ++r) sum += static_cast<float>((i + r) % 5);
  return sum;
}

// tp+pp through a C session, fusion off and on: identical results, fewer bytes when fused.
TEST_F(CApi, SessionFusedEqualsRecorded) {
  const HandOff h{"pp=@0,tp=P", "send:pp",
                  [](chimeraSession_t s, chimeraTensor_t t) { return chimeraSessionConsume(s, t, "pp=@1,tp=R"); }};
  const HandOffRuns runs = runUnfusedAndFused(comm_, rank_, h);
  bool ok = runs.unfused == runs.fused;
  for (std::size_t i = 0; rank_ >= 4 && i < runs.unfused.size(); ++i) ok = ok && runs.unfused[i] == handedSum(i, 0);
  expectFusedSendsLess(runs, ok);
}

// The backward hand-off (stage 1 -> 0) with a byte-range consume: each stage-0 rank reads
// its tp rows only, which the ranks agree is pp=@0,tp=S0, so the chain fuses.
TEST_F(CApi, SessionBackwardSendWithByteRange) {
  const bool stage1 = rank_ >= 4;
  const std::size_t rows = 4 * 8 * 4;  // 4 rows of 8 floats: one tp shard of 16 rows
  const std::size_t offset = stage1 ? 0 : static_cast<std::size_t>(rank_ % 4) * rows;
  const HandOff h{"pp=@1,tp=P", "send:pp:backward", [&](chimeraSession_t s, chimeraTensor_t t) {
                    return chimeraSessionConsumeRange(s, t, offset, stage1 ? 0 : rows);
                  }};
  const HandOffRuns runs = runUnfusedAndFused(comm_, rank_, h);
  bool ok = true;
  for (std::size_t i = offset / 4; !stage1 && i < (offset + rows) / 4; ++i) {
    ok = ok && runs.unfused[i] == handedSum(i, 4) && runs.fused[i] == handedSum(i, 4);
  }
  expectFusedSendsLess(runs, ok);
}

// A per-rank session from C: stage 0 records its allReduce + send, stage 1 its recv and what it
// reads; fused (ReduceScatter, shard sends, AllGather) it reads exactly what fusion off reads.
TEST_F(CApi, PerRankHandOffFromC) {
  int version = 0;
  ASSERT_EQ(chimeraGetVersion(&version), chimeraSuccess);
  EXPECT_EQ(version, CHIMERA_VERSION_CODE);
  ASSERT_EQ(chimeraCommCreateGroups(comm_, "tp;pp"), chimeraSuccess) << chimeraGetLastError();
  EXPECT_EQ(chimeraCommCreateGroups(comm_, "tp;xx"), chimeraInvalidArgument);
  const bool stage0 = rank_ < 4;
  std::vector<std::vector<float>> results;
  for (int fusion : {0, 1}) {
    chimeraSessionConfig_t config = CHIMERA_SESSION_CONFIG_INITIALIZER;
    config.fusion = fusion;
    config.perRank = 1;
    config.checkEveryWindow = 0;
    config.topology = "bytes";  // fuses this 512-byte hand-off
    chimeraSession_t session = nullptr;
    ASSERT_EQ(chimeraSessionBeginConfig(comm_, &config, &session), chimeraSuccess) << chimeraGetLastError();
    EXPECT_EQ(chimeraSessionSetStream(session, nullptr), chimeraSuccess);
    std::vector<float> buffer(16 * 8);
    for (int step = 0; step < 2; ++step) {
      chimeraTensor_t t, summed, sent, received;
      chimeraResult_t result = chimeraSuccess;
      if (stage0) {
        for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>((i + rank_ + step) % 7);
        result =
            chimeraSessionTensor(session, buffer.data(), buffer.size() * 4, "16,8", chimeraFloat32, "pp=@0,tp=P", &t);
        if (result == chimeraSuccess) result = chimeraSessionRecord(session, "allreduce:tp", t, nullptr, 0, &summed);
        if (result == chimeraSuccess) result = chimeraSessionRecord(session, "send:pp", summed, nullptr, 0, &sent);
        if (result == chimeraSuccess) result = chimeraSessionFlush(session);
      } else {
        std::fill(buffer.begin(), buffer.end(), -1.0f);
        result = chimeraSessionRecv(session, "16,8", chimeraFloat32, "pp=@1,tp=R", "pp", chimeraForward, buffer.data(),
                                    buffer.size() * 4, &received);
        if (result == chimeraSuccess) result = chimeraSessionConsume(session, received, "pp=@1,tp=R");
      }
      EXPECT_EQ(result, chimeraSuccess) << chimeraGetLastError();
    }
    chimeraSessionStats_t stats = CHIMERA_SESSION_STATS_INITIALIZER;
    ASSERT_EQ(chimeraSessionGetStats(session, &stats), chimeraSuccess);
    if (fusion == 1) {
      EXPECT_EQ(stats.fusedChains, 2u);
      // Stage 0 sends less (shards); stage 1 now sends too (its AllGather).
      if (stage0) {
        EXPECT_LT(stats.rankBytesSent, stats.rankBytesAsRecorded);
      }
    }
    EXPECT_EQ(chimeraCommSynchronize(comm_), chimeraSuccess);
    EXPECT_EQ(chimeraSessionEnd(session), chimeraSuccess);
    results.push_back(buffer);
  }
  // What stage 1 reads; stage 0's buffer after the fused hand-off is unspecified.
  const bool same = stage0 || results[0] == results[1];
  EXPECT_TRUE(same);
  // Stage 1 holds the sum over stage 0's tp ranks: (i + r + 1) % 7 summed over r = 0..3.
  bool exact = true;
  if (!stage0) {
    for (std::size_t i = 0; i < results[1].size(); ++i) {
      float sum = 0;
      for (int r = 0; r < 4; ++r) sum += static_cast<float>((i + static_cast<std::size_t>(r) + 1) % 7);
      exact = exact && results[1][i] == sum;
    }
  }
  EXPECT_TRUE(exact);
  EXPECT_TRUE(allRanksAgree(same && exact));
}

// The versioned structs: a struct not set up by its initializer, of a version this library
// does not know, or smaller than its version's layout is refused with a message naming the
// struct, the field and the initializer; one set up right is read, and filled with its header kept.
TEST_F(CApi, VersionedStructsAreCheckedBeforeUse) {
  const auto refused = [](chimeraResult_t result, const char* expected) {
    const std::string message = chimeraGetLastError();
    return result == chimeraInvalidArgument && message.find(expected) != std::string::npos;
  };
  bool ok = true;
  chimeraSession_t session = nullptr;
  chimeraSessionConfig_t config = CHIMERA_SESSION_CONFIG_INITIALIZER;
  config.magic = 0;  // as a struct filled field by field would have it
  ok = ok && refused(chimeraSessionBeginConfig(comm_, &config, &session), "CHIMERA_SESSION_CONFIG_INITIALIZER");
  config = CHIMERA_SESSION_CONFIG_INITIALIZER;
  config.version = CHIMERA_SESSION_CONFIG_VERSION + 1;
  const std::string unknownVersion =
      "chimeraSessionConfig_t has version " + std::to_string(CHIMERA_SESSION_CONFIG_VERSION + 1);
  ok = ok && refused(chimeraSessionBeginConfig(comm_, &config, &session), unknownVersion.c_str());
  config = CHIMERA_SESSION_CONFIG_INITIALIZER;
  config.size = sizeof(chimeraSessionConfig_t) - 1;
  ok = ok && refused(chimeraSessionBeginConfig(comm_, &config, &session), "chimeraSessionConfig_t has size");
  config = CHIMERA_SESSION_CONFIG_INITIALIZER;
  config.topology = "no-such-topology";
  ok = ok && refused(chimeraSessionBeginConfig(comm_, &config, &session), "no-such-topology");
  ok = ok && session == nullptr;
  // A caller built against version 1 (no `topology`): its struct is read up to its own end.
  config = CHIMERA_SESSION_CONFIG_INITIALIZER;
  config.version = 1;
  config.size = offsetof(chimeraSessionConfig_t, topology);
  config.topology = "no-such-topology";  // beyond a version-1 struct: never read
  ok = ok && chimeraSessionBeginConfig(comm_, &config, &session) == chimeraSuccess;
  ok = ok && session != nullptr && chimeraSessionEnd(session) == chimeraSuccess;
  session = nullptr;

  config = CHIMERA_SESSION_CONFIG_INITIALIZER;
  config.fusion = 0;
  EXPECT_EQ(config.perRank, 0);
  EXPECT_EQ(config.checkEveryWindow, -1);
  EXPECT_EQ(config.stream, nullptr);
  ASSERT_EQ(chimeraSessionBeginConfig(comm_, &config, &session), chimeraSuccess) << chimeraGetLastError();
  std::vector<float> values(8, 1.0f);
  chimeraTensor_t t, summed;
  ASSERT_EQ(chimeraSessionTensor(session, values.data(), 32, "8", chimeraFloat32, "pp=P", &t), chimeraSuccess);
  ASSERT_EQ(chimeraSessionRecord(session, "allreduce:pp", t, nullptr, 0, &summed), chimeraSuccess);
  ASSERT_EQ(chimeraSessionFlush(session), chimeraSuccess) << chimeraGetLastError();
  chimeraSessionStats_t stats = CHIMERA_SESSION_STATS_INITIALIZER;
  stats.magic = 0x12345678u;
  ok = ok && refused(chimeraSessionGetStats(session, &stats), "CHIMERA_SESSION_STATS_INITIALIZER");
  stats = CHIMERA_SESSION_STATS_INITIALIZER;
  stats.version = 0;
  ok = ok && refused(chimeraSessionGetStats(session, &stats), "chimeraSessionStats_t has version 0");
  stats = CHIMERA_SESSION_STATS_INITIALIZER;
  stats.size = offsetof(chimeraSessionStats_t, agreements);
  ok = ok && refused(chimeraSessionGetStats(session, &stats), "chimeraSessionStats_t has size");
  ok = ok && stats.recordedCalls == 0;  // nothing written into a refused struct
  stats = CHIMERA_SESSION_STATS_INITIALIZER;
  EXPECT_EQ(chimeraSessionGetStats(session, &stats), chimeraSuccess) << chimeraGetLastError();
  ok = ok && stats.size == sizeof(chimeraSessionStats_t) && stats.magic == CHIMERA_STRUCT_MAGIC &&
       stats.version == CHIMERA_SESSION_STATS_VERSION && stats.recordedCalls == 1 && stats.windows == 1 &&
       stats.fusedChains == 0;   // fusion 0 from the config
  ok = ok && values[0] == 2.0f;  // summed over the two stages
  // A caller built against version 1 (without the local-copy counters) gets its counters and
  // nothing written past its layout.
  stats = CHIMERA_SESSION_STATS_INITIALIZER;
  stats.version = 1;
  stats.size = offsetof(chimeraSessionStats_t, localCopies);
  stats.localCopies = 77;
  EXPECT_EQ(chimeraSessionGetStats(session, &stats), chimeraSuccess) << chimeraGetLastError();
  ok = ok && stats.recordedCalls == 1 && stats.localCopies == 77;
  EXPECT_EQ(chimeraSessionEnd(session), chimeraSuccess);
  EXPECT_TRUE(ok);
  EXPECT_TRUE(allRanksAgree(ok));
}

}  // namespace
}  // namespace chimera::testing
