// SPDX-License-Identifier: Apache-2.0
// The Backend interface's default implementations of the uneven all-to-all and the count
// exchange, in terms of its other calls: any backend runs them; MPI and NCCL override both. And
// the names of the host backends' default cost models.
#include "chimera/backend.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.hpp"

namespace chimera {

std::string hostTopology(int ranks) { return fmt::format("host:{}", ranks); }

std::string hostsTopologyName(std::span<const int> hostOfRank) {
  const bool oneHost = std::all_of(hostOfRank.begin(), hostOfRank.end(), [](int host) { return host == 0; });
  if (oneHost) return hostTopology(static_cast<int>(hostOfRank.size()));
  return fmt::format("hosts:{}", fmt::join(hostOfRank, ","));
}

Status Backend::allToAllV(const void* send, std::span<const std::size_t> sendCounts,
                          std::span<const std::size_t> sendOffsets, void* recv, std::span<const std::size_t> recvCounts,
                          std::span<const std::size_t> recvOffsets, DataType dtype, AxisSet axes, Stream stream) {
  const std::vector<int> members = mesh().groupRanks(rank(), axes);
  CHIMERA_CHECK_ARG(sendCounts.size() == members.size() && sendOffsets.size() == members.size() &&
                        recvCounts.size() == members.size() && recvOffsets.size() == members.size(),
                    "allToAllV over {}: counts and offsets need one entry per member ({})", mesh().axesName(axes),
                    members.size());
  const std::size_t es = dataTypeSize(dtype);
  std::vector<P2POp> ops;
  ops.reserve(2 * members.size());
  for (std::size_t j = 0; j < members.size(); ++j) {
    auto* out = static_cast<std::byte*>(recv) + recvOffsets[j] * es;
    const auto* in = static_cast<const std::byte*>(send) + sendOffsets[j] * es;
    if (members[j] == rank()) {
      CHIMERA_CHECK_ARG(sendCounts[j] == recvCounts[j], "allToAllV: {} elements to itself but {} expected",
                        sendCounts[j], recvCounts[j]);
      if (sendCounts[j] > 0) CHIMERA_RETURN_IF_ERROR(copy(out, in, sendCounts[j] * es, stream));
      continue;
    }
    if (sendCounts[j] > 0)
      ops.push_back({P2POp::Kind::Send, const_cast<std::byte*>(in), sendCounts[j], dtype, members[j]});
    if (recvCounts[j] > 0) ops.push_back({P2POp::Kind::Recv, out, recvCounts[j], dtype, members[j]});
  }
  return groupedP2P(ops, stream);
}

Status Backend::exchangeCounts(std::span<const std::int32_t> send, std::span<std::int32_t> recv, AxisSet axes,
                               Stream stream) {
  const auto n = static_cast<std::size_t>(mesh().groupSize(axes));
  CHIMERA_CHECK_ARG(!send.empty() && send.size() % n == 0 && recv.size() == send.size(),
                    "exchangeCounts over {}: {} and {} counts for {} members (the same number for each)",
                    mesh().axesName(axes), send.size(), recv.size(), n);
  return allToAll(send.data(), recv.data(), send.size() / n, DataType::I32, axes, stream);
}

}  // namespace chimera
