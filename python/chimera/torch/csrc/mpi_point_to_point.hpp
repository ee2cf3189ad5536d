// SPDX-License-Identifier: Apache-2.0
// Point-to-point transfers of one torch process group over MPI, as c10d expects them:
// non-blocking (a send returns before the receiver posts), matched in issue order per peer and
// tag, receives from any source, and every wait bounded. Free of torch headers.
//
// Every send is two messages to (peer, tag): a control message on the channel's control
// communicator (the payload's byte count, or a refusal carrying the sender's error), then the
// payload on its data communicator (none after a refusal whose tag is out of range, zero bytes
// after any other refusal). A receive posts both of its receives at once (from any source: the
// payload's once the control message has named the sender), so the payload lands straight in
// the caller's buffer and progresses in the background; the control message tells it
// at once when the sender refused or sends another size, and it fails then, naming the sender,
// instead of waiting for the timeout or truncating.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera::torch_ext {

/// One posted send or receive. Thread-safe against the other transfers of its channel (they
/// share one lock); one Work owns it.
class MpiTransfer {
 public:
  struct Impl;
  explicit MpiTransfer(std::unique_ptr<Impl> impl);
  /// An unfinished receive is cancelled (one already matched gets a settle window to finish; if
  /// it does not, MPI could write into a tensor torch has back, and the job ends); an unfinished
  /// send is waited for (bounded by the group's timeout), since MPI may still be reading its buffer.
  ~MpiTransfer();
  MpiTransfer(const MpiTransfer&) = delete;
  MpiTransfer& operator=(const MpiTransfer&) = delete;

  /// Sets `done` when the transfer has completed. A receive whose sender refused returns
  /// Mismatch naming the sender and its error; one whose sender sends another byte count,
  /// Mismatch naming the sender and both counts; BackendError when MPI reports a failure.
  [[nodiscard]] Status test(bool& done);
  /// Waits until it completes, at most `timeoutMs` (> 0); errors as test(). Timeout names the
  /// peer and the transfer, which is cancelled (a receive, settled as by the destructor) or
  /// abandoned (a send); the group stays usable for other peers.
  [[nodiscard]] Status wait(std::int64_t timeoutMs);
  /// The group rank a completed receive came from (a receive from any source); the peer
  /// otherwise.
  int source() const;

 private:
  // Ends the job: a receive that could not be cancelled still holds its tensor.
  [[noreturn]] void endWithBufferLent(const std::string& why) const;
  // Cancels what a receive still has posted (a Timeout, a refusal, or the destructor).
  void cancelReceive(const std::string& why);
  // A receive failed by a refusal whose tag was out of range: withdraws its receives, or, when
  // its control message had matched already, takes that message whole and keeps it for the
  // next receive of its source and tag.
  void keepOwnMessage();

  std::unique_ptr<Impl> impl_;
};

/// The point-to-point channel of one process group: its own duplicates of the group's MPI
/// communicator (control and data), so transfers never match the collectives of chimera's
/// backend on the group.
class MpiPointToPoint {
 public:
  struct Impl;
  /// Duplicates `*comm` (an `MPI_Comm*`, collective over its ranks) twice, bounded by
  /// `timeoutMs` (> 0): Timeout when a member does not join.
  [[nodiscard]] static Status create(const void* comm, std::int64_t timeoutMs, std::unique_ptr<MpiPointToPoint>& out);
  explicit MpiPointToPoint(std::shared_ptr<Impl> impl);
  ~MpiPointToPoint();

  /// Tags at or above this are reserved (monitoredBarrier's, and the refusals of tags out of
  /// range); a caller's tags are below it.
  int userTagLimit() const;
  /// The tag reserved for monitoredBarrier.
  int barrierTag() const;
  /// This rank's index in the group, and the group's size.
  int rank() const;
  int size() const;
  /// The timeout of the group (the bound of waits that the caller does not bound itself).
  std::int64_t timeoutMs() const;

  /// Posts a send of `bytes` at `buffer` to group rank `peer` with `tag` (below userTagLimit(),
  /// or barrierTag()). The buffer must stay valid until the transfer completes. InvalidArgument
  /// on a bad peer, tag or size; the caller tells the peer with refuse().
  [[nodiscard]] Status send(const void* buffer, std::size_t bytes, int peer, int tag,
                            std::unique_ptr<MpiTransfer>& out);
  /// Posts a receive into `buffer` from group rank `peer`, or from any source when `peer` is
  /// -1. The message must have exactly `bytes` (another count fails the receive, see MpiTransfer).
  [[nodiscard]] Status recv(void* buffer, std::size_t bytes, int peer, int tag, std::unique_ptr<MpiTransfer>& out);
  /// Tells group rank `peer` that this rank's send to it with `tag` failed (`reason`, cut to a
  /// few hundred bytes): its receive of that tag fails with Mismatch naming this rank; with a
  /// tag out of range, its first receive from this rank whose message this rank sent after the
  /// refusal (or that has none yet) does, and the message it had taken goes to the next receive
  /// of its tag. Nothing when `peer` is not another rank of the group. Does not wait.
  void refuse(int peer, int tag, std::string_view reason);

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace chimera::torch_ext
