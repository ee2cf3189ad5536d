// SPDX-License-Identifier: Apache-2.0
// The collectives chimera-bench measures and the nccl-tests conventions attached to each:
// how a requested size becomes buffer counts, and the bus-bandwidth factor.
#pragma once

#include <cstddef>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera::bench {

/// A collective chimera-bench can run (`-C`).
enum class Collective { AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast, SendRecv };

/// Every Collective, in declaration order.
inline constexpr Collective kAllCollectives[] = {Collective::AllReduce, Collective::ReduceScatter,
                                                 Collective::AllGather, Collective::AllToAll,
                                                 Collective::Broadcast, Collective::SendRecv};

/// The `-C` spelling: "allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "sendrecv".
std::string_view collectiveName(Collective collective);
/// Parses a `-C` name; InvalidArgument naming the text and the accepted names otherwise.
[[nodiscard]] Status parseCollective(std::string_view text, Collective& out);
/// Whether the collective reduces (takes a ReduceOp): AllReduce and ReduceScatter.
bool collectiveReduces(Collective collective);
/// The plain MPI call used as the baseline ("MPI_Allreduce", ..., "MPI_Sendrecv").
std::string_view baselineName(Collective collective);

/// nccl-tests bus-bandwidth factor for a group of `groupSize` ranks: AllReduce 2(n-1)/n;
/// ReduceScatter, AllGather, AllToAll (n-1)/n; Broadcast and SendRecv 1.
double busBandwidthFactor(Collective collective, int groupSize);

/// Buffer geometry of one row, in elements (nccl-tests `GetCollByteCount`).
struct BufferShape {
  /// Elements in this rank's send buffer.
  std::size_t sendCount = 0;
  /// Elements in this rank's receive buffer.
  std::size_t recvCount = 0;
  /// The count argument of the call (printed in the `count` column): AllReduce, Broadcast,
  /// SendRecv the whole buffer; ReduceScatter the received block; AllGather the sent
  /// block; AllToAll the block per peer.
  std::size_t paramCount = 0;
  /// Bytes in the `size` column: the larger of the two buffers, as nccl-tests prints it.
  std::size_t bytes = 0;
};

/// Geometry for a requested size of `bytes` per rank: count = bytes / elementSize, and for
/// ReduceScatter, AllGather and AllToAll the per-rank block is count / groupSize, rounded
/// down (so the printed size may be smaller than requested). Preconditions: elementSize > 0,
/// groupSize > 0.
BufferShape bufferShape(Collective collective, std::size_t bytes, std::size_t elementSize, int groupSize);

}  // namespace chimera::bench
