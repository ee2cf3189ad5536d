// SPDX-License-Identifier: Apache-2.0
// The state of the MPI point-to-point channel and of its transfers (private to
// mpi_point_to_point.cpp, the channel, and mpi_transfer.cpp, the transfers): the control
// messages that precede every payload, and what a receive keeps of them.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "chimera/status.hpp"
#include "mpi_point_to_point.hpp"

namespace chimera::torch_ext {

using Buffer = std::vector<std::byte>;

// A control message: three words, its kind, a value (Data: the payload's bytes; Refusal: the
// tag the sender was given) and its number among the sender's control messages to this
// receiver (refusals whose tag was out of range travel apart: the numbers order them among the
// others), then a refusal's reason, cut to fit kControlBytes.
enum class Control : std::int64_t { Data = 1, Refusal = 2 };
constexpr std::size_t kControlHead = 3 * sizeof(std::int64_t);
constexpr std::size_t kControlBytes = 512;

// A refusal whose tag was out of range, received (see MpiTransfer::test).
struct KeptRefusal {
  int source = 0;
  std::int64_t number = 0;
  Buffer message;
};

// A message a receive took before a refusal failed it (see MpiPointToPoint::Impl::kept).
struct KeptMessage {
  int source = 0;
  int tag = 0;
  Buffer control;
  Buffer payload;
};

/// BackendError naming `what` and MPI's text for `code`; ok for MPI_SUCCESS.
Status mpiError(int code, const char* what);

struct MpiPointToPoint::Impl {
  MPI_Comm control = MPI_COMM_NULL;
  MPI_Comm data = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
  int tagUpperBound = 32767;
  std::int64_t timeoutMs = 0;
  // Guards what follows and the state of every transfer of the channel: a test of one transfer
  // progresses the others (posts the payload receives that wait).
  std::mutex mutex;
  // Receives whose payload receive is not posted yet, in the order they were posted: from any
  // source until their control message names the sender, and from one rank while an earlier
  // such receive of the same tag waits (it may take that rank's next message, whose payload
  // must then go to it, not to the later receive).
  std::deque<MpiTransfer::Impl*> unposted;
  // Receives posted and not done, in the order they were posted.
  std::vector<MpiTransfer::Impl*> pending;
  // Messages that a receive had already taken when a refusal whose tag was out of range failed
  // it (the refusing rank's next message, sent after the refusal): each goes to the next
  // receive of its source and tag, ahead of the messages MPI matches later, so every receive
  // gets the messages of one source and tag in the order they were sent.
  std::deque<KeptMessage> kept;
  // Per group rank: the control messages this rank sent it.
  std::vector<std::int64_t> sentTo;
  // Refusals whose tag was out of range, received and not yet given to a receive.
  std::deque<KeptRefusal> refusalsIn;
  // Refusals on their way, with their messages.
  std::vector<std::pair<MPI_Request, std::shared_ptr<Buffer>>> refusals;
  // Why control and payload messages no longer pair up (a cancelled receive took one of the two
  // of a message): every later receive fails with it.
  std::string broken;

  int barrierTag() const { return tagUpperBound - 1; }
  // The control tag of refusals whose own tag was out of range.
  int outOfRangeTag() const { return tagUpperBound; }
  bool sendable(int tag) const { return tag >= 0 && tag <= barrierTag(); }
};

struct MpiTransfer::Impl {
  std::shared_ptr<MpiPointToPoint::Impl> channel;
  MPI_Request control = MPI_REQUEST_NULL;
  MPI_Request data = MPI_REQUEST_NULL;
  std::shared_ptr<Buffer> message;  // the control message sent, or the one received into
  void* buffer = nullptr;           // the payload
  int rank = 0;                     // this rank in the group, for the job's end
  bool isSend = false;
  int peer = 0;  // -1: any source
  int tag = 0;
  std::size_t bytes = 0;
  int source = -1;
  bool controlIn = false;    // a receive's control message is in (`verdict` says what it told)
  int controlBytes = 0;      // its size
  std::int64_t number = 0;   // its number among its sender's control messages to this rank
  std::size_t received = 0;  // the payload bytes MPI wrote
  bool dataPosted = false;
  bool dataIn = false;
  bool done = false;
  Status verdict;
  std::int64_t timeoutMs = 0;
};

using Transfer = MpiTransfer::Impl;

/// Posts `t`'s payload receive from group rank `source` (see mpi_transfer.cpp).
void postPayload(Transfer& t, int source);
/// Gives receive `t` the kept message `kept`, as if MPI had delivered it.
void deliver(Transfer& t, const KeptMessage& kept);

}  // namespace chimera::torch_ext
