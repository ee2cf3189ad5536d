// SPDX-License-Identifier: Apache-2.0
// Implements the MPI backend's bounded waits: every posted request completes or times out.
#include "backend/mpi/bounded_wait.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "backend/mpi/mpi_util.hpp"

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
  void idle() {
    if (++polls_ % kPollsPerYield == 0) std::this_thread::yield();
  }

 private:
  int polls_ = 0;
};

// How long a roll call listens: long enough for the members that gave up on the same
// collective a little later, short enough to end the job within the timeout plus a few seconds.
constexpr std::chrono::milliseconds kRollCallWindow{2000};

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
    const int peer = i < peers.size() ? peers[i] : kWholeGroup;
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

// Cancels and frees what is still pending of the point-to-point requests; collective
// requests cannot be cancelled and are abandoned (the backend refuses further calls).
void abandon(std::span<MPI_Request> requests, std::span<const int> peers) {
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    const int peer = i < peers.size() ? peers[i] : kWholeGroup;
    if (peer != kWholeGroup) {
      MPI_Cancel(&requests[i]);
      MPI_Request_free(&requests[i]);
    }
    requests[i] = MPI_REQUEST_NULL;
  }
}

Status timedOut(const MpiGroup& group, std::string_view what, const std::string& missing) {
  return Status::timeout(fmt::format("{} on {} made no progress for {} ms (CHIMERA_TIMEOUT_MS): still waiting for {}",
                                     what, group.label, group.timeoutMs, missing));
}

}  // namespace

Status waitAll(const MpiGroup& group, std::span<MPI_Request> requests, std::span<const int> peers,
               std::string_view what) {
  if (requests.empty()) return Status::ok();
  thread_local std::vector<int> done;
  done.resize(requests.size());
  Clock::time_point deadline = Clock::now() + budget(group);
  IdlePolls polls;
  for (;;) {
    int completed = 0;
    const int rc =
        MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &completed, done.data(), MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      abandon(requests, peers);
      return mpiStatus(rc, what);
    }
    if (completed == MPI_UNDEFINED) return Status::ok();  // nothing left active
    const Clock::time_point now = Clock::now();
    if (completed > 0) {
      deadline = now + budget(group);
      continue;
    }
    if (now >= deadline) {
      const std::string missing = missingPeers(group, requests, peers);
      abandon(requests, peers);
      return timedOut(group, what, missing);
    }
    polls.idle();
  }
}

Status waitOne(const MpiGroup& group, MPI_Request& request, int peer, std::string_view what) {
  return waitAll(group, {&request, 1}, {&peer, 1}, what);
}

Status probeWithin(const MpiGroup& group, int peer, int tag, MPI_Status& status, std::string_view what) {
  const Clock::time_point deadline = Clock::now() + budget(group);
  IdlePolls polls;
  for (;;) {
    int found = 0;
    const int rc = MPI_Iprobe(peer, tag, group.comm, &found, &status);
    if (rc != MPI_SUCCESS) return mpiStatus(rc, what);
    if (found != 0) return Status::ok();
    if (Clock::now() >= deadline) return timedOut(group, what, fmt::format("world rank {}", worldRankOf(group, peer)));
    polls.idle();
  }
}

RequestSet::~RequestSet() { abandon(requests_, peers_); }

void RequestSet::reserve(std::size_t n) {
  requests_.reserve(n);
  peers_.reserve(n);
}

MPI_Request& RequestSet::add(int peer) {
  peers_.push_back(peer);
  return requests_.emplace_back(MPI_REQUEST_NULL);
}

Status RequestSet::waitAll(const MpiGroup& group, std::string_view what) {
  Status status = detail::waitAll(group, requests_, peers_, what);
  requests_.clear();
  peers_.clear();
  return status;
}

}  // namespace chimera::detail
