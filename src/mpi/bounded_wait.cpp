// SPDX-License-Identifier: Apache-2.0
// Implements the MPI backend's bounded waits: every posted request completes or times out.
#include "mpi/bounded_wait.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "job/job_end.hpp"
#include "mpi/abandoned_memory.hpp"
#include "mpi/fault_notice.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kRollCallTag = 0x524c;  // 'RL'
// Polls between two yields of the CPU while a wait makes no progress. Yielding after every
// poll hands the core to the other ranks before a message that is arriving can be taken in:
// on 8 ranks over 2 cores a 1 KiB MPI_Iallreduce took 57 us that way, 28 us when yielding
// every 16 polls (as MPI_Wait does), with no change at 4 MiB (docs/performance.md).
constexpr int kPollsPerYield = 16;

// Gives the CPU away every kPollsPerYield idle polls.
class IdlePolls {
 public:
  // True when it yielded (then a wait also takes in the group's fault notices).
  bool idle() {
    if (++polls_ % kPollsPerYield != 0) return false;
    std::this_thread::yield();
    return true;
  }

 private:
  int polls_ = 0;
};

// How long a roll call listens: long enough for the members that gave up on the same
// collective a little later, short enough to end the job within the timeout plus a few seconds.
constexpr std::chrono::milliseconds kRollCallWindow{2000};

// The group index request i waits on: `peers[i]`, or kWholeGroup past the end of `peers`.
int peerOf(std::span<const int> peers, std::size_t i) { return i < peers.size() ? peers[i] : kWholeGroup; }

Clock::duration budget(const MpiGroup& group) { return std::chrono::milliseconds(group.timeoutMs); }

int worldRankOf(const MpiGroup& group, int index) {
  if (index >= 0 && static_cast<std::size_t>(index) < group.members.size())
    return group.members[static_cast<std::size_t>(index)];
  return index;
}

std::string joined(const std::vector<int>& values) {
  std::string text;
  for (const int v : values) text += (text.empty() ? "" : ", ") + std::to_string(v);
  return text;
}

// The world ranks of the members that do not answer a roll call within the window. Every member
// that gives up on a library collective sends an empty message to every other member, then
// listens: members that gave up too answer each other; a member that is stopped, dead or busy
// elsewhere does not. MPI itself does not say which member of a collective is late.
std::vector<int> silentMembers(const MpiGroup& group, std::chrono::milliseconds window) {
  std::vector<char> heard(static_cast<std::size_t>(group.size), 0);
  heard[static_cast<std::size_t>(group.index)] = 1;
  for (int p = 0; p < group.size; ++p) {
    if (p == group.index) continue;
    MPI_Request request = MPI_REQUEST_NULL;  // empty: no buffer to keep; freed, never waited on
    if (MPI_Isend(nullptr, 0, MPI_BYTE, p, kRollCallTag, group.comm, &request) == MPI_SUCCESS)
      MPI_Request_free(&request);
  }
  int missing = group.size - 1;
  const Clock::time_point deadline = Clock::now() + window;
  while (missing > 0 && Clock::now() < deadline) {
    int found = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, group.comm, &found, &status) != MPI_SUCCESS) break;
    if (found == 0) {
      std::this_thread::yield();
      continue;
    }
    MPI_Recv(nullptr, 0, MPI_BYTE, status.MPI_SOURCE, kRollCallTag, group.comm, MPI_STATUS_IGNORE);
    char& answered = heard[static_cast<std::size_t>(status.MPI_SOURCE)];
    if (answered == 0) --missing;
    answered = 1;
  }
  std::vector<int> silent;
  for (int p = 0; p < group.size; ++p) {
    if (heard[static_cast<std::size_t>(p)] == 0) silent.push_back(worldRankOf(group, p));
  }
  return silent;
}

// "world rank 2", "world ranks 1, 3"; for a pending library collective, the members silent in
// a roll call (or the whole group, when every member answered).
std::string missingPeers(const MpiGroup& group, std::span<const MPI_Request> requests, std::span<const int> peers) {
  std::vector<int> late;
  bool collective = false;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    const int peer = peerOf(peers, i);
    if (peer == kWholeGroup) {
      collective = true;
      continue;
    }
    const int world = worldRankOf(group, peer);
    if (std::find(late.begin(), late.end(), world) == late.end()) late.push_back(world);
  }
  std::sort(late.begin(), late.end());
  std::string text;
  if (!late.empty()) text = fmt::format("world rank{} {}", late.size() == 1 ? "" : "s", joined(late));
  if (collective) {
    if (!text.empty()) text += " and ";
    const auto window = std::min(kRollCallWindow, std::chrono::milliseconds(group.timeoutMs));
    const std::vector<int> silent = silentMembers(group, window);
    if (silent.empty()) {
      text += fmt::format(
          "a member of the group's library collective (world ranks {}; every member answered a roll call, so one "
          "of them waits in another call)",
          joined(group.members));
    } else {
      text += fmt::format("world rank{} {} of the group's library collective (silent in a roll call of {} ms)",
                          silent.size() == 1 ? "" : "s", joined(silent), window.count());
    }
  }
  return text;
}

// Gives up on what is still pending: cancels the point-to-point requests, lets those that write
// into the caller's memory settle for up to kSettleWindowMs (a cancelled receive completes at
// once; one already matched when its data is in), then frees the point-to-point requests left
// (MPI completes them in the background) and abandons the collectives (MPI cannot cancel them).
// Sets `pending` when one was left; returns whether a receive into the caller's memory was.
bool abandon(std::span<MPI_Request> requests, std::span<const int> peers, std::span<const Lends> lends, bool& pending) {
  const auto lendsOf = [&](std::size_t i) { return i < lends.size() ? lends[i] : Lends::Chimera; };
  bool settling = false;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL || peerOf(peers, i) == kWholeGroup) continue;
    MPI_Cancel(&requests[i]);
    settling = settling || lendsOf(i) == Lends::Caller;
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(kSettleWindowMs);
  while (settling && Clock::now() < deadline) {
    settling = false;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] == MPI_REQUEST_NULL || peerOf(peers, i) == kWholeGroup || lendsOf(i) != Lends::Caller) continue;
      int done = 0;
      if (MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 0;
      settling = settling || done == 0;
    }
    if (settling) std::this_thread::yield();
  }
  bool callerLent = false;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    pending = true;
    if (peerOf(peers, i) != kWholeGroup) {
      callerLent = callerLent || lendsOf(i) == Lends::Caller;
      MPI_Request_free(&requests[i]);
    }
    requests[i] = MPI_REQUEST_NULL;
  }
  return callerLent;
}

// After a wait gave up with a receive into the caller's memory still pending, returning would let
// MPI write there once the caller has the memory back: the job ends instead.
[[noreturn]] void endWithCallerMemoryLent(const MpiGroup& group, const Status& failure) {
  endJob("mpi", worldRankOf(group, group.index),
         Status(failure.code(),
                fmt::format("{}; a receive into the caller's memory was already matched and did not finish within "
                            "{} ms of its cancellation, so returning would let MPI write into memory the caller "
                            "has back",
                            failure.message(), kSettleWindowMs)),
         std::chrono::milliseconds(group.timeoutMs));
}

Status timedOut(const MpiGroup& group, std::string_view what, const std::string& missing) {
  return Status::timeout(fmt::format("{} on {} made no progress for {} ms (CHIMERA_TIMEOUT_MS): still waiting for {}",
                                     what, group.label, group.timeoutMs, missing));
}

}  // namespace

Status waitAll(const MpiGroup& group, std::span<MPI_Request> requests, std::span<const int> peers,
               std::span<const Lends> lends, std::string_view what, bool* leftPending, const StandInOffer* offer) {
  if (requests.empty()) return Status::ok();
  bool pending = false;
  const auto giveUp = [&](const Status& failure) {
    const bool callerLent = abandon(requests, peers, lends, pending);
    if (leftPending != nullptr) *leftPending = pending;
    if (callerLent) endWithCallerMemoryLent(group, failure);
    return failure;
  };
  thread_local std::vector<int> done;
  done.resize(requests.size());
  NoticeWait notices;
  Clock::time_point lastProgress = notices.started;
  Clock::time_point deadline = lastProgress + budget(group);
  IdlePolls polls;
  for (;;) {
    int completed = 0;
    const int rc =
        MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &completed, done.data(), MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return giveUp(mpiStatus(rc, what));
    if (completed == MPI_UNDEFINED) return Status::ok();  // nothing left active
    const Clock::time_point now = Clock::now();
    if (completed > 0) {
      if (group.notices != nullptr && group.notices->holdsFaults()) {
        for (int j = 0; j < completed; ++j) {
          const auto i = static_cast<std::size_t>(done[static_cast<std::size_t>(j)]);
          group.notices->progressFrom(group, peerOf(peers, i));
        }
      }
      lastProgress = now;
      deadline = now + budget(group);
      continue;
    }
    if (now >= deadline) return giveUp(timedOut(group, what, missingPeers(group, requests, peers)));
    if (polls.idle() && group.notices != nullptr) {
      thread_local std::vector<int> waitingOn;
      waitingOn.clear();
      for (std::size_t i = 0; i < requests.size(); ++i) {
        if (requests[i] != MPI_REQUEST_NULL) waitingOn.push_back(peerOf(peers, i));
      }
      if (std::optional<Status> notice = group.notices->verdict(group, waitingOn, lastProgress, what, offer, notices))
        return giveUp(*notice);
    }
  }
}

Status waitOne(const MpiGroup& group, MPI_Request& request, int peer, Lends lends, std::string_view what) {
  return waitAll(group, {&request, 1}, {&peer, 1}, {&lends, 1}, what);
}

Status probeWithin(const MpiGroup& group, int peer, int tag, MPI_Status& status, std::string_view what) {
  NoticeWait notices;
  const Clock::time_point start = notices.started;
  const Clock::time_point deadline = start + budget(group);
  IdlePolls polls;
  for (;;) {
    int found = 0;
    const int rc = MPI_Iprobe(peer, tag, group.comm, &found, &status);
    if (rc != MPI_SUCCESS) return mpiStatus(rc, what);
    if (found != 0) return Status::ok();
    if (Clock::now() >= deadline) return timedOut(group, what, fmt::format("world rank {}", worldRankOf(group, peer)));
    if (polls.idle() && group.notices != nullptr) {
      if (std::optional<Status> notice = group.notices->verdict(group, {&peer, 1}, start, what, nullptr, notices))
        return *notice;
    }
  }
}

RequestSet::~RequestSet() {
  // An early error return: what is left is cancelled without settling (no group to name), and
  // the set's memory kept when anything was.
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL) continue;
    abandoned_ = true;
    if (peers_[i] != kWholeGroup) {
      MPI_Cancel(&requests_[i]);
      MPI_Request_free(&requests_[i]);
    }
  }
  if (abandoned_) {
    for (std::shared_ptr<void>& memory : kept_) keepUntilExit(std::move(memory));
  }
}

void RequestSet::reserve(std::size_t n) {
  requests_.reserve(n);
  peers_.reserve(n);
  lends_.reserve(n);
}

MPI_Request& RequestSet::add(int peer, Lends lends) {
  peers_.push_back(peer);
  lends_.push_back(lends);
  return requests_.emplace_back(MPI_REQUEST_NULL);
}

Status RequestSet::waitAll(const MpiGroup& group, std::string_view what, const StandInOffer* offer) {
  bool pending = false;
  Status status = detail::waitAll(group, requests_, peers_, lends_, what, &pending, offer);
  abandoned_ = abandoned_ || pending;
  requests_.clear();
  peers_.clear();
  lends_.clear();
  return status;
}

}  // namespace chimera::detail
