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

// "world rank 2", "world ranks 1, 3", or the whole group when a collective is pending.
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
    text += fmt::format("a member of the group's library collective (world ranks {}; MPI does not say which)",
                        joined(group.members));
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
    std::this_thread::yield();
  }
}

Status waitOne(const MpiGroup& group, MPI_Request& request, int peer, std::string_view what) {
  return waitAll(group, {&request, 1}, {&peer, 1}, what);
}

Status probeWithin(const MpiGroup& group, int peer, int tag, MPI_Status& status, std::string_view what) {
  const Clock::time_point deadline = Clock::now() + budget(group);
  for (;;) {
    int found = 0;
    const int rc = MPI_Iprobe(peer, tag, group.comm, &found, &status);
    if (rc != MPI_SUCCESS) return mpiStatus(rc, what);
    if (found != 0) return Status::ok();
    if (Clock::now() >= deadline) return timedOut(group, what, fmt::format("world rank {}", worldRankOf(group, peer)));
    std::this_thread::yield();
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
