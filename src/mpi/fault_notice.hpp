// SPDX-License-Identifier: Apache-2.0
// Fault notices of the MPI backend (private). A call that fails on one rank before its group or
// peers are known (axes naming no group of the mesh, a routed handle of another exchange) cannot
// refuse through its group's argument agreement: the rank does not know which group its peers
// wait in. It tells every rank of the world instead, on a communicator of the notices' own where
// each rank always has a receive posted. A peer whose agreement round (word_agreement.hpp) waits
// on that rank asks it to stand in, naming the group, the round's tag and its size. The rank at
// fault, still inside its failed call, stands in for a group's round once every other member of
// the group asked for it (the round is then its failed call's, not a later one of a peer that is
// ahead): it takes part with a stand-in marker, the round completes on every member with
// Mismatch naming it, and the group's calls stay in step. Asks for a round only some members
// wait in are declined (the rank takes part in it with its next calls); the asker goes on
// waiting. A wait the rank at fault neither served nor declined before its call returned (not an
// agreement round, or an ask that came late) gives up instead (Mismatch naming it): its messages
// of that call stay unmatched, so the group's calls are out of step and a rank that gives up
// this way is unusable afterwards (as after a Timeout) and says so on the same communicator, so
// that the rank at fault's next call waiting on it gives up as well.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
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
/// ask it to stand in within kNoticeGraceMs of the notice (or give up), so that its next call
/// does not meet their abandoned one.
inline constexpr std::int64_t kAnnounceWindowMs = 2 * kNoticeGraceMs;
/// How long a stand-in may go without progress before the rank at fault gives it up (and is
/// unusable): every member of the round it stands in for is already waiting in it.
inline constexpr std::int64_t kStandInLimitMs = 1000;

/// An agreement round (word_agreement.hpp) that a rank at fault may stand in for: its tag on
/// the group's communicator and how many words each member sends.
struct StandInOffer {
  int tag = 0;
  int words = 0;
};

/// The group of this rank that a peer names by its MpiGroup::standInKey; null when there is none.
using StandInGroups = std::function<const MpiGroup*(std::int64_t key)>;

/// What one wait asked of ranks at fault; FaultNotices::verdict keeps it.
struct NoticeWait {
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::vector<std::pair<int, int>> asked;  ///< (world rank, serial of its failure) asked to stand in
  std::chrono::steady_clock::time_point askedAt;
};

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

  /// Where stand-ins find the groups peers name (the backend's group cache); none when empty.
  void serve(StandInGroups groups) { groups_ = std::move(groups); }

  /// This rank's call failed with `error` before its group or peers were known: tells every
  /// other rank, then waits up to kAnnounceWindowMs, standing in for each agreement round every
  /// other member of its group asked for, and tells every rank it is done (declining the asks it
  /// did not serve). Ranks that fail the same way announce as many notices; a rank counts a
  /// peer's notices only beyond its own (a failure every rank made in the same call leaves nobody
  /// waiting). The window ends early once every other rank failed alike or asked.
  void announce(const Status& error);

  /// Whether a wait (`what`) on `group` must give up on a member it still waits on
  /// (`waitingOn`: group indices, or kWholeGroup for every member). When one failed a call
  /// before it knew the call's group (its notice not explained by this rank's own) and `offer`
  /// names the agreement round the wait is (null: not one), asks it to stand in, once nothing
  /// has arrived since `lastProgress` for kNoticeGraceMs or at once when the notice came before
  /// the wait began; a declined ask settles the failure (the wait goes on). Mismatch (the wait
  /// gives up) when that member gave up after a notice, when it failed and no round is offered,
  /// or when it was asked and finished its failed call without standing in or declining, in
  /// each case after kNoticeGraceMs without progress; tells every other rank that this one gave
  /// up (once). Takes in the notices that arrived meanwhile.
  std::optional<Status> verdict(const MpiGroup& group, std::span<const int> waitingOn,
                                std::chrono::steady_clock::time_point lastProgress, std::string_view what,
                                const StandInOffer* offer, NoticeWait& wait);

  /// World rank `world`'s failures are settled: it stood in for an agreement round of this rank.
  void settle(int world);
  /// The error world rank `world` last announced (empty when none arrived).
  std::string faultOf(int world);

  /// Mismatch when a member of `group` gave up on a call after a notice (so will not take part
  /// in `what`, a blocking call MPI offers no bound for, such as MPI_Comm_split after an
  /// agreement that member's abandoned messages completed); tells every rank this one gave up.
  std::optional<Status> gaveUpAmong(const MpiGroup& group, std::string_view what);

  /// Whether a notice is held that a wait may have to act on (a failed call not explained yet, a
  /// rank that gave up; waits then report their progress through progressFrom).
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
  enum class Kind : std::int32_t { Fault = 1, GaveUp = 2, StandIn = 3, Done = 4, Declined = 5 };
  using Clock = std::chrono::steady_clock;
  struct Heard {
    int faults = 0;            // notices of failed calls received from the rank
    int settled = 0;           // of those, the ones the rank was seen in step after (or stood in for)
    int done = 0;              // of those, the ones whose call the rank said it finished
    int declined = 0;          // of those, the last one whose call declined this rank's ask
    Clock::time_point at;      // when the last one was taken in
    Clock::time_point doneAt;  // when the last Done (or Declined) was
    std::string fault;         // its error
    bool gaveUp = false;       // the rank gave up on a call after a notice (it is unusable)
    std::string why;           // its verdict
  };
  // A peer's request that this rank stand in for an agreement round of its failed call.
  struct Ask {
    int from = -1;  // world rank
    std::int64_t key = -1;
    StandInOffer round;
  };

  void post();
  void takeIn();
  void tell(int to, Kind kind, int serial, std::span<const std::int32_t> fields, const std::string& text);
  void tellAll(Kind kind, int serial, const std::string& text);
  // Whether world rank `world` asked this rank to stand in for the group `key` names.
  bool askedFor(int world, std::int64_t key) const;
  // Stands in, once per group, for each round every other member of its group asked for (or
  // failed alike); `served` lists the groups' keys.
  void serveAsks(std::vector<std::int64_t>& served);
  // Whether world rank `world`'s notices of failed calls are beyond this rank's own and unsettled.
  bool unexplained(const Heard& from) const { return from.faults > std::max({announced_, from.settled, from.done}); }
  // Recounts holding_ (the ranks with unexplained notices or that gave up).
  void recount();
  // The reason to give up on world rank `world` (empty: none).
  std::string reasonFor(int world) const;
  void settleAfterGrace(int world, Clock::time_point now);
  // Gives up on world rank `world` of `group` for `reason` (once told to every rank).
  Status giveUp(const MpiGroup& group, int world, const std::string& reason, std::string_view what,
                std::string_view when);

  MPI_Comm comm_;
  StandInGroups groups_;
  std::vector<Ask> asks_;
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
