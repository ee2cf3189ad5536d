// SPDX-License-Identifier: Apache-2.0
// Fault notices of the gloo mesh backend: the MPI backend's (src/mpi/fault_notice.hpp), through
// the store the mesh's gloo groups meet in instead of a communicator. A call that fails on one
// rank before it knows the call's group (axes naming no group of the mesh, a routed handle of
// another exchange) records its failure in the store under a serial of its own. A member whose
// agreement round (one int64 MIN all-reduce on its group's gloo backend) has waited 200 ms
// reads the failures recorded since it last looked and asks each rank at fault in its group to
// stand in, naming the group (its axis bits) and the round's words. The rank at fault, still
// inside its failed call, stands in for a group's round once every other member of the group
// asked (the round is then its failed call's, not a later one of a peer that is ahead): it takes
// part in that all-reduce with words that change no minimum and a marker carrying its rank, so
// every member fails the round with Mismatch naming it and the group goes on in step. A gloo
// all-reduce cannot be abandoned, so a member the rank at fault does not stand in for (an ask
// that came after its window, a round of a later call) goes on waiting as before.
//
// Keys, under the mesh's prefix in the store: "notices/count" (the serials handed out),
// "notices/fault/<serial>" ("<rank> <error>"), "notices/ask/<serial>/<rank>" ("<key> <words>")
// and "notices/asks/<serial>" (how many asked), "notices/done/<serial>" (the window ended).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "chimera/status.hpp"

namespace chimera::torch_ext {

/// How long an agreement round waits before it reads the store for failures (MPI's
/// kNoticeGraceMs): a round that completes sooner never touches the store.
inline constexpr std::chrono::milliseconds kGlooNoticeGrace{200};
/// How long the rank at fault stays inside its failed call to stand in (MPI's kAnnounceWindowMs).
inline constexpr std::chrono::milliseconds kGlooAnnounceWindow{400};

class GlooFaultNotices {
 public:
  /// Takes part in the round a peer asked for: an all-reduce of `words` words on the group
  /// whose key is `key`, all neutral but the marker; false when this rank has no such group.
  using StandIn = std::function<bool(std::int64_t key, int words)>;
  /// The members (mesh ranks) of this rank's group whose key is `key`; empty when there is none.
  using Members = std::function<std::vector<int>(std::int64_t key)>;

  GlooFaultNotices(c10::intrusive_ptr<c10d::Store> store, std::string prefix, int rank, int size);

  /// This rank's call failed with `error` before its group was known: records it, then stands
  /// in, for up to kGlooAnnounceWindow, for each round every other member of its group asked for
  /// (a member that failed in the meantime counts as having asked). The window ends early once
  /// every other rank asked.
  void announce(const Status& error, const Members& members, const StandIn& standIn);

  /// An agreement round on the group `key` (members `members`, `words` words each) that has
  /// waited kGlooNoticeGrace: asks every member whose recorded failure is not settled to stand in
  /// (once per failure). Store failures are ignored (the round waits as without notices).
  void offer(std::int64_t key, int words, std::span<const int> members);

  /// Mesh rank `rank` stood in for a round of this rank: its failures are settled.
  void settle(int rank);
  /// The error mesh rank `rank` last recorded (empty when none was read).
  std::string faultOf(int rank) const;

 private:
  struct Fault {
    int rank = -1;
    std::string error;
    bool settled = false;  // stood in, or its window ended
    bool asked = false;    // this rank asked it to stand in
  };
  // Reads the failures recorded since the last look.
  void readNew();
  bool has(const std::string& key) const;
  std::string get(const std::string& key) const;
  std::string key(const std::string& what, std::int64_t serial) const;

  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  int rank_;
  int size_;
  std::int64_t read_ = 0;                 // failures read so far (serials 1..read_)
  std::map<std::int64_t, Fault> faults_;  // by serial
};

}  // namespace chimera::torch_ext
