// SPDX-License-Identifier: Apache-2.0
// Point-to-point transfers of one torch process group over MPI, as c10d expects them:
// non-blocking (a send returns before the receiver posts), matched in issue order per peer and
// tag, receives from any source, and every wait bounded. Free of torch headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "chimera/status.hpp"

namespace chimera::torch_ext {

/// One posted send or receive. Not thread-safe; owned by one Work.
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

  /// Sets `done` when the transfer has completed. BackendError when MPI reports a failure.
  [[nodiscard]] Status test(bool& done);
  /// Waits until it completes, at most `timeoutMs` (> 0). Timeout names the peer and the
  /// transfer, which is cancelled (a receive, settled as by the destructor) or abandoned (a
  /// send); the group stays usable for other peers.
  [[nodiscard]] Status wait(std::int64_t timeoutMs);
  /// The group rank a completed receive came from (a receive from any source); the peer
  /// otherwise.
  int source() const;

 private:
  // Ends the job: a receive that could not be cancelled still holds its tensor.
  [[noreturn]] void endWithBufferLent(const std::string& why) const;

  std::unique_ptr<Impl> impl_;
};

/// The point-to-point channel of one process group: its own duplicate of the group's MPI
/// communicator, so transfers never match the collectives of chimera's backend on the group.
class MpiPointToPoint {
 public:
  struct Impl;
  /// Duplicates `*comm` (an `MPI_Comm*`, collective over its ranks), bounded by `timeoutMs` (> 0):
  /// Timeout when a member does not join.
  [[nodiscard]] static Status create(const void* comm, std::int64_t timeoutMs, std::unique_ptr<MpiPointToPoint>& out);
  explicit MpiPointToPoint(std::unique_ptr<Impl> impl);
  ~MpiPointToPoint();

  /// Tags at or above this are reserved (monitoredBarrier); a caller's tags are below it.
  int userTagLimit() const;
  /// The tag reserved for monitoredBarrier.
  int barrierTag() const;
  /// This rank's index in the group, and the group's size.
  int rank() const;
  int size() const;
  /// The timeout of the group (the bound of waits that the caller does not bound itself).
  std::int64_t timeoutMs() const;

  /// Posts a send of `bytes` at `buffer` to group rank `peer` with `tag` (>= 0). The buffer
  /// must stay valid until the transfer completes. InvalidArgument on a bad peer or tag.
  [[nodiscard]] Status send(const void* buffer, std::size_t bytes, int peer, int tag,
                            std::unique_ptr<MpiTransfer>& out);
  /// Posts a receive into `buffer` from group rank `peer`, or from any source when `peer` is
  /// -1. The message must have exactly `bytes` (a longer one is BackendError at completion).
  [[nodiscard]] Status recv(void* buffer, std::size_t bytes, int peer, int tag, std::unique_ptr<MpiTransfer>& out);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace chimera::torch_ext
