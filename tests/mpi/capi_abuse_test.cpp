// SPDX-License-Identifier: Apache-2.0
// C API abuse on 8 ranks: null, foreign, destroyed and doubly destroyed handles, a
// communicator destroyed under a live session, and counts whose byte size does not fit.
// Each gives a clear chimeraResult_t and message on the calling rank; none crashes.
#include <gtest/gtest.h>

#include <cstdint>
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
  float x[8] = {};
  for (const std::size_t count : {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / 4 + 1, std::size_t{1} << 62}) {
    EXPECT_EQ(chimeraAllReduce(x, x, count, chimeraFloat32, chimeraSum, "tp", comm), chimeraInvalidArgument);
    EXPECT_TRUE(lastErrorHas("do not fit")) << chimeraGetLastError();
    EXPECT_EQ(chimeraReduceScatter(x, x, count, chimeraFloat32, chimeraSum, "tp", comm), chimeraInvalidArgument);
    EXPECT_EQ(chimeraAllGather(x, x, count, chimeraFloat32, "tp", comm), chimeraInvalidArgument);
    EXPECT_EQ(chimeraAllToAll(x, x + 4, count, chimeraFloat32, "tp", comm), chimeraInvalidArgument);
    EXPECT_EQ(chimeraBroadcast(x, x, count, chimeraFloat32, 0, "tp", comm), chimeraInvalidArgument);
    EXPECT_EQ(chimeraSend(x, count, chimeraFloat32, 0, comm), chimeraInvalidArgument);
    EXPECT_EQ(chimeraRecv(x, count, chimeraFloat32, 0, comm), chimeraInvalidArgument);
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

}  // namespace
}  // namespace chimera::testing
