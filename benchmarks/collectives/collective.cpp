// SPDX-License-Identifier: Apache-2.0
// Implements the collectives' nccl-tests conventions: buffer counts per size, bus bandwidth.
#include "collective.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace chimera::bench {

std::string_view collectiveName(Collective collective) {
  return collective == Collective::Send ? "sendrecv" : opKindName(collective);
}

std::string_view baselineName(Collective collective) {
  switch (collective) {
    case Collective::AllReduce: return "MPI_Allreduce";
    case Collective::ReduceScatter: return "MPI_Reduce_scatter_block";
    case Collective::AllGather: return "MPI_Allgather";
    case Collective::AllToAll: return "MPI_Alltoall";
    case Collective::Broadcast: return "MPI_Bcast";
    case Collective::Send: return "MPI_Sendrecv";
    default: return "none";  // not in kAllCollectives
  }
}

Status parseCollective(std::string_view text, Collective& out) {
  std::string names;
  for (Collective collective : kAllCollectives) {
    if (text == collectiveName(collective)) {
      out = collective;
      return Status::ok();
    }
    names += fmt::format("{}{}", names.empty() ? "" : " ", collectiveName(collective));
  }
  return Status::invalidArgument(fmt::format("unknown collective '{}' (expected one of {})", text, names));
}

bool collectiveReduces(Collective collective) { return opKindInfo(collective).reduces; }

double busBandwidthFactor(Collective collective, int groupSize) {
  const double n = static_cast<double>(groupSize);
  switch (collective) {
    case Collective::AllReduce: return 2.0 * (n - 1.0) / n;
    case Collective::ReduceScatter:
    case Collective::AllGather:
    case Collective::AllToAll: return (n - 1.0) / n;
    default: break;  // Broadcast, Send
  }
  return 1.0;
}

BufferShape bufferShape(Collective collective, std::size_t bytes, std::size_t elementSize, int groupSize) {
  const std::size_t count = bytes / elementSize;
  const auto n = static_cast<std::size_t>(groupSize);
  const std::size_t block = count / n;
  BufferShape shape;
  switch (collective) {
    case Collective::ReduceScatter: shape = {block * n, block, block, 0}; break;
    case Collective::AllGather: shape = {block, block * n, block, 0}; break;
    case Collective::AllToAll: shape = {block * n, block * n, block, 0}; break;
    default: shape = {count, count, count, 0}; break;  // AllReduce, Broadcast, Send
  }
  shape.bytes = std::max(shape.sendCount, shape.recvCount) * elementSize;
  return shape;
}

}  // namespace chimera::bench
