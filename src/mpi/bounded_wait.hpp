// SPDX-License-Identifier: Apache-2.0
// Bounded waits of the MPI backend: every request the backend posts (point-to-point or a
// library collective in its non-blocking form) completes through these, so that a peer that
// stalls, died or called something else turns into a Timeout naming the operation, the
// group and the peers still missing, instead of a wait without end.
#pragma once

#include <mpi.h>

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "chimera/status.hpp"
#include "mpi/fault_notice.hpp"
#include "mpi/mpi_group.hpp"

namespace chimera::detail {

/// Peer marker of a request that waits on the whole group (a library collective), where MPI
/// does not say which member is late.
inline constexpr int kWholeGroup = -1;

/// What MPI may still do to this process's memory through a request that a wait gives up on.
enum class Lends {
  /// Nothing chimera must take back: a send (MPI only reads; after a Timeout the peer may get
  /// bytes the caller changed), or a receive into memory chimera keeps until the process exits
  /// when the request is abandoned (a RequestSet's own buffers, the backend's scratch).
  Chimera,
  /// A receive into the caller's memory (a tensor). Given up on, it is cancelled; one already
  /// matched gets kSettleWindow to finish. One still pending then could be written after the call
  /// returned, so the job ends instead (job_end.hpp), whatever abortOnTimeout says.
  Caller,
};

/// How long a wait that gave up lets matched receives into the caller's memory finish.
inline constexpr std::int64_t kSettleWindowMs = 1000;

/// Completes every request of `requests` (MPI_REQUEST_NULL entries count as complete),
/// polling with MPI_Testsome (the CPU is yielded every 16 polls without progress). `peers[i]` is the group index of the
/// member request i waits on, or kWholeGroup; `lends[i]` what request i writes (Lends::Chimera
/// when `lends` is empty). When `group.timeoutMs` passes without any request completing, pending
/// point-to-point requests are cancelled, receives into the caller's memory settle (Lends), the
/// rest are freed, collective ones are abandoned (MPI cannot cancel them), and the result is
/// Timeout "<what> on <group.label> made no progress for N ms ...: still waiting for world
/// rank(s) ...". BackendError when MPI reports a failure. `leftPending` (when given) tells whether
/// a request was abandoned while MPI may still complete it. While idle it takes in the group's
/// fault notices (fault_notice.hpp); `offer` names the agreement round the requests are, for a
/// member at fault to stand in for (null: they are not one).
[[nodiscard]] Status waitAll(const MpiGroup& group, std::span<MPI_Request> requests, std::span<const int> peers,
                             std::span<const Lends> lends, std::string_view what, bool* leftPending = nullptr,
                             const StandInOffer* offer = nullptr);

/// waitAll for one request.
[[nodiscard]] Status waitOne(const MpiGroup& group, MPI_Request& request, int peer, Lends lends, std::string_view what);

/// MPI_Iprobe for a message from group member `peer` with `tag` on `group.comm`, bounded as
/// waitAll; fills `status` for the matched message.
[[nodiscard]] Status probeWithin(const MpiGroup& group, int peer, int tag, MPI_Status& status, std::string_view what);

/// Requests of one step of an algorithm with the peer each waits on, and the memory of chimera's
/// own those requests read or write (protocol words, addresses, agreements). Whatever is still
/// pending when the set is destroyed (an early error return) is abandoned as by a Timeout, so
/// no request outlives its algorithm unaccounted for; once a request was abandoned, the set's
/// memory is kept until the process exits (keepUntilExit) instead of freed, since a late peer
/// may still complete into it.
class RequestSet {
 public:
  RequestSet() = default;
  RequestSet(const RequestSet&) = delete;
  RequestSet& operator=(const RequestSet&) = delete;
  ~RequestSet();

  /// Reserves room for `n` requests.
  void reserve(std::size_t n);
  /// A fresh MPI_REQUEST_NULL slot for a request that waits on group member `peer`
  /// (kWholeGroup for a collective) and writes as `lends` says; valid until the next add.
  MPI_Request& add(int peer, Lends lends = Lends::Chimera);
  /// Keeps `memory` (what this set's requests read or write) alive as long as MPI may use it.
  void keep(std::shared_ptr<void> memory) { kept_.push_back(std::move(memory)); }
  /// waitAll over the set (`offer` as there), then empties it.
  [[nodiscard]] Status waitAll(const MpiGroup& group, std::string_view what, const StandInOffer* offer = nullptr);

 private:
  std::vector<MPI_Request> requests_;
  std::vector<int> peers_;
  std::vector<Lends> lends_;
  std::vector<std::shared_ptr<void>> kept_;
  bool abandoned_ = false;
};

}  // namespace chimera::detail
