// SPDX-License-Identifier: Apache-2.0
// Reliability of the MPI backend: bounded waits (Timeout naming the call, the group and the
// late peer; the backend unusable afterwards) and group creation that refuses ranks asking
// for different groups without caching a wrong communicator.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chimera/mpi_backend.hpp"
#include "mpi/mpi_backend_impl.hpp"
#include "mpi_test_util.hpp"

namespace chimera::testing {
namespace {

bool contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

std::unique_ptr<Backend> makeBackend(const Mesh& mesh, detail::MpiBackendOptions options) {
  std::unique_ptr<Backend> backend;
  const Status status = detail::createMpiBackend(mesh, options, backend);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return backend;
}

// A pp=2 x tp=N/2 mesh, its two axes and an MPI backend over it; whether it was made.
struct StageWorld {
  Mesh mesh;
  AxisSet tp, pp;
  std::unique_ptr<Backend> backend;
};
bool makeStageWorld(int timeoutMs, StageWorld& w) {
  if (!Mesh::parse("pp=2,tp=" + std::to_string(worldSize() / 2), worldSize(), w.mesh).isOk() ||
      !w.mesh.parseAxes("tp", w.tp).isOk() || !w.mesh.parseAxes("pp", w.pp).isOk())
    return false;
  detail::MpiBackendOptions options;
  options.timeoutMs = timeoutMs;
  w.backend = makeBackend(w.mesh, options);
  return w.backend != nullptr;
}

// The last rank never calls: every other rank gets Timeout naming the collective, the group
// and the late rank, within the timeout, and every later call returns the stored error.
void expectLateRankTimesOut(bool checkArgs, detail::MpiAlgorithm algorithm, const std::string& where) {
  const Mesh mesh = Mesh::flat(worldSize());
  detail::MpiBackendOptions options;
  options.timeoutMs = 300;
  options.checkArgs = checkArgs;
  options.algorithm = algorithm;
  auto backend = makeBackend(mesh, options);
  const int late = worldSize() - 1;
  bool ok = backend != nullptr;
  std::vector<float> data(std::size_t{1} << 16, 1.0f);
  if (ok) {
    // Every rank once, so that the group exists and the late rank is missed inside the call.
    ok = backend->allReduce(data.data(), data.data(), 4, DataType::F32, ReduceOp::Sum, mesh.allAxes()).isOk();
  }
  if (allRanksAgree(ok) && worldRank() != late) {
    const Status first =
        backend->allReduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum, mesh.allAxes());
    EXPECT_EQ(first.code(), StatusCode::Timeout) << first.toString();
    EXPECT_TRUE(contains(first, "allReduce of 65536 float")) << first.toString();
    EXPECT_TRUE(contains(first, where)) << first.toString();
    EXPECT_TRUE(contains(first, "world rank " + std::to_string(late))) << first.toString();
    EXPECT_TRUE(contains(first, "300 ms")) << first.toString();
    const Status later = backend->broadcast(data.data(), data.data(), 4, DataType::F32, 0, mesh.allAxes());
    EXPECT_EQ(later.code(), StatusCode::Timeout) << later.toString();
    EXPECT_TRUE(contains(later, "unusable")) << later.toString();
    EXPECT_TRUE(contains(later, first.message())) << later.toString();
    ok = first.code() == StatusCode::Timeout && later.code() == StatusCode::Timeout;
  }
  EXPECT_TRUE(allRanksAgree(ok));
}

TEST(MpiReliability, ArgumentCheckNamesTheLateRank) {
  expectLateRankTimesOut(true, detail::MpiAlgorithm::Auto, "argument agreement check of allReduce");
}

TEST(MpiReliability, PointToPointAlgorithmNamesTheLateRank) {
  expectLateRankTimesOut(false, detail::MpiAlgorithm::PointToPoint, "direct ReduceScatter");
}

TEST(MpiReliability, LibraryCollectiveNamesTheLateRank) {
  const Mesh mesh = Mesh::flat(worldSize());
  detail::MpiBackendOptions options;
  options.timeoutMs = 300;
  options.checkArgs = false;
  options.algorithm = detail::MpiAlgorithm::Library;
  auto backend = makeBackend(mesh, options);
  bool ok = backend != nullptr;
  std::vector<float> data(256, 1.0f);
  if (ok) ok = backend->allReduce(data.data(), data.data(), 4, DataType::F32, ReduceOp::Sum, mesh.allAxes()).isOk();
  if (allRanksAgree(ok) && worldRank() != 0) {
    const Status status =
        backend->allReduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum, mesh.allAxes());
    EXPECT_EQ(status.code(), StatusCode::Timeout) << status.toString();
    EXPECT_TRUE(contains(status, "MPI_Iallreduce")) << status.toString();
    // MPI does not say who is late inside its collective; the roll call of the members that gave
    // up names the one that never called.
    EXPECT_TRUE(contains(status, "still waiting for world rank 0 of the group's library collective"))
        << status.toString();
    ok = status.code() == StatusCode::Timeout && contains(status, "world rank 0 of the group");
  }
  EXPECT_TRUE(allRanksAgree(ok));
}

// World rank 0 makes `call` 900 ms late, after the others' calls returned a Timeout and they
// filled `buffer` (the output `call` writes) with their own values; once MPI has been driven
// until the late member's messages arrived wherever they can, those values must still be there.
// `what` names the call in the failure. Every rank's verdict, agreed.
bool lateMemberLeavesTheCallersBuffer(const std::function<Status()>& call, std::vector<float>& buffer,
                                      const char* what) {
  constexpr float kMine = -3.0f;  // what the caller keeps in its buffer after the Timeout
  bool ok = true;
  if (worldRank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(900));  // after the others gave up
    (void)call();
  } else {
    const Status status = call();
    EXPECT_EQ(status.code(), StatusCode::Timeout) << status.toString();
    ok = status.code() == StatusCode::Timeout;
    std::fill(buffer.begin(), buffer.end(), kMine);
  }
  ok = allRanksAgree(ok);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) {
    int found = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &found, MPI_STATUS_IGNORE);
  }
  if (worldRank() != 0) {
    const bool kept = std::all_of(buffer.begin(), buffer.end(), [](float v) { return v == kMine; });
    EXPECT_TRUE(kept) << "the abandoned " << what << " wrote into the caller's buffer after its call returned";
    ok = ok && kept;
  }
  return allRanksAgree(ok);
}

// MPI cannot cancel a collective: one abandoned on a Timeout completes once the late member
// arrives. With the Timeout returned to the caller (abortOnTimeout off), that late completion
// must land in chimera's staging, not in the buffer the caller has had back since.
TEST(MpiReliability, AnAbandonedLibraryCollectiveDoesNotWriteTheCallersBuffer) {
  const Mesh mesh = Mesh::flat(worldSize());
  detail::MpiBackendOptions options;
  options.timeoutMs = 300;
  options.checkArgs = false;  // the late member's collective must match the abandoned one
  options.abortOnTimeout = false;
  options.algorithm = detail::MpiAlgorithm::Library;
  auto backend = makeBackend(mesh, options);
  bool ok = backend != nullptr;
  std::vector<float> data(256, 1.0f);
  if (ok) ok = backend->allReduce(data.data(), data.data(), 4, DataType::F32, ReduceOp::Sum, mesh.allAxes()).isOk();
  if (!allRanksAgree(ok)) return;
  EXPECT_TRUE(lateMemberLeavesTheCallersBuffer(
      [&] {
        return backend->allReduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum, mesh.allAxes());
      },
      data, "collective"));
}

// The uneven all-to-all receives point-to-point straight into the caller's buffer: on a Timeout
// its receives are cancelled, so a member that arrives after the others gave up writes nothing
// into the buffers they have had back since.
TEST(MpiReliability, AnAbandonedAllToAllVDoesNotWriteTheCallersBuffer) {
  const Mesh mesh = Mesh::flat(worldSize());
  detail::MpiBackendOptions options;
  options.timeoutMs = 300;
  options.checkArgs = false;  // the late member's transfers must match the abandoned ones
  options.abortOnTimeout = false;
  auto backend = makeBackend(mesh, options);
  bool ok = backend != nullptr;
  const auto n = static_cast<std::size_t>(worldSize());
  constexpr std::size_t kBlock = 64;  // small: eager sends, which complete without their receives
  std::vector<float> send(n * kBlock, static_cast<float>(worldRank())), recv(n * kBlock, 0.0f);
  std::vector<std::size_t> counts(n, kBlock), offsets(n);
  for (std::size_t j = 0; j < n; ++j) offsets[j] = j * kBlock;
  const auto allToAllV = [&] {
    return backend->allToAllV(send.data(), counts, offsets, recv.data(), counts, offsets, DataType::F32,
                              mesh.allAxes());
  };
  // One on time first (it creates the group's communicator): block j of every member's send.
  if (ok) ok = allToAllV().isOk();
  for (std::size_t j = 0; j < n && ok; ++j) ok = recv[j * kBlock] == static_cast<float>(j);
  if (!allRanksAgree(ok)) return;
  EXPECT_TRUE(lateMemberLeavesTheCallersBuffer(allToAllV, recv, "all-to-all"));
}

// Ranks asking for different new groups get Mismatch on every rank; the groups made later
// by agreeing calls are the right ones.
TEST(MpiReliability, DifferentAxesOnFirstUseCacheNothing) {
  if (worldSize() % 2 != 0) GTEST_SKIP() << "needs an even world";
  StageWorld w;
  ASSERT_TRUE(allRanksAgree(makeStageWorld(5000, w)));
  const Mesh& mesh = w.mesh;
  const AxisSet tp = w.tp, pp = w.pp;
  Backend* backend = w.backend.get();
  const int rank = worldRank();
  std::vector<float> data(64, static_cast<float>(rank));
  const Status wrong =
      backend->allReduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum, rank == 0 ? tp : pp);
  EXPECT_EQ(wrong.code(), StatusCode::Mismatch) << wrong.toString();
  EXPECT_TRUE(contains(wrong, "no communicator was created")) << wrong.toString();
  // Both groups now, agreed: the sums are over the right members.
  for (AxisSet axes : {tp, pp}) {
    std::fill(data.begin(), data.end(), static_cast<float>(rank));
    const Status status = backend->allReduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum, axes);
    EXPECT_TRUE(status.isOk()) << status.toString();
    float expected = 0;
    for (const int member : mesh.groupRanks(rank, axes)) expected += static_cast<float>(member);
    EXPECT_EQ(data[0], expected) << mesh.axesName(axes);
    EXPECT_EQ(data[63], expected) << mesh.axesName(axes);
  }
  EXPECT_TRUE(allRanksAgree(!::testing::Test::HasFailure()));
}

// createGroups with different lists (the last rank asks for tp and pp, the others for tp alone):
// Mismatch on every rank at once, none created (tp neither, though every rank asked for it);
// then the same list everywhere creates both.
TEST(MpiReliability, CreateGroupsWithDifferentListsCreatesNothing) {
  if (worldSize() % 2 != 0) GTEST_SKIP() << "needs an even world";
  StageWorld w;
  ASSERT_TRUE(allRanksAgree(makeStageWorld(20000, w)));
  const AxisSet tp = w.tp, pp = w.pp;
  Backend* backend = w.backend.get();
  const std::vector<AxisSet> both = {tp, pp};
  const std::vector<AxisSet> one = {tp};
  const auto start = std::chrono::steady_clock::now();
  const Status wrong = backend->createGroups(worldRank() == worldSize() - 1 ? both : one);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(wrong.code(), StatusCode::Mismatch) << wrong.toString();
  EXPECT_TRUE(contains(wrong, "create different communicators")) << wrong.toString();
  EXPECT_LT(seconds, 10.0) << "waited for the timeout";
  EXPECT_FALSE(backend->hasGroup(tp));
  EXPECT_TRUE(backend->createGroups(both).isOk());
  EXPECT_TRUE(backend->hasGroup(tp) && backend->hasGroup(pp));
  EXPECT_TRUE(allRanksAgree(!::testing::Test::HasFailure()));
}

// A rank-local error with checks on is reported on every rank and leaves the backend usable.
TEST(MpiReliability, MismatchLeavesTheBackendUsable) {
  const Mesh mesh = Mesh::flat(worldSize());
  auto backend = makeBackend(mesh, detail::MpiBackendOptions{});
  ASSERT_TRUE(allRanksAgree(backend != nullptr));
  std::vector<float> data(64, 1.0f);
  const std::size_t count = worldRank() == 0 ? 32 : 64;
  const Status bad = backend->allReduce(data.data(), data.data(), count, DataType::F32, ReduceOp::Sum, mesh.allAxes());
  EXPECT_EQ(bad.code(), StatusCode::Mismatch) << bad.toString();
  const Status good = backend->allReduce(data.data(), data.data(), 64, DataType::F32, ReduceOp::Sum, mesh.allAxes());
  EXPECT_TRUE(good.isOk()) << good.toString();
  EXPECT_EQ(data[0], static_cast<float>(worldSize()));
  EXPECT_TRUE(allRanksAgree(!::testing::Test::HasFailure()));
}

}  // namespace
}  // namespace chimera::testing
