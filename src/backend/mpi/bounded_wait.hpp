// SPDX-License-Identifier: Apache-2.0
// Bounded waits of the MPI backend: every request the backend posts (point-to-point or a
// library collective in its non-blocking form) completes through these, so that a peer that
// stalls, died or called something else turns into a Timeout naming the operation, the
// group and the peers still missing, instead of a wait without end.
#pragma once

#include <mpi.h>

#include <span>
#include <string_view>
#include <vector>

#include "backend/mpi/mpi_group.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// Peer marker of a request that waits on the whole group (a library collective), where MPI
/// does not say which member is late.
inline constexpr int kWholeGroup = -1;

/// Completes every request of `requests` (MPI_REQUEST_NULL entries count as complete),
/// polling with MPI_Testsome (the CPU is yielded every 16 polls without progress). `peers[i]` is the group index of the
/// member request i waits on, or kWholeGroup. When `group.timeoutMs` passes without any request completing, pending
/// point-to-point requests are cancelled and freed, collective ones are abandoned (MPI cannot
/// cancel them), and the result is Timeout "<what> on <group.label> made no progress for N ms
/// ...: still waiting for world rank(s) ...". BackendError when MPI reports a failure.
[[nodiscard]] Status waitAll(const MpiGroup& group, std::span<MPI_Request> requests, std::span<const int> peers,
                             std::string_view what);

/// waitAll for one request.
[[nodiscard]] Status waitOne(const MpiGroup& group, MPI_Request& request, int peer, std::string_view what);

/// MPI_Iprobe for a message from group member `peer` with `tag` on `group.comm`, bounded as
/// waitAll; fills `status` for the matched message.
[[nodiscard]] Status probeWithin(const MpiGroup& group, int peer, int tag, MPI_Status& status, std::string_view what);

/// Requests of one step of an algorithm with the peer each waits on. Whatever is still
/// pending when the set is destroyed (an early error return) is abandoned as by a Timeout, so
/// no request outlives its algorithm unaccounted for.
class RequestSet {
 public:
  RequestSet() = default;
  RequestSet(const RequestSet&) = delete;
  RequestSet& operator=(const RequestSet&) = delete;
  ~RequestSet();

  /// Reserves room for `n` requests.
  void reserve(std::size_t n);
  /// A fresh MPI_REQUEST_NULL slot for a request that waits on group member `peer`
  /// (kWholeGroup for a collective); valid until the next add.
  MPI_Request& add(int peer);
  /// waitAll over the set, then empties it.
  [[nodiscard]] Status waitAll(const MpiGroup& group, std::string_view what);

 private:
  std::vector<MPI_Request> requests_;
  std::vector<int> peers_;
};

}  // namespace chimera::detail
