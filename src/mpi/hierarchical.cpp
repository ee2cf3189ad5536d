// SPDX-License-Identifier: Apache-2.0
// Implements the hierarchical collectives over a group's host and lane communicators.
#include "mpi/hierarchical.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/host_reduce.hpp"
#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_util.hpp"
#include "mpi/range_exchange.hpp"
#include "mpi/ring.hpp"

namespace chimera::detail {
namespace {

std::byte* at(void* base, std::size_t elements, std::size_t elementSize) {
  return static_cast<std::byte*>(base) + elements * elementSize;
}
const std::byte* at(const void* base, std::size_t elements, std::size_t elementSize) {
  return static_cast<const std::byte*>(base) + elements * elementSize;
}

// The members lane `lane` serves on `host`: local indices lane, lane + lanes, ...
std::vector<int> served(const HostLayout& layout, int host, int lane) {
  std::vector<int> out;
  const auto& members = layout.members[static_cast<std::size_t>(host)];
  for (std::size_t l = static_cast<std::size_t>(lane); l < members.size(); l += static_cast<std::size_t>(layout.lanes))
    out.push_back(members[l]);
  return out;
}

// The members lane `lane` serves on every host, ascending.
std::vector<int> servedEverywhere(const HostLayout& layout, int lane) {
  std::vector<int> out;
  for (int h = 0; h < layout.hosts(); ++h) {
    const auto some = served(layout, h, lane);
    out.insert(out.end(), some.begin(), some.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The blocks (`blockCount` elements each, block i at i * blockCount) of `members`, except
// the block of member `except` (-1: none).
RangeList blocksOf(const std::vector<int>& members, std::size_t blockCount, int except = -1) {
  RangeList out;
  for (const int m : members) {
    if (m != except) appendRange(out, {static_cast<std::size_t>(m) * blockCount, blockCount});
  }
  return out;
}

// The transfers of an AllGather in which member d owns `parts[d]`, for member `me`.
RangeTransfers allGatherTransfers(const std::vector<RangeList>& parts, int me) {
  RangeTransfers out;
  out.sends.resize(parts.size());
  out.receives.resize(parts.size());
  for (std::size_t d = 0; d < parts.size(); ++d) {
    if (static_cast<int>(d) == me) continue;
    out.sends[d] = parts[static_cast<std::size_t>(me)];
    out.receives[d] = parts[d];
  }
  return out;
}

RangeTransfers noTransfers(int members) {
  RangeTransfers out;
  out.sends.resize(static_cast<std::size_t>(members));
  out.receives.resize(static_cast<std::size_t>(members));
  return out;
}

constexpr int kCrossReduceTag = 0x4352;  // 'CR'
constexpr int kCrossGatherTag = 0x4347;  // 'CG'

// Posts the messages of `range` of `base` to or from lane member `peer`, each of at most
// kMaxMpiCount elements.
template <typename Buffer>
Status postRange(Buffer* base, ElementRange range, std::size_t es, MPI_Datatype type, int peer, int tag,
                 const MpiGroup& lane, RequestSet& set, Lends lends) {
  for (std::size_t begin = 0; begin < range.count; begin += kMaxMpiCount) {
    const auto n = static_cast<int>(std::min(kMaxMpiCount, range.count - begin));
    if constexpr (std::is_const_v<Buffer>) {
      CHIMERA_RETURN_IF_ERROR(
          mpiStatus(MPI_Isend(at(base, range.offset + begin, es), n, type, peer, tag, lane.comm, &set.add(peer)),
                    "MPI_Isend (hierarchical AllReduce across hosts)"));
    } else {
      CHIMERA_RETURN_IF_ERROR(
          mpiStatus(MPI_Irecv(at(base, range.offset + begin, es), n, type, peer, tag, lane.comm, &set.add(peer, lends)),
                    "MPI_Irecv (hierarchical AllReduce across hosts)"));
    }
  }
  return Status::ok();
}

// One piece of a lane's chunk crossing the hosts: a direct ReduceScatter over the lane (every
// member sends the other blocks to their owners and receives the copies of its own), then a
// direct AllGather of the reduced blocks. Posted, then completed a step of the pipeline later,
// so the transfers run while the host works on other pieces.
class Crossing {
 public:
  std::byte* copies = nullptr;  // the copies of this member's block, from lane members me-1, me-2, ...

  Status postReduction(const void* buffer, std::vector<ElementRange> blocks, DataType dtype, const MpiGroup& lane) {
    blocks_ = std::move(blocks);
    const std::size_t es = dataTypeSize(dtype);
    const MPI_Datatype type = mpiDataType(dtype);
    const ElementRange mine = blocks_[static_cast<std::size_t>(lane.index)];
    for (int i = 1; i < lane.size; ++i) {
      const int from = (lane.index - i + lane.size) % lane.size;
      const ElementRange copy{static_cast<std::size_t>(i - 1) * mine.count, mine.count};
      CHIMERA_RETURN_IF_ERROR(
          postRange(copies, copy, es, type, from, kCrossReduceTag, lane, reduction_, Lends::Chimera));
    }
    for (int i = 1; i < lane.size; ++i) {
      const int to = (lane.index + i) % lane.size;
      CHIMERA_RETURN_IF_ERROR(postRange(static_cast<const std::byte*>(buffer), blocks_[static_cast<std::size_t>(to)],
                                        es, type, to, kCrossReduceTag, lane, reduction_, Lends::Chimera));
    }
    return Status::ok();
  }

  // Reduces the copies into this member's block in the order of the flat direct ReduceScatter
  // (own with me-1's, then me-2's, ...), finishes Avg, and posts the block's AllGather.
  Status reduceAndPostGather(void* buffer, DataType dtype, ReduceOp op, int groupSize, const MpiGroup& lane) {
    CHIMERA_RETURN_IF_ERROR(reduction_.waitAll(lane, "hierarchical AllReduce across hosts (reduction)"));
    const std::size_t es = dataTypeSize(dtype);
    const MPI_Datatype type = mpiDataType(dtype);
    const ElementRange mine = blocks_[static_cast<std::size_t>(lane.index)];
    std::byte* block = at(buffer, mine.offset, es);
    for (int i = 1; i < lane.size && mine.count > 0; ++i) {
      const std::byte* copy = copies + static_cast<std::size_t>(i - 1) * mine.count * es;
      if (i == 1) {
        reduceTo(block, copy, block, mine.count, dtype, op);
      } else {
        reduceInto(block, copy, mine.count, dtype, op);
      }
    }
    if (op == ReduceOp::Avg) divideByCount(block, mine.count, dtype, groupSize);
    for (int i = 1; i < lane.size; ++i) {
      const int from = (lane.index - i + lane.size) % lane.size;
      CHIMERA_RETURN_IF_ERROR(postRange(static_cast<std::byte*>(buffer), blocks_[static_cast<std::size_t>(from)], es,
                                        type, from, kCrossGatherTag, lane, gather_, Lends::Caller));
    }
    for (int i = 1; i < lane.size; ++i) {
      const int to = (lane.index + i) % lane.size;
      CHIMERA_RETURN_IF_ERROR(postRange(static_cast<const std::byte*>(buffer), mine, es, type, to, kCrossGatherTag,
                                        lane, gather_, Lends::Chimera));
    }
    return Status::ok();
  }

  Status gathered(const MpiGroup& lane) {
    return gather_.waitAll(lane, "hierarchical AllReduce across hosts (gather)");
  }

 private:
  std::vector<ElementRange> blocks_;  // block h: reduced by the lane member on host h
  RequestSet reduction_;
  RequestSet gather_;
};

}  // namespace

int hierarchicalPieces(std::size_t bytes, std::size_t segmentBytes) {
  const std::size_t least = std::max<std::size_t>(1, 2 * segmentBytes);
  return static_cast<int>(std::clamp<std::size_t>(bytes / least, 1, kMostHierarchicalPieces));
}

Status hierarchicalAllReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                             const MpiGroup& group, const HostHierarchy& hierarchy, ScratchBuffer& scratch,
                             ScratchBuffer& staging, std::size_t segmentBytes) {
  const HostLayout& layout = hierarchy.layout;
  const MpiGroup& host = hierarchy.host;
  const std::size_t es = dataTypeSize(dtype);
  const BlockSplit pieces{count, hierarchicalPieces(count * es, segmentBytes)};
  const bool crosses = layout.inLane(group.index);
  // Chunk j of piece p: the lane-j member's part of it, reduced inside the host.
  const auto hostPartsOf = [&](int p) {
    const BlockSplit chunks{pieces.size(p), layout.lanes};
    std::vector<RangeList> parts(static_cast<std::size_t>(host.size));
    for (int j = 0; j < layout.lanes; ++j)
      appendRange(parts[static_cast<std::size_t>(j)], {pieces.offset(p) + chunks.offset(j), chunks.size(j)});
    return parts;
  };
  // Block h of this lane's chunk of piece p: the part the lane member on host h reduces.
  const auto blocksOf = [&](int p) {
    const BlockSplit chunks{pieces.size(p), layout.lanes};
    const BlockSplit blocks{chunks.size(host.index), hierarchy.lane.size};
    std::vector<ElementRange> out;
    for (int h = 0; h < hierarchy.lane.size; ++h)
      out.push_back({pieces.offset(p) + chunks.offset(host.index) + blocks.offset(h), blocks.size(h)});
    return out;
  };
  std::array<Crossing, 3> crossings;  // piece p uses crossing p % 3: three pieces cross at once
  if (crosses) {
    const std::size_t most = BlockSplit{pieces.size(0), layout.lanes}.size(0);  // the largest chunk
    const std::size_t block = BlockSplit{most, hierarchy.lane.size}.size(0);
    const std::size_t copies = static_cast<std::size_t>(hierarchy.lane.size - 1) * block;
    auto* base = static_cast<std::byte*>(staging.get(crossings.size() * copies * es));
    if (base == nullptr && copies > 0)
      return Status::backendError("cannot allocate the staging of a hierarchical AllReduce");
    for (std::size_t c = 0; c < crossings.size(); ++c) crossings[c].copies = base + c * copies * es;
  }
  // Piece s enters (reduced inside the host, posted across), piece s - 1 is reduced across and
  // its result posted back, piece s - 2 arrives and is spread inside the host: while one piece
  // crosses the slow link, the ranks work on the pieces before and after it.
  for (int s = 0; s < pieces.parts + 2; ++s) {
    if (s < pieces.parts) {
      CHIMERA_RETURN_IF_ERROR(reduceRanges(send, recv, hostPartsOf(s), dtype, op, host, scratch, segmentBytes));
      if (crosses) CHIMERA_RETURN_IF_ERROR(crossings[s % 3].postReduction(recv, blocksOf(s), dtype, hierarchy.lane));
    }
    if (crosses && s >= 1 && s - 1 < pieces.parts) {
      CHIMERA_RETURN_IF_ERROR(crossings[(s - 1) % 3].reduceAndPostGather(recv, dtype, op, group.size, hierarchy.lane));
    }
    if (s >= 2) {
      if (crosses) CHIMERA_RETURN_IF_ERROR(crossings[(s - 2) % 3].gathered(hierarchy.lane));
      CHIMERA_RETURN_IF_ERROR(
          exchangeRanges(recv, recv, allGatherTransfers(hostPartsOf(s - 2), host.index), dtype, host));
    }
  }
  return Status::ok();
}

Status hierarchicalReduceScatter(const void* send, void* recv, std::size_t recvCount, DataType dtype, ReduceOp op,
                                 const MpiGroup& group, const HostHierarchy& hierarchy, ScratchBuffer& scratch,
                                 ScratchBuffer& staging, std::size_t segmentBytes) {
  const HostLayout& layout = hierarchy.layout;
  const MpiGroup& host = hierarchy.host;
  const int me = group.index;
  const int myHost = layout.hostOf[static_cast<std::size_t>(me)];
  const std::size_t es = dataTypeSize(dtype);
  // Partial sums live at their places in a buffer the size of the input.
  void* staged = staging.get(recvCount * static_cast<std::size_t>(group.size) * es);
  if (staged == nullptr) return Status::backendError("cannot allocate the staging of a hierarchical ReduceScatter");
  // (1) The host's sum of lane j's blocks onto its lane-j member.
  std::vector<RangeList> hostParts(static_cast<std::size_t>(host.size));
  for (int j = 0; j < layout.lanes; ++j)
    hostParts[static_cast<std::size_t>(j)] = blocksOf(servedEverywhere(layout, j), recvCount);
  CHIMERA_RETURN_IF_ERROR(reduceRanges(send, staged, hostParts, dtype, op, host, scratch, segmentBytes));
  // (2) Across the hosts: the blocks of host h's members to the lane member of host h.
  RangeTransfers forward = noTransfers(host.size);
  if (layout.inLane(me)) {
    const MpiGroup& lane = hierarchy.lane;
    std::vector<RangeList> laneParts(static_cast<std::size_t>(lane.size));
    for (int h = 0; h < lane.size; ++h)
      laneParts[static_cast<std::size_t>(h)] = blocksOf(served(layout, h, host.index), recvCount);
    CHIMERA_RETURN_IF_ERROR(reduceRanges(staged, staged, laneParts, dtype, op, lane, scratch, segmentBytes));
    // (3) Keep this member's block, send the others it holds to their members.
    for (const int m : served(layout, myHost, host.index)) {
      const ElementRange block{static_cast<std::size_t>(m) * recvCount, recvCount};
      if (m == me) {
        std::memcpy(recv, at(staged, block.offset, es), recvCount * es);
      } else {
        appendRange(forward.sends[static_cast<std::size_t>(layout.localIndex[static_cast<std::size_t>(m)])], block);
      }
    }
  } else {
    appendRange(forward.receives[static_cast<std::size_t>(layout.laneOf(me))], {0, recvCount});
  }
  CHIMERA_RETURN_IF_ERROR(exchangeRanges(staged, recv, forward, dtype, host));
  if (op == ReduceOp::Avg) divideByCount(recv, recvCount, dtype, group.size);
  return Status::ok();
}

Status hierarchicalAllGather(const void* send, void* recv, std::size_t sendCount, DataType dtype, const MpiGroup& group,
                             const HostHierarchy& hierarchy) {
  const HostLayout& layout = hierarchy.layout;
  const MpiGroup& host = hierarchy.host;
  const int me = group.index;
  const int myHost = layout.hostOf[static_cast<std::size_t>(me)];
  const std::size_t es = dataTypeSize(dtype);
  std::byte* mine = at(recv, static_cast<std::size_t>(me) * sendCount, es);
  if (send != mine) std::memcpy(mine, send, sendCount * es);
  // (1) Members beyond the lanes hand their block to the lane member that serves them.
  if (static_cast<int>(layout.members[static_cast<std::size_t>(myHost)].size()) > layout.lanes) {
    RangeTransfers gather = noTransfers(host.size);
    if (!layout.inLane(me)) {
      appendRange(gather.sends[static_cast<std::size_t>(layout.laneOf(me))],
                  {static_cast<std::size_t>(me) * sendCount, sendCount});
    } else {
      for (const int m : served(layout, myHost, host.index)) {
        if (m != me)
          appendRange(gather.receives[static_cast<std::size_t>(layout.localIndex[static_cast<std::size_t>(m)])],
                      {static_cast<std::size_t>(m) * sendCount, sendCount});
      }
    }
    CHIMERA_RETURN_IF_ERROR(exchangeRanges(recv, recv, gather, dtype, host));
  }
  // (2) Each lane gathers its blocks across the hosts.
  if (layout.inLane(me)) {
    const MpiGroup& lane = hierarchy.lane;
    std::vector<RangeList> laneParts(static_cast<std::size_t>(lane.size));
    for (int h = 0; h < lane.size; ++h)
      laneParts[static_cast<std::size_t>(h)] = blocksOf(served(layout, h, host.index), sendCount);
    CHIMERA_RETURN_IF_ERROR(exchangeRanges(recv, recv, allGatherTransfers(laneParts, lane.index), dtype, lane));
  }
  // (3) Each lane member hands its lane's blocks to the rest of the host, less the receiver's own.
  RangeTransfers spread = noTransfers(host.size);
  const auto& local = layout.members[static_cast<std::size_t>(myHost)];
  for (int d = 0; d < host.size; ++d) {
    if (d == host.index) continue;
    if (host.index < layout.lanes)
      spread.sends[static_cast<std::size_t>(d)] =
          blocksOf(servedEverywhere(layout, host.index), sendCount, local[static_cast<std::size_t>(d)]);
    if (d < layout.lanes)
      spread.receives[static_cast<std::size_t>(d)] = blocksOf(servedEverywhere(layout, d), sendCount, me);
  }
  return exchangeRanges(recv, recv, spread, dtype, host);
}

}  // namespace chimera::detail
