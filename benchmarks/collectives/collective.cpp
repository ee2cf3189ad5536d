// SPDX-License-Identifier: Apache-2.0
// Implements the collectives' nccl-tests conventions: buffer counts per size, bus bandwidth.
#include "collective.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace chimera::bench {
namespace {

struct CollectiveInfo {
  std::string_view name;
  std::string_view baseline;
};

constexpr std::array<CollectiveInfo, 6> kInfo{{
    {"allreduce", "MPI_Allreduce"},
    {"reducescatter", "MPI_Reduce_scatter_block"},
    {"allgather", "MPI_Allgather"},
    {"alltoall", "MPI_Alltoall"},
    {"broadcast", "MPI_Bcast"},
    {"sendrecv", "MPI_Sendrecv"},
}};

const CollectiveInfo& info(Collective collective) { return kInfo[static_cast<std::size_t>(collective)]; }

}  // namespace

std::string_view collectiveName(Collective collective) { return info(collective).name; }

std::string_view baselineName(Collective collective) { return info(collective).baseline; }

Status parseCollective(std::string_view text, Collective& out) {
  for (Collective collective : kAllCollectives) {
    if (text == collectiveName(collective)) {
      out = collective;
      return Status::ok();
    }
  }
  return Status::invalidArgument(fmt::format(
      "unknown collective '{}' (expected one of allreduce reducescatter allgather alltoall broadcast sendrecv)",
      text));
}

bool collectiveReduces(Collective collective) {
  return collective == Collective::AllReduce || collective == Collective::ReduceScatter;
}

double busBandwidthFactor(Collective collective, int groupSize) {
  const double n = static_cast<double>(groupSize);
  switch (collective) {
    case Collective::AllReduce: return 2.0 * (n - 1.0) / n;
    case Collective::ReduceScatter:
    case Collective::AllGather:
    case Collective::AllToAll: return (n - 1.0) / n;
    case Collective::Broadcast:
    case Collective::SendRecv: break;
  }
  return 1.0;
}

BufferShape bufferShape(Collective collective, std::size_t bytes, std::size_t elementSize, int groupSize) {
  const std::size_t count = bytes / elementSize;
  const auto n = static_cast<std::size_t>(groupSize);
  const std::size_t block = count / n;
  BufferShape shape;
  switch (collective) {
    case Collective::AllReduce:
    case Collective::Broadcast:
    case Collective::SendRecv: shape = {count, count, count, 0}; break;
    case Collective::ReduceScatter: shape = {block * n, block, block, 0}; break;
    case Collective::AllGather: shape = {block, block * n, block, 0}; break;
    case Collective::AllToAll: shape = {block * n, block * n, block, 0}; break;
  }
  shape.bytes = std::max(shape.sendCount, shape.recvCount) * elementSize;
  return shape;
}

}  // namespace chimera::bench
