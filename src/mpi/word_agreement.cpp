// SPDX-License-Identifier: Apache-2.0
// Implements the bounded MIN of a few words over a group (argument checks, group creation).
#include "mpi/word_agreement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::detail {
namespace {

static_assert(sizeof(long long) == sizeof(std::int64_t), "MPI_LONG_LONG carries the agreement's int64 words");

Status minDirectly(const MpiGroup& group, std::span<std::int64_t> words, int tag, std::string_view what) {
  const std::size_t n = words.size();
  const int members = group.size;
  // Owned by the set: a peer that arrives after a Timeout completes into memory that is still chimera's.
  auto incomingStore = std::make_shared<std::vector<std::int64_t>>(n * static_cast<std::size_t>(members), 0);
  auto mineStore = std::make_shared<std::vector<std::int64_t>>(words.begin(), words.end());
  std::vector<std::int64_t>& incoming = *incomingStore;
  std::vector<std::int64_t>& mine = *mineStore;
  RequestSet requests;
  requests.reserve(2 * static_cast<std::size_t>(members));
  requests.keep(incomingStore);
  requests.keep(mineStore);
  for (int peer = 0; peer < members; ++peer) {
    if (peer == group.index) continue;
    CHIMERA_RETURN_IF_ERROR(
        mpiStatus(MPI_Irecv(incoming.data() + static_cast<std::size_t>(peer) * n, static_cast<int>(n), MPI_LONG_LONG,
                            peer, tag, group.comm, &requests.add(peer)),
                  "MPI_Irecv (agreement)"));
  }
  for (int peer = 0; peer < members; ++peer) {
    if (peer == group.index) continue;
    CHIMERA_RETURN_IF_ERROR(mpiStatus(
        MPI_Isend(mine.data(), static_cast<int>(n), MPI_LONG_LONG, peer, tag, group.comm, &requests.add(peer)),
        "MPI_Isend (agreement)"));
  }
  CHIMERA_RETURN_IF_ERROR(requests.waitAll(group, what));
  for (int peer = 0; peer < members; ++peer) {
    if (peer == group.index) continue;
    for (std::size_t i = 0; i < n; ++i) {
      words[i] = std::min(words[i], incoming[static_cast<std::size_t>(peer) * n + i]);
    }
  }
  return Status::ok();
}

Status minByReduction(const MpiGroup& group, std::span<std::int64_t> words, std::string_view what) {
  auto reduced = std::make_shared<std::vector<std::int64_t>>(words.begin(), words.end());
  RequestSet reduction;
  reduction.keep(reduced);
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Iallreduce(MPI_IN_PLACE, reduced->data(), static_cast<int>(reduced->size()),
                                                   MPI_LONG_LONG, MPI_MIN, group.comm, &reduction.add(kWholeGroup)),
                                    "MPI_Iallreduce (agreement)"));
  CHIMERA_RETURN_IF_ERROR(reduction.waitAll(group, what));
  std::copy(reduced->begin(), reduced->end(), words.begin());
  return Status::ok();
}

}  // namespace

Status minOverGroup(const MpiGroup& group, std::span<std::int64_t> words, int tag, std::string_view what) {
  if (group.size <= 1 || words.empty()) return Status::ok();
  if (group.size <= kDirectAgreementLimit) return minDirectly(group, words, tag, what);
  return minByReduction(group, words, what);
}

GroupMin groupMin(const MpiGroup& group, int tag, std::string what) {
  return [&group, tag, what = std::move(what)](std::span<std::int64_t> words) {
    return minOverGroup(group, words, tag, what);
  };
}

}  // namespace chimera::detail
