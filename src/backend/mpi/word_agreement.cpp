// SPDX-License-Identifier: Apache-2.0
// Implements bounded agreement on a few words across a group (argument checks, group creation).
#include "backend/mpi/word_agreement.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "backend/mpi/bounded_wait.hpp"
#include "backend/mpi/mpi_util.hpp"
#include "core/check.hpp"

namespace chimera::detail {
namespace {

Status agreeDirectly(const MpiGroup& group, std::span<const long long> words, int tag, std::string_view what,
                     WordRange& out) {
  const std::size_t n = words.size();
  const int members = group.size;
  thread_local std::vector<long long> incoming;
  incoming.assign(n * static_cast<std::size_t>(members), 0);
  RequestSet requests;
  requests.reserve(2 * static_cast<std::size_t>(members));
  for (int peer = 0; peer < members; ++peer) {
    if (peer == group.index) continue;
    CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Irecv(incoming.data() + static_cast<std::size_t>(peer) * n,
                                                static_cast<int>(n), MPI_LONG_LONG, peer, tag, group.comm,
                                                &requests.add(peer)),
                                      "MPI_Irecv (agreement)"));
  }
  for (int peer = 0; peer < members; ++peer) {
    if (peer == group.index) continue;
    CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Isend(words.data(), static_cast<int>(n), MPI_LONG_LONG, peer, tag,
                                                group.comm, &requests.add(peer)),
                                      "MPI_Isend (agreement)"));
  }
  CHIMERA_RETURN_IF_ERROR(requests.waitAll(group, what));
  std::copy(words.begin(), words.end(), incoming.begin() + static_cast<std::ptrdiff_t>(group.index * n));
  out.low.assign(words.begin(), words.end());
  out.high.assign(words.begin(), words.end());
  for (int peer = 0; peer < members; ++peer) {
    for (std::size_t i = 0; i < n; ++i) {
      const long long v = incoming[static_cast<std::size_t>(peer) * n + i];
      out.low[i] = std::min(out.low[i], v);
      out.high[i] = std::max(out.high[i], v);
    }
  }
  return Status::ok();
}

Status agreeByReduction(const MpiGroup& group, std::span<const long long> words, std::string_view what,
                        WordRange& out) {
  // Interleaved [v, -v] pairs: one MIN reduction yields min(v) and -max(v).
  const std::size_t n = words.size();
  std::vector<long long> values(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    values[2 * i] = words[i];
    values[2 * i + 1] = -words[i];
  }
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()),
                                                   MPI_LONG_LONG, MPI_MIN, group.comm, &request),
                                    "MPI_Iallreduce (agreement)"));
  CHIMERA_RETURN_IF_ERROR(waitOne(group, request, kWholeGroup, what));
  out.low.resize(n);
  out.high.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    out.low[i] = values[2 * i];
    out.high[i] = -values[2 * i + 1];
  }
  return Status::ok();
}

}  // namespace

Status agreeOnWords(const MpiGroup& group, std::span<const long long> words, int tag, std::string_view what,
                    WordRange& out) {
  if (group.size <= 1) {
    out.low.assign(words.begin(), words.end());
    out.high = out.low;
    return Status::ok();
  }
  if (group.size <= kDirectAgreementLimit) return agreeDirectly(group, words, tag, what, out);
  return agreeByReduction(group, words, what, out);
}

}  // namespace chimera::detail
