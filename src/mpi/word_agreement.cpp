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

// Replaces every word (the last the stand-in marker) by its minimum over the group, offering
// `offer` to the members at fault (null: none); each member's marker that is not neutral goes to
// `stoodIn` (with the library reduction: the lowest).
Status minDirectly(const MpiGroup& group, std::span<std::int64_t> words, int tag, std::string_view what,
                   const StandInOffer* offer, std::vector<int>& stoodIn) {
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
  CHIMERA_RETURN_IF_ERROR(requests.waitAll(group, what, offer));
  for (int peer = 0; peer < members; ++peer) {
    if (peer == group.index) continue;
    for (std::size_t i = 0; i < n; ++i) {
      words[i] = std::min(words[i], incoming[static_cast<std::size_t>(peer) * n + i]);
    }
    const std::int64_t marker = incoming[static_cast<std::size_t>(peer) * n + n - 1];
    if (marker != kStandInNeutral) stoodIn.push_back(static_cast<int>(marker));
  }
  return Status::ok();
}

Status minByReduction(const MpiGroup& group, std::span<std::int64_t> words, std::string_view what,
                      const StandInOffer* offer, std::vector<int>& stoodIn) {
  auto reduced = std::make_shared<std::vector<std::int64_t>>(words.begin(), words.end());
  RequestSet reduction;
  reduction.keep(reduced);
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Iallreduce(MPI_IN_PLACE, reduced->data(), static_cast<int>(reduced->size()),
                                                   MPI_LONG_LONG, MPI_MIN, group.comm, &reduction.add(kWholeGroup)),
                                    "MPI_Iallreduce (agreement)"));
  CHIMERA_RETURN_IF_ERROR(reduction.waitAll(group, what, offer));
  std::copy(reduced->begin(), reduced->end(), words.begin());
  if (words.back() != kStandInNeutral) stoodIn.push_back(static_cast<int>(words.back()));
  return Status::ok();
}

Status minRound(const MpiGroup& group, std::span<std::int64_t> words, int tag, std::string_view what,
                const StandInOffer* offer, std::vector<int>& stoodIn) {
  if (group.size <= kDirectAgreementLimit) return minDirectly(group, words, tag, what, offer, stoodIn);
  return minByReduction(group, words, what, offer, stoodIn);
}

}  // namespace

Status minOverGroup(const MpiGroup& group, std::span<std::int64_t> words, int tag, std::string_view what) {
  if (group.size <= 1 || words.empty()) return Status::ok();
  std::vector<std::int64_t> sent(words.begin(), words.end());
  sent.push_back(kStandInNeutral);
  const StandInOffer offer{tag, static_cast<int>(sent.size())};
  std::vector<int> stoodIn;
  CHIMERA_RETURN_IF_ERROR(minRound(group, sent, tag, what, &offer, stoodIn));
  if (!stoodIn.empty()) {
    const int culprit = *std::min_element(stoodIn.begin(), stoodIn.end());
    const std::string fault = group.notices != nullptr ? group.notices->faultOf(culprit) : std::string();
    if (group.notices != nullptr) {
      for (const int world : stoodIn) group.notices->settle(world);
    }
    return detail::stoodIn(fmt::format("{} on {}", what, group.label), culprit, fault);
  }
  std::copy_n(sent.begin(), words.size(), words.begin());
  return Status::ok();
}

Status standIn(const MpiGroup& group, const StandInOffer& offer, int worldRank) {
  std::vector<std::int64_t> sent = standInWords(offer.words, worldRank);
  std::vector<int> stoodIn;
  return minRound(group, sent, offer.tag, fmt::format("standing in for a call world rank {} failed", worldRank),
                  nullptr, stoodIn);
}

GroupMin groupMin(const MpiGroup& group, int tag, std::string what) {
  return [&group, tag, what = std::move(what)](std::span<std::int64_t> words) {
    return minOverGroup(group, words, tag, what);
  };
}

}  // namespace chimera::detail
