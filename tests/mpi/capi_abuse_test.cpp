// SPDX-License-Identifier: Apache-2.0
// C API abuse on 8 ranks: null, foreign, destroyed, doubly destroyed, wrong-kind and stale
// handles (communicators, sessions, routed exchanges and dispatch handles), a communicator
// destroyed under a live session or exchange, a routed handle given to another exchange,
// unversioned options, and counts whose byte size does not fit.
// Each gives a clear chimeraResult_t and message on the calling rank; none crashes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "chimera/chimera.h"
#include "mpi_test_util.hpp"

namespace chimera::testing {
namespace {

bool lastErrorHas(const std::string& text) {
  return std::string(chimeraGetLastError()).find(text) != std::string::npos;
}

TEST(CApiAbuse, DestroyedCommunicatorIsRefusedNotUsed) {
  chimeraComm_t comm = nullptr;
  ASSERT_EQ(chimeraCommInitMpi(&comm, "pp=2,tp=4"), chimeraSuccess) << chimeraGetLastError();
  ASSERT_EQ(chimeraCommDestroy(comm), chimeraSuccess);
  // Use after destroy and double destroy: the registry knows the handle is gone.
  float x = 1;
  int rank = -1;
  EXPECT_EQ(chimeraAllReduce(&x, &x, 1, chimeraFloat32, chimeraSum, "tp", comm), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("not live")) << chimeraGetLastError();
  EXPECT_EQ(chimeraCommRank(comm, &rank), chimeraInvalidArgument);
  EXPECT_EQ(rank, -1);
  EXPECT_EQ(chimeraBroadcast(&x, &x, 1, chimeraFloat32, 0, "tp", comm), chimeraInvalidArgument);
  EXPECT_EQ(chimeraSend(&x, 1, chimeraFloat32, 0, comm), chimeraInvalidArgument);
  chimeraSession_t session = nullptr;
  EXPECT_EQ(chimeraSessionBegin(comm, 1, &session), chimeraInvalidArgument);
  EXPECT_EQ(session, nullptr);
  EXPECT_EQ(chimeraCommDestroy(comm), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("already destroyed")) << chimeraGetLastError();
}

TEST(CApiAbuse, ForeignPointersAreNotHandles) {
  int notAComm = 0;
  auto* foreign = reinterpret_cast<chimeraComm_t>(&notAComm);
  float x = 1;
  EXPECT_EQ(chimeraAllReduce(&x, &x, 1, chimeraFloat32, chimeraSum, "tp", foreign), chimeraInvalidArgument);
  EXPECT_EQ(chimeraCommDestroy(foreign), chimeraInvalidArgument);
  auto* foreignSession = reinterpret_cast<chimeraSession_t>(&notAComm);
  EXPECT_EQ(chimeraSessionFlush(foreignSession), chimeraInvalidArgument);
  EXPECT_EQ(chimeraSessionEnd(foreignSession), chimeraInvalidArgument);
  EXPECT_EQ(notAComm, 0);
}

TEST(CApiAbuse, CommunicatorOutlivesItsSessions) {
  chimeraComm_t comm = nullptr;
  ASSERT_EQ(chimeraCommInitMpi(&comm, "pp=2,tp=4"), chimeraSuccess) << chimeraGetLastError();
  chimeraSession_t session = nullptr;
  ASSERT_EQ(chimeraSessionBegin(comm, 1, &session), chimeraSuccess) << chimeraGetLastError();
  EXPECT_EQ(chimeraCommDestroy(comm), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("1 live session")) << chimeraGetLastError();
  // Both still work after the refused destroy.
  EXPECT_EQ(chimeraSessionFlush(session), chimeraSuccess) << chimeraGetLastError();
  float x = 1;
  EXPECT_EQ(chimeraAllReduce(&x, &x, 1, chimeraFloat32, chimeraSum, "tp", comm), chimeraSuccess);
  EXPECT_EQ(x, 4.0f);
  EXPECT_EQ(chimeraSessionEnd(session), chimeraSuccess);
  EXPECT_EQ(chimeraSessionEnd(session), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("already ended")) << chimeraGetLastError();
  EXPECT_EQ(chimeraSessionFlush(session), chimeraInvalidArgument);
  EXPECT_EQ(chimeraCommDestroy(comm), chimeraSuccess);
}

TEST(CApiAbuse, CountsWhoseBytesDoNotFitAreRefused) {
  chimeraComm_t comm = nullptr;
  ASSERT_EQ(chimeraCommInitMpi(&comm, "pp=2,tp=4"), chimeraSuccess) << chimeraGetLastError();
  int rank = 0;
  ASSERT_EQ(chimeraCommRank(comm, &rank), chimeraSuccess);
  float x[8] = {};
  for (const std::size_t count : {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / 4 + 1, std::size_t{1} << 62}) {
    EXPECT_EQ(chimeraAllReduce(x, x, count, chimeraFloat32, chimeraSum, "tp", comm), chimeraInvalidArgument);
    EXPECT_TRUE(lastErrorHas("do not fit")) << chimeraGetLastError();
    EXPECT_EQ(chimeraReduceScatter(x, x, count, chimeraFloat32, chimeraSum, "tp", comm), chimeraInvalidArgument);
    EXPECT_EQ(chimeraAllGather(x, x, count, chimeraFloat32, "tp", comm), chimeraInvalidArgument);
    EXPECT_EQ(chimeraAllToAll(x, x + 4, count, chimeraFloat32, "tp", comm), chimeraInvalidArgument);
    EXPECT_EQ(chimeraBroadcast(x, x, count, chimeraFloat32, 0, "tp", comm), chimeraInvalidArgument);
    // A send or recv refuses its transfer to its peer (Backend::refuseTransfers): pairs of
    // ranks, each side refusing, so both learn the other's refusal and return their own error.
    const int peer = rank ^ 1;
    const auto send = [&] { return chimeraSend(x, count, chimeraFloat32, peer, comm); };
    const auto recv = [&] { return chimeraRecv(x, count, chimeraFloat32, peer, comm); };
    EXPECT_EQ(rank % 2 == 0 ? send() : recv(), chimeraInvalidArgument);
    EXPECT_TRUE(lastErrorHas("do not fit")) << chimeraGetLastError();
    EXPECT_EQ(rank % 2 == 0 ? recv() : send(), chimeraInvalidArgument);
  }
  // A per-rank count that fits alone but not times the 4 ranks of tp.
  const std::size_t perRank = (std::size_t{1} << 59) + 1;  // 2^61 + 4 bytes; x 4 ranks > PTRDIFF_MAX
  EXPECT_EQ(chimeraAllGather(x, x, perRank, chimeraFloat32, "tp", comm), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("x 4 ranks")) << chimeraGetLastError();
  // The communicator is unharmed.
  x[0] = 1;
  EXPECT_EQ(chimeraAllReduce(x, x, 1, chimeraFloat32, chimeraSum, "tp", comm), chimeraSuccess);
  EXPECT_EQ(x[0], 4.0f);
  EXPECT_EQ(chimeraCommDestroy(comm), chimeraSuccess);
}

TEST(CApiAbuse, RedistributeRefusesShortBuffers) {
  chimeraComm_t comm = nullptr;
  ASSERT_EQ(chimeraCommInitMpi(&comm, "pp=2,tp=4"), chimeraSuccess) << chimeraGetLastError();
  float in[64] = {};
  float out[64] = {};
  EXPECT_EQ(chimeraRedistribute("16,8", chimeraFloat32, "tp=S0", "tp=R", in, sizeof(in), out, 16, comm),
            chimeraInvalidArgument);
  EXPECT_EQ(chimeraRedistribute("1152921504606846976,16", chimeraFloat32, "tp=S0", "tp=R", in, sizeof(in), out,
                                sizeof(out), comm),
            chimeraInvalidArgument);
  EXPECT_EQ(chimeraCommDestroy(comm), chimeraSuccess);
}

// The options of a top-1 routed exchange of 4 experts over tp, rows of 2 floats.
chimeraRoutedOptions_t routedOptions() {
  chimeraRoutedOptions_t options = CHIMERA_ROUTED_OPTIONS_INITIALIZER;
  options.numExperts = 4;
  options.topK = 1;
  options.hidden = 2;
  options.group = "tp";
  return options;
}

// Dispatches 3 tokens, each to expert 0; the handle, or null.
chimeraRoutedHandle_t dispatchThree(chimeraRoutedExchange_t exchange) {
  float x[6] = {1, 1, 1, 1, 1, 1};
  float w[3] = {1, 1, 1};
  std::int64_t ids[3] = {0, 0, 0};
  chimeraRoutedHandle_t handle = nullptr;
  std::int64_t rows = 0;
  if (chimeraRoutedDispatch(exchange, x, ids, w, 3, &handle, &rows) != chimeraSuccess) return nullptr;
  return handle;
}

// Routed exchanges and dispatch handles live in the registry: destroyed ones, doubly destroyed
// ones, handles of another kind and a handle made after another was destroyed are told apart,
// without touching freed memory (the sanitizer stage runs this test under ASan).
TEST(CApiAbuse, RoutedHandlesAreCheckedLikeEveryHandle) {
  chimeraComm_t comm = nullptr;
  ASSERT_EQ(chimeraCommInitMpi(&comm, "pp=2,tp=4"), chimeraSuccess) << chimeraGetLastError();
  const chimeraRoutedOptions_t options = routedOptions();
  chimeraRoutedExchange_t first = nullptr;
  ASSERT_TRUE(allRanksAgree(chimeraRoutedExchangeCreate(comm, &options, &first) == chimeraSuccess))
      << chimeraGetLastError();
  chimeraRoutedHandle_t handle = dispatchThree(first);
  ASSERT_TRUE(allRanksAgree(handle != nullptr)) << chimeraGetLastError();
  // A communicator with a live exchange stays.
  EXPECT_EQ(chimeraCommDestroy(comm), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("1 live routed exchange")) << chimeraGetLastError();
  // A handle of one kind where another is expected.
  std::int64_t tokens = -1;
  EXPECT_EQ(chimeraRoutedHandleTokens(reinterpret_cast<chimeraRoutedHandle_t>(first), &tokens), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("is a routed exchange, not a routed dispatch handle")) << chimeraGetLastError();
  EXPECT_EQ(chimeraRoutedExchangeDestroy(reinterpret_cast<chimeraRoutedExchange_t>(comm)), chimeraInvalidArgument);
  // Use after destroy and double destroy of a dispatch handle.
  EXPECT_EQ(chimeraRoutedHandleDestroy(handle), chimeraSuccess);
  EXPECT_EQ(chimeraRoutedHandleTokens(handle, &tokens), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("already destroyed")) << chimeraGetLastError();
  float out[64] = {};
  EXPECT_EQ(chimeraRoutedReceive(first, handle, out, nullptr, out, nullptr), chimeraInvalidArgument);
  EXPECT_EQ(chimeraRoutedCombine(first, handle, out, nullptr, out), chimeraInvalidArgument);
  EXPECT_EQ(chimeraRoutedHandleDestroy(handle), chimeraInvalidArgument);
  EXPECT_EQ(tokens, -1);
  // Use after destroy and double destroy of an exchange; a new exchange made afterwards (its
  // object possibly where the old one's was) does not answer to the old handle.
  EXPECT_EQ(chimeraRoutedExchangeDestroy(first), chimeraSuccess);
  chimeraRoutedExchange_t second = nullptr;
  ASSERT_TRUE(allRanksAgree(chimeraRoutedExchangeCreate(comm, &options, &second) == chimeraSuccess))
      << chimeraGetLastError();
  EXPECT_NE(second, first);
  chimeraRoutedHandle_t stale = nullptr;
  float x[2] = {1, 1};
  float w[1] = {1};
  std::int64_t ids[1] = {0};
  EXPECT_EQ(chimeraRoutedDispatch(first, x, ids, w, 1, &stale, nullptr), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("already destroyed")) << chimeraGetLastError();
  EXPECT_EQ(stale, nullptr);
  EXPECT_EQ(chimeraRoutedExchangeDestroy(first), chimeraInvalidArgument);
  // A handle of another exchange (other options): refused by the exchange, not indexed.
  chimeraRoutedOptions_t otherOptions = routedOptions();
  otherOptions.numExperts = 8;
  otherOptions.topK = 2;
  chimeraRoutedExchange_t other = nullptr;
  ASSERT_TRUE(allRanksAgree(chimeraRoutedExchangeCreate(comm, &otherOptions, &other) == chimeraSuccess))
      << chimeraGetLastError();
  chimeraRoutedHandle_t mine = dispatchThree(second);
  ASSERT_TRUE(allRanksAgree(mine != nullptr)) << chimeraGetLastError();
  EXPECT_EQ(chimeraRoutedReceive(other, mine, out, nullptr, out, nullptr), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("another routed exchange")) << chimeraGetLastError();
  EXPECT_EQ(chimeraRoutedReceive(second, mine, out, nullptr, out, nullptr), chimeraSuccess) << chimeraGetLastError();
  EXPECT_EQ(chimeraRoutedHandleDestroy(mine), chimeraSuccess);
  EXPECT_EQ(chimeraRoutedExchangeDestroy(other), chimeraSuccess);
  EXPECT_EQ(chimeraRoutedExchangeDestroy(second), chimeraSuccess);
  EXPECT_EQ(chimeraCommDestroy(comm), chimeraSuccess) << chimeraGetLastError();
}

// Sessions and communicators: a handle made after another was destroyed does not answer to the
// old one's value.
TEST(CApiAbuse, DestroyedHandlesStayDeadAfterNewOnes) {
  chimeraComm_t comm = nullptr;
  ASSERT_EQ(chimeraCommInitMpi(&comm, "pp=2,tp=4"), chimeraSuccess) << chimeraGetLastError();
  chimeraSession_t old = nullptr;
  ASSERT_EQ(chimeraSessionBegin(comm, 1, &old), chimeraSuccess) << chimeraGetLastError();
  ASSERT_EQ(chimeraSessionEnd(old), chimeraSuccess);
  chimeraSession_t session = nullptr;
  ASSERT_EQ(chimeraSessionBegin(comm, 1, &session), chimeraSuccess) << chimeraGetLastError();
  EXPECT_NE(session, old);
  EXPECT_EQ(chimeraSessionFlush(old), chimeraInvalidArgument);
  EXPECT_EQ(chimeraSessionFlush(session), chimeraSuccess) << chimeraGetLastError();
  // A session where a communicator is expected.
  int rank = -1;
  EXPECT_EQ(chimeraCommRank(reinterpret_cast<chimeraComm_t>(session), &rank), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("is a session, not a communicator")) << chimeraGetLastError();
  EXPECT_EQ(chimeraSessionEnd(session), chimeraSuccess);
  EXPECT_EQ(chimeraCommDestroy(comm), chimeraSuccess);
}

// chimeraRoutedOptions_t is versioned: a struct not declared with its initializer is refused on
// the rank that passes it (InvalidArgument naming the initializer) and fails its group's
// creation (Mismatch naming that rank), in the creation's agreement; none waits.
TEST(CApiAbuse, RoutedOptionsAreVersioned) {
  chimeraComm_t comm = nullptr;
  ASSERT_EQ(chimeraCommInitMpi(&comm, "pp=2,tp=4"), chimeraSuccess) << chimeraGetLastError();
  int rank = 0;
  ASSERT_EQ(chimeraCommRank(comm, &rank), chimeraSuccess);
  chimeraRoutedOptions_t options = routedOptions();
  if (rank == 3) {
    std::memset(&options, 0, sizeof(options));  // a zero-initialised struct: no magic
    options.numExperts = 4;
    options.topK = 1;
    options.hidden = 2;
    options.group = "tp";
  }
  chimeraRoutedExchange_t exchange = nullptr;
  const chimeraResult_t result = chimeraRoutedExchangeCreate(comm, &options, &exchange);
  const std::string error = result == chimeraSuccess ? "" : chimeraGetLastError();
  // tp groups are ranks 0-3 and 4-7.
  const chimeraResult_t want = rank == 3 ? chimeraInvalidArgument : rank < 4 ? chimeraMismatch : chimeraSuccess;
  const std::string names = rank == 3 ? "CHIMERA_ROUTED_OPTIONS_INITIALIZER" : rank < 4 ? "rank 3" : "";
  const bool right = result == want && error.find(names) != std::string::npos;
  EXPECT_TRUE(right) << error;
  EXPECT_TRUE(allRanksAgree(right));
  if (exchange != nullptr) {
    EXPECT_EQ(chimeraRoutedExchangeDestroy(exchange), chimeraSuccess);
  }
  // A version this library does not know.
  chimeraRoutedOptions_t future = routedOptions();
  future.version = CHIMERA_ROUTED_OPTIONS_VERSION + 1;
  EXPECT_EQ(chimeraRoutedExchangeCreate(comm, &future, &exchange), chimeraInvalidArgument);
  EXPECT_TRUE(lastErrorHas("does not know")) << chimeraGetLastError();
  EXPECT_EQ(chimeraCommDestroy(comm), chimeraSuccess) << chimeraGetLastError();
}

}  // namespace
}  // namespace chimera::testing
