// SPDX-License-Identifier: Apache-2.0
// Fault notices of the MPI backend (private). A call that fails on one rank before its group or
// peers are known (axes naming no group of the mesh, a routed handle of another exchange) cannot
// refuse through its group's argument agreement: the rank does not know which group its peers
// wait in. It tells every rank of the world instead, on a communicator of the notices' own where
// each rank always has a receive posted; a wait that makes no progress from a rank that sent one
// gives up at once (Mismatch naming it) instead of waiting for its timeout. Since the call's
// messages it had sent stay unmatched, the group's calls are out of step from then on: a rank
// that gives up this way is unusable afterwards (as after a Timeout) and says so on the same
// communicator, so that the rank at fault's next call waiting on it gives up as well.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/status.hpp"

namespace chimera::detail {

struct MpiGroup;

/// How long a wait must have made no progress from a rank that sent a notice before it gives
/// up: long enough for messages that rank sent before its notice (on other communicators, which
/// MPI does not order with it) to arrive, well inside the second every rank should fail within.
inline constexpr std::int64_t kNoticeGraceMs = 200;
/// How long the announcing rank's call waits before it returns, unless every other rank
/// announced as many failures (they all failed the same way): its peers that wait in the call
/// give up within kNoticeGraceMs of the notice, so that its next call does not meet their
/// abandoned one.
inline constexpr std::int64_t kAnnounceWindowMs = 2 * kNoticeGraceMs;

/// The notices of one backend: owns `comm` (a duplicate of the backend's world, its ranks the
/// world ranks), on which it keeps one receive posted from any rank. `announcing`: whether this
/// rank's failures are announced (the backend's argument checks are on; without them the peers
/// of a failed call wait, as they do for a rank-local error); notices of others are taken in either way.
class FaultNotices {
 public:
  FaultNotices(MPI_Comm comm, int rank, int size, bool announcing);
  FaultNotices(const FaultNotices&) = delete;
  FaultNotices& operator=(const FaultNotices&) = delete;
  /// Cancels the posted receive and frees the communicator, unless abandoned or MPI is finalised.
  ~FaultNotices();

  /// This rank's call failed with `error` before its group or peers were known: tells every
  /// other rank, then waits up to kAnnounceWindowMs. Ranks that fail the same way announce as
  /// many notices; a rank counts a peer's notices only beyond its own (a failure every rank made
  /// in the same call leaves nobody waiting), and the window ends once every other rank's are in.
  void announce(const Status& error);

  /// Mismatch when a member of `group` that a wait (`what`) still waits on (`waitingOn`: group
  /// indices, or kWholeGroup for every member) sent a notice not explained by this rank's own,
  /// or gave up after one, and nothing has arrived since `lastProgress` for kNoticeGraceMs; the
  /// wait must then give up. Tells every other rank that this one gave up (once). Takes in the
  /// notices that arrived meanwhile.
  std::optional<Status> verdict(const MpiGroup& group, std::span<const int> waitingOn,
                                std::chrono::steady_clock::time_point lastProgress, std::string_view what);

  /// Mismatch when a member of `group` gave up on a call after a notice (so will not take part
  /// in `what`, a blocking call MPI offers no bound for, such as MPI_Comm_split after an
  /// agreement that member's abandoned messages completed); tells every rank this one gave up.
  std::optional<Status> gaveUpAmong(const MpiGroup& group, std::string_view what);

  /// Whether a notice of a failed call is held that a wait may have to act on (waits then report
  /// their progress through progressFrom).
  bool holdsFaults() const { return holding_ > 0; }
  /// A wait on `group` completed a request from member `member` (kWholeGroup: from every
  /// member): a failure that member announced at least kNoticeGraceMs earlier is settled, since
  /// the member is in step with this rank again (its next call met this one).
  void progressFrom(const MpiGroup& group, int member);

  /// Whether a wait gave up after a notice (the backend is unusable from then on).
  bool gaveUp() const { return gaveUp_; }
  /// Leaves the communicator and the posted receive to process exit (a failed backend).
  void abandon() { abandoned_ = true; }

 private:
  enum class Kind : std::int32_t { Fault = 1, GaveUp = 2 };
  using Clock = std::chrono::steady_clock;
  struct Heard {
    int faults = 0;        // notices of failed calls received from the rank
    int settled = 0;       // of those, the ones the rank was seen in step after
    Clock::time_point at;  // when the last one was taken in
    std::string fault;     // its error
    bool gaveUp = false;   // the rank gave up on a call after a notice (it is unusable)
    std::string why;       // its verdict
  };

  void post();
  void takeIn();
  void tellAll(Kind kind, int serial, const std::string& text);
  // Whether world rank `world`'s notices of failed calls are beyond this rank's own and unsettled.
  bool unexplained(const Heard& from) const { return from.faults > std::max(announced_, from.settled); }
  // Recounts holding_ (the ranks with unexplained notices).
  void recount();
  // The reason to give up on world rank `world` (empty: none).
  std::string reasonFor(int world) const;
  void settle(int world, Clock::time_point now);
  // Gives up on world rank `world` of `group` for `reason` (once told to every rank).
  Status giveUp(const MpiGroup& group, int world, const std::string& reason, std::string_view what,
                std::string_view when);

  MPI_Comm comm_;
  int rank_;
  int size_;
  bool announcing_;
  int announced_ = 0;
  int holding_ = 0;
  bool gaveUp_ = false;
  bool abandoned_ = false;
  std::vector<Heard> heard_;
  std::shared_ptr<std::vector<char>> inbox_;  // kept until exit when the receive cannot be cancelled
  MPI_Request receive_ = MPI_REQUEST_NULL;
};

}  // namespace chimera::detail
