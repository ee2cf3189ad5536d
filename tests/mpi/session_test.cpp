// SPDX-License-Identifier: Apache-2.0
// Session: recorded calls with and without consume declarations, fusion off vs on (exact),
// sequences that must not be fused, cache hits and misses, agreement and bad input.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "session_test_support.hpp"

namespace chimera::testing {
namespace {

// The six scenario presets at 8 ranks, another mesh of the same axes for each, and chains
// with in-place calls at the end or in the middle.
std::vector<SessionCase> fusedCases() {
  const std::vector<std::int64_t> flat{32, 48};
  const std::vector<std::int64_t> cube{16, 24, 16};
  return {
      {"tp_sp", "tp=8", "tp=P", "allreduce:tp", "tp=S0", flat},
      {"tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", flat},
      {"tp_ep", "ep=2,tp=4", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1", flat},
      {"sp_ep", "dp=2,sp=4", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", cube},
      {"pp_sp", "sp=4,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R", flat},
      {"pp_ep", "pp=2,ep=4", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", flat},
      {"tp_sp_2d", "dp=2,tp=4", "tp=P", "allreduce:tp", "tp=S1", flat},
      {"tp_pp_4", "pp=4,tp=2", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", cube},
      {"tp_pp_backward", "pp=2,tp=4", "pp=@1,tp=P", "allreduce:tp,send:pp:backward", "pp=@0,tp=R", flat},
      {"pp_sp_backward", "pp=4,sp=2", "pp=@2,sp=S0", "allgather:sp:0,send:pp:backward", "pp=@1,sp=R", cube},
      {"rs_ag", "tp=8", "tp=P", "reducescatter:tp:0,allgather:tp:0", "tp=R", flat, false},
      {"ar_ar", "dp=2,tp=4", "dp=P,tp=P", "allreduce:tp,allreduce:dp", "dp=R,tp=S0", flat, false},
      {"ar_bcast", "dp=2,tp=4", "tp=P", "allreduce:tp,broadcast:dp:1", "tp=S0", flat, false},
  };
}

class SessionFusion : public ::testing::TestWithParam<SessionCase> {};

// Fusion on and off give the same consumed bytes, and on plans fewer bytes than recorded.
TEST_P(SessionFusion, FusedEqualsRecordedCalls) {
  const SessionCase& c = GetParam();
  const SessionRun off = runCase(c, false, 11);
  const SessionRun on = runCase(c, true, 11);
  const bool ok = off.status.isOk() && on.status.isOk() && off.consumed == on.consumed;
  EXPECT_TRUE(off.status.isOk()) << off.status.toString();
  EXPECT_TRUE(on.status.isOk()) << on.status.toString();
  EXPECT_EQ(off.consumed, on.consumed);
  EXPECT_TRUE(allRanksAgree(ok));
  EXPECT_EQ(off.stats.fusedChains, 0u);
  EXPECT_EQ(off.stats.bytesSent, off.stats.bytesAsRecorded);
  if (c.expectFused) {
    EXPECT_EQ(on.stats.fusedChains, 1u);
  }
  EXPECT_LE(on.stats.bytesSent, on.stats.bytesAsRecorded);
  EXPECT_EQ(on.stats.recordedCalls, off.stats.recordedCalls);
}

// Without a declaration no chain is fused and every value is written in full, as recorded (a
// single call may still run as a cheaper program with the same full result).
TEST_P(SessionFusion, NoDeclarationRunsAsRecorded) {
  SessionCase c = GetParam();
  c.consume.clear();
  const SessionRun off = runCase(c, false, 5);
  const SessionRun on = runCase(c, true, 5);
  const bool ok = off.status.isOk() && on.status.isOk() && off.consumed == on.consumed;
  EXPECT_TRUE(on.status.isOk()) << on.status.toString();
  EXPECT_EQ(off.consumed, on.consumed);
  EXPECT_TRUE(off.status.isOk()) << off.status.toString();
  EXPECT_EQ(on.stats.chainsRun, on.stats.recordedCalls);  // every call ran as a chain of its own
  EXPECT_TRUE(allRanksAgree(ok));
}

INSTANTIATE_TEST_SUITE_P(Chains, SessionFusion, ::testing::ValuesIn(fusedCases()),
                         [](const auto& test) { return test.param.name; });

// Windows whose chosen program is the calls as recorded, or a fused one whose result lands
// where the consumer reads it, make no local copy: no staging of the consumed part, no copy
// to the consumed layout, no scratch between the calls. Checked element by element against
// fusion off, on meshes with groups of one (nothing to fuse) and with in-place fusions.
std::vector<SessionCase> copyFreeCases() {
  const std::vector<std::int64_t> flat{32, 48};
  const std::vector<std::int64_t> cube{16, 24, 16};
  return {
      {"rows_of_an_all_reduce_in_place", "tp=8", "tp=P", "allreduce:tp", "tp=S0", flat},
      {"rows_of_an_all_reduce_dp_tp", "dp=2,tp=4", "dp=S1,tp=P", "allreduce:tp", "dp=S1,tp=S0", cube},
      {"group_of_one_rows", "dp=8,tp=1", "tp=P", "allreduce:tp", "tp=S0", flat, false},
      {"group_of_one_hand_off", "pp=8,tp=1", "pp=@2,tp=P", "allreduce:tp,send:pp", "pp=@3,tp=R", flat, false},
      {"group_of_one_hand_off_back", "tp=1,pp=8", "pp=@6,tp=P", "allreduce:tp,send:pp:backward", "pp=@5,tp=S0", cube,
       false},
      {"plain_send", "pp=4,dp=2", "dp=S0,pp=@1", "send:pp", "dp=S0,pp=@2", flat, false},
      {"reduce_scatter_then_gather", "tp=8", "tp=P", "reducescatter:tp:0,allgather:tp:0", "tp=R", flat},
  };
}

class SessionCopyFree : public ::testing::TestWithParam<SessionCase> {};

TEST_P(SessionCopyFree, MakesNoLocalCopyAndEqualsFusionOff) {
  const SessionCase& c = GetParam();
  const SessionRun off = runCase(c, false, 7, 2);
  const SessionRun on = runCase(c, true, 7, 2);
  EXPECT_TRUE(off.status.isOk()) << off.status.toString();
  EXPECT_TRUE(on.status.isOk()) << on.status.toString();
  EXPECT_EQ(off.consumed, on.consumed);
  EXPECT_EQ(on.stats.localCopies, 0u) << on.stats.localCopyBytes << " bytes copied";
  EXPECT_EQ(on.stats.localCopyBytes, 0u);
  EXPECT_EQ(off.stats.localCopies, 0u);
  if (!c.expectFused) {
    EXPECT_EQ(on.stats.fusedChains, 0u);
    EXPECT_EQ(on.stats.bytesSent, off.stats.bytesSent);
  }
  EXPECT_TRUE(
      allRanksAgree(off.status.isOk() && on.status.isOk() && off.consumed == on.consumed && on.stats.localCopies == 0));
}

INSTANTIATE_TEST_SUITE_P(Windows, SessionCopyFree, ::testing::ValuesIn(copyFreeCases()),
                         [](const auto& test) { return test.param.name; });

// A consumed part that is not one contiguous stretch of the output buffer (columns of a
// row-major tensor) goes through the staging buffer: counted, and still exact.
TEST(SessionCopies, StagingOfColumnsIsCounted) {
  const SessionCase c{"columns", "tp=8", "tp=P", "allreduce:tp", "tp=S1", {32, 48}};
  const SessionRun off = runCase(c, false, 7);
  const SessionRun on = runCase(c, true, 7);
  EXPECT_TRUE(on.status.isOk()) << on.status.toString();
  EXPECT_EQ(off.consumed, on.consumed);
  EXPECT_EQ(off.stats.localCopies, 0u);
  if (on.stats.fusedChains == 1) {
    // The ReduceScatter packs its columns (the whole input), the Session unpacks the part read.
    EXPECT_GE(on.stats.localCopies, 2u);
    EXPECT_EQ(on.stats.localCopyBytes, 32u * 48u * 4u + 32u * 6u * 4u);
  }
  EXPECT_TRUE(allRanksAgree(on.status.isOk() && off.consumed == on.consumed));
}

// A repeated step pays a lookup: windows 2..n hit the cache and give the same result.
TEST(SessionCache, RepeatedStepsHitTheCache) {
  const SessionCase c{"tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", {32, 48}};
  const SessionRun one = runCase(c, true, 3, 1);
  const SessionRun three = runCase(c, true, 3, 3);
  EXPECT_TRUE(three.status.isOk()) << three.status.toString();
  EXPECT_EQ(three.stats.windows, 3u);
  EXPECT_EQ(three.stats.windowCacheHits, 2u);
  EXPECT_EQ(three.stats.fusedChains, 3u);
  EXPECT_EQ(one.stats.windowCacheHits, 0u);
  // Step 3 used seed 5, so compare with a single run of that seed.
  const SessionRun third = runCase(c, true, 5, 1);
  EXPECT_EQ(three.consumed, third.consumed);
  EXPECT_TRUE(allRanksAgree(three.status.isOk() && three.consumed == third.consumed));
}

// Without a cost named, a session on MPI prices with the host preset, whose margin keeps a
// hand-off with little to gain (a 6 KiB activation) as recorded and fuses a large one; bytes
// alone fuses both. The results equal fusion off either way.
TEST(SessionCost, TheMpiBackendsModelFusesOnlyWhatPays) {
  const std::vector<std::pair<std::vector<std::int64_t>, bool>> shapes{{{32, 48}, false}, {{256, 512}, true}};
  for (const auto& [shape, pays] : shapes) {
    const SessionCase c{"tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", shape};
    const SessionRun off = runCase(c, false, 9);
    const SessionRun host = runCase(c, true, 9, 1, "");
    const SessionRun bytes = runCase(c, true, 9, 1, "bytes");
    EXPECT_TRUE(host.status.isOk()) << host.status.toString();
    EXPECT_EQ(host.stats.fusedChains, pays ? 1u : 0u) << shape[0] << "x" << shape[1];
    EXPECT_EQ(host.stats.bytesSent == host.stats.bytesAsRecorded, !pays);
    EXPECT_EQ(bytes.stats.fusedChains, 1u);
    EXPECT_TRUE(allRanksAgree(off.status.isOk() && host.consumed == off.consumed && bytes.consumed == off.consumed));
  }
}

TEST(SessionCost, NamedByOptionsOrTheBackend) {
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("tp=8", worldSize(), mesh).isOk());
  std::unique_ptr<Backend> backend;
  ASSERT_TRUE(createMpiBackend(mesh, backend).isOk());
  EXPECT_EQ(backend->defaultTopology(), "host:8");
  const std::pair<std::string, std::string> named[] = {
      {"", "host"}, {"bytes", "bytes"}, {"pcie-4080x8", "pcie-4080x8"}};
  for (const auto& [topology, name] : named) {
    SessionOptions options;
    options.topology = topology;
    std::unique_ptr<Session> session;
    ASSERT_TRUE(Session::create(*backend, options, session).isOk()) << topology;
    EXPECT_EQ(session->cost().name(), name);
  }
  // A cost object takes precedence over the name.
  const BytesCost bytes;
  SessionOptions options;
  options.cost = &bytes;
  options.topology = "pcie-4080x8";
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::create(*backend, options, session).isOk());
  EXPECT_EQ(&session->cost(), &bytes);
  // An unknown model, or one too small for the mesh, is an error naming it.
  for (const char* bad : {"no-such-topology", "host:4"}) {
    options = SessionOptions{};
    options.topology = bad;
    const Status status = Session::create(*backend, options, session);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << bad;
    EXPECT_NE(status.message().find(bad), std::string::npos) << status.message();
  }
}

// Fixture with a tp=8 mesh, a backend and sessions, and partial-sum inputs whose sum every
// rank can compute: rank r holds value (i % 7) + r at element i, so the sum is 8*(i%7) + 28.
class SessionTp8 : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 16;
  static constexpr std::int64_t kCols = 8;
  void SetUp() override {
    ASSERT_TRUE(Mesh::parse("tp=8", worldSize(), mesh_).isOk());
    ASSERT_TRUE(createMpiBackend(mesh_, backend_).isOk());
    ASSERT_TRUE(Layout::parse("tp=P", mesh_, partial_).isOk());
    ASSERT_TRUE(Layout::parse("tp=S0", mesh_, sharded_).isOk());
    for (std::size_t i = 0; i < buffer_.size(); ++i) buffer_[i] = static_cast<float>(i % 7) + worldRank();
  }
  std::unique_ptr<Session> makeSession(bool fusion, bool check = false) {
    SessionOptions options;
    options.fusion = fusion;
    options.checkEveryWindow = check;
    std::unique_ptr<Session> session;
    EXPECT_TRUE(Session::create(*backend_, options, session).isOk());
    return session;
  }
  static float fullSum(std::size_t i) { return static_cast<float>(8 * (i % 7) + 28); }
  bool bufferIsFullSum() const {
    for (std::size_t i = 0; i < buffer_.size(); ++i) {
      if (buffer_[i] != fullSum(i)) return false;
    }
    return true;
  }
  Mesh mesh_;
  std::unique_ptr<Backend> backend_;
  Layout partial_;
  Layout sharded_;
  TensorSpec spec_{{kRows, kCols}, DataType::F32};
  std::vector<float> buffer_ = std::vector<float>(kRows * kCols);
  std::vector<float> other_ = std::vector<float>(kRows * kCols / 8);
};

// AllReduce consumed as S0 fuses to a ReduceScatter; the consumed rows hold the sum in place.
TEST_F(SessionTp8, ConsumedShardHoldsTheSumInPlace) {
  auto session = makeSession(true);
  TensorHandle x, y;
  ASSERT_TRUE(session->tensor(buffer_.data(), buffer_.size() * 4, spec_, partial_, x).isOk());
  ASSERT_TRUE(session->allReduce(x, mesh_.allAxes(), y).isOk());
  const Status status = session->consume(y, sharded_);
  bool ok = status.isOk();
  const std::size_t rows = kRows / 8;
  for (std::size_t i = worldRank() * rows * kCols; i < (worldRank() + 1) * rows * kCols; ++i) {
    ok = ok && buffer_[i] == fullSum(i);
  }
  EXPECT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(session->stats().fusedChains, 1u);
  EXPECT_TRUE(allRanksAgree(ok));
}

// The full AllReduce result is read later (by two slices): it must be written in full.
TEST_F(SessionTp8, FullResultReadLaterIsNotFused) {
  auto session = makeSession(true);
  TensorHandle x, y, a, b;
  std::vector<float> rowsOut(kRows * kCols / 8), colsOut(kRows * kCols / 8);
  Layout colShard;
  ASSERT_TRUE(Layout::parse("tp=S1", mesh_, colShard).isOk());
  ASSERT_TRUE(session->tensor(buffer_.data(), buffer_.size() * 4, spec_, partial_, x).isOk());
  ASSERT_TRUE(session->allReduce(x, mesh_.allAxes(), y).isOk());
  ASSERT_TRUE(session->slice(y, mesh_.allAxes(), 0, rowsOut.data(), rowsOut.size() * 4, a).isOk());
  ASSERT_TRUE(session->slice(y, mesh_.allAxes(), 1, colsOut.data(), colsOut.size() * 4, b).isOk());
  ASSERT_TRUE(session->declareRead(a, sharded_).isOk());
  ASSERT_TRUE(session->declareRead(b, colShard).isOk());
  const Status status = session->flush();
  EXPECT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(session->stats().fusedChains, 0u);
  EXPECT_TRUE(allRanksAgree(status.isOk() && bufferIsFullSum()));
}

// A view aliasing the AllReduce's buffer on one rank only: every rank materialises it.
TEST_F(SessionTp8, AliasedBufferIsNotFusedOnAnyRank) {
  auto session = makeSession(true);
  TensorHandle x, y, view, gathered;
  const TensorSpec viewSpec{{8, 2}, DataType::F32};
  std::vector<float> separate(16), out(8 * 2 * 8);
  ASSERT_TRUE(session->tensor(buffer_.data(), buffer_.size() * 4, spec_, partial_, x).isOk());
  ASSERT_TRUE(session->allReduce(x, mesh_.allAxes(), y).isOk());
  // Rank 0's view lies over the AllReduce's buffer; the other ranks' over separate memory.
  float* viewData = worldRank() == 0 ? buffer_.data() : separate.data();
  ASSERT_TRUE(session->tensor(viewData, 16 * 4, viewSpec, sharded_, view).isOk());
  ASSERT_TRUE(session->allGather(view, mesh_.allAxes(), 0, out.data(), out.size() * 4, gathered).isOk());
  ASSERT_TRUE(session->declareRead(y, sharded_).isOk());
  const Status status = session->flush();
  EXPECT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(session->stats().fusedChains, 0u);
  EXPECT_TRUE(allRanksAgree(status.isOk() && bufferIsFullSum()));
}

// A consume declared on one rank only is a Mismatch on every rank, not a hang.
TEST_F(SessionTp8, DeclarationOnOneRankIsAMismatch) {
  auto session = makeSession(true);
  TensorHandle x, y;
  ASSERT_TRUE(session->tensor(buffer_.data(), buffer_.size() * 4, spec_, partial_, x).isOk());
  ASSERT_TRUE(session->allReduce(x, mesh_.allAxes(), y).isOk());
  const Status status = worldRank() == 0 ? session->consume(y, sharded_) : session->flush();
  EXPECT_EQ(status.code(), StatusCode::Mismatch) << status.toString();
  EXPECT_TRUE(allRanksAgree(status.code() == StatusCode::Mismatch));
  // The session stays usable: the next window runs.
  ASSERT_TRUE(session->tensor(buffer_.data(), buffer_.size() * 4, spec_, partial_, x).isOk());
  ASSERT_TRUE(session->allReduce(x, mesh_.allAxes(), y).isOk());
  EXPECT_TRUE(session->flush().isOk());
}

// After warm-up, with checkEveryWindow, a rank changing its declaration alone is caught.
TEST_F(SessionTp8, CheckEveryWindowCatchesALateChange) {
  auto session = makeSession(true, true);
  Status status;
  for (int step = 0; step < 3; ++step) {
    TensorHandle x, y;
    ASSERT_TRUE(session->tensor(buffer_.data(), buffer_.size() * 4, spec_, partial_, x).isOk());
    ASSERT_TRUE(session->allReduce(x, mesh_.allAxes(), y).isOk());
    status = (step == 2 && worldRank() == 3) ? session->flush() : session->consume(y, sharded_);
    if (step < 2) {
      EXPECT_TRUE(status.isOk()) << status.toString();
    }
  }
  EXPECT_EQ(status.code(), StatusCode::Mismatch) << status.toString();
  EXPECT_TRUE(allRanksAgree(status.code() == StatusCode::Mismatch));
}

// The cache: the same window hits, a changed declaration misses.
TEST_F(SessionTp8, ChangedDeclarationMissesTheCache) {
  auto session = makeSession(true);
  Layout replicated = Layout::replicated(mesh_);
  for (int step = 0; step < 4; ++step) {
    TensorHandle x, y;
    ASSERT_TRUE(session->tensor(buffer_.data(), buffer_.size() * 4, spec_, partial_, x).isOk());
    ASSERT_TRUE(session->allReduce(x, mesh_.allAxes(), y).isOk());
    ASSERT_TRUE(session->consume(y, step < 2 ? sharded_ : replicated).isOk());
  }
  EXPECT_EQ(session->stats().windows, 4u);
  EXPECT_EQ(session->stats().windowCacheHits, 2u);
  EXPECT_EQ(session->stats().fusedChains, 2u);
}

// Bad input names the problem and records nothing.
TEST_F(SessionTp8, BadInputIsInvalidArgument) {
  auto session = makeSession(true);
  TensorHandle x, y, z;
  std::vector<float> small(4);
  EXPECT_EQ(session->tensor(small.data(), small.size() * 4, spec_, partial_, x).code(), StatusCode::InvalidArgument);
  ASSERT_TRUE(session->tensor(buffer_.data(), buffer_.size() * 4, spec_, partial_, x).isOk());
  const Status gather = session->allGather(x, mesh_.allAxes(), 0, other_.data(), other_.size() * 4, z);
  EXPECT_EQ(gather.code(), StatusCode::InvalidArgument);
  EXPECT_NE(gather.message().find("allgather"), std::string::npos) << gather.message();
  EXPECT_EQ(session->allReduce(x, AxisSet::fromBits(0b10), y).code(), StatusCode::InvalidArgument);
  ASSERT_TRUE(session->allReduce(x, mesh_.allAxes(), y).isOk());
  EXPECT_EQ(session->allReduce(x, mesh_.allAxes(), z).code(), StatusCode::InvalidArgument);  // overwritten
  EXPECT_EQ(session->declareRead(x, sharded_).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(session->reduceScatter(y, mesh_.allAxes(), 0, buffer_.data(), 16, z).code(),
            StatusCode::InvalidArgument);  // output overlaps input
  EXPECT_EQ(session->stats().recordedCalls, 1u);
  EXPECT_TRUE(session->flush().isOk());
  EXPECT_EQ(session->allReduce(y, mesh_.allAxes(), z).code(), StatusCode::InvalidArgument);  // expired
  EXPECT_TRUE(bufferIsFullSum());
}

// wait() hands a buffer back: it runs the window; a handle of a window already run is fine.
TEST_F(SessionTp8, WaitRunsTheWindow) {
  auto session = makeSession(true);
  TensorHandle x, y;
  ASSERT_TRUE(session->tensor(buffer_.data(), buffer_.size() * 4, spec_, partial_, x).isOk());
  ASSERT_TRUE(session->allReduce(x, mesh_.allAxes(), y).isOk());
  const bool before = bufferIsFullSum();
  EXPECT_TRUE(session->wait(y).isOk());
  EXPECT_TRUE(session->wait(y).isOk());
  EXPECT_EQ(session->stats().windows, 1u);
  EXPECT_TRUE(allRanksAgree(!before && bufferIsFullSum()));
}

TEST(SessionOptionsTest, EnvironmentFlags) {
  SessionOptions options;
  ::setenv("CHIMERA_FUSION", "0", 1);
  ::setenv("CHIMERA_CHECK_EVERY_WINDOW", "1", 1);
  ::setenv("CHIMERA_PREPARED_PLAN_LIMIT", "12", 1);
  EXPECT_TRUE(SessionOptions::fromEnvironment(options).isOk());
  EXPECT_FALSE(options.fusion);
  EXPECT_TRUE(options.checkEveryWindow);
  EXPECT_EQ(options.preparedPlanLimit, 12u);
  for (const char* bad : {"0", "-3", "12x", "many"}) {
    ::setenv("CHIMERA_PREPARED_PLAN_LIMIT", bad, 1);
    const Status status = SessionOptions::fromEnvironment(options);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << bad;
    EXPECT_NE(status.message().find("CHIMERA_PREPARED_PLAN_LIMIT"), std::string::npos) << status.message();
  }
  ::unsetenv("CHIMERA_PREPARED_PLAN_LIMIT");
  ::setenv("CHIMERA_FUSION", "yes", 1);
  const Status bad = SessionOptions::fromEnvironment(options);
  EXPECT_EQ(bad.code(), StatusCode::InvalidArgument);
  EXPECT_NE(bad.message().find("CHIMERA_FUSION='yes'"), std::string::npos) << bad.message();
  ::unsetenv("CHIMERA_FUSION");
  ::unsetenv("CHIMERA_CHECK_EVERY_WINDOW");
  ::setenv("CHIMERA_TOPOLOGY", "pcie-4080x8", 1);
  EXPECT_TRUE(SessionOptions::fromEnvironment(options).isOk());
  EXPECT_EQ(options.topology, "pcie-4080x8");
  ::unsetenv("CHIMERA_TOPOLOGY");
  EXPECT_TRUE(SessionOptions::fromEnvironment(options).isOk());
  EXPECT_TRUE(options.topology.empty());
  EXPECT_TRUE(options.fusion);
  EXPECT_FALSE(options.checkEveryWindow);
  EXPECT_EQ(options.preparedPlanLimit, Executor::kDefaultPreparedPlanLimit);
}

}  // namespace
}  // namespace chimera::testing
