// SPDX-License-Identifier: Apache-2.0
// Implements the hierarchical collectives over a group's host and lane communicators.
#include "mpi/hierarchical.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <vector>

#include "common/host_reduce.hpp"
#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/range_exchange.hpp"
#include "mpi/ring.hpp"

namespace chimera::detail {
namespace {

std::byte* at(void* base, std::size_t elements, std::size_t elementSize) {
  return static_cast<std::byte*>(base) + elements * elementSize;
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

// The ranges `within` (relative to a block's start; the whole block by default) of the blocks
// (`blockCount` elements each, block i at i * blockCount) of `members`, except the block of
// member `except` (-1: none).
RangeList blocksOf(const std::vector<int>& members, std::size_t blockCount, int except = -1,
                   std::optional<ElementRange> within = std::nullopt) {
  const ElementRange part = within.value_or(ElementRange{0, blockCount});
  RangeList out;
  for (const int m : members) {
    if (m != except) appendRange(out, {static_cast<std::size_t>(m) * blockCount + part.offset, part.count});
  }
  return out;
}

// Piece p of a BlockSplit, as a range.
ElementRange pieceOf(const BlockSplit& pieces, int p) { return {pieces.offset(p), pieces.size(p)}; }

std::size_t elementsOf(const RangeList& list) {
  std::size_t n = 0;
  for (const ElementRange& r : list) n += r.count;
  return n;
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

// One piece crossing the hosts on a lane, as direct exchanges among the lane members, posted
// and completed a pipeline step later so that the transfers run while the host works on other
// pieces. parts[h] is what lane member h owns: a ReduceScatter sends every other part to its
// owner and reduces the copies of its own; an AllGather sends its own part to every other
// member and receives theirs.
class Crossing {
 public:
  std::byte* copies = nullptr;  // room for the lane.size - 1 copies of this member's part, packed

  Status postReduction(const void* buffer, std::vector<RangeList> parts, DataType dtype, const MpiGroup& lane) {
    parts_ = std::move(parts);
    // The copies of this member's part land one after another, range by range as their senders
    // cut them (listed apart, not merged).
    const RangeList& mine = parts_[static_cast<std::size_t>(lane.index)];
    const std::size_t total = elementsOf(mine);
    RangeTransfers transfers = noTransfers(lane.size);
    for (int i = 1; i < lane.size; ++i) {
      const int from = (lane.index - i + lane.size) % lane.size;
      const int to = (lane.index + i) % lane.size;
      std::size_t packed = static_cast<std::size_t>(i - 1) * total;
      for (const ElementRange& r : mine) {
        transfers.receives[static_cast<std::size_t>(from)].push_back({packed, r.count});
        packed += r.count;
      }
      transfers.sends[static_cast<std::size_t>(to)] = parts_[static_cast<std::size_t>(to)];
    }
    return postRanges(buffer, copies, transfers, dtype, lane, kCrossReduceTag, Lends::Chimera, reduction_);
  }

  // Waits for the copies and reduces them into this member's part of `buffer` in the order of
  // the flat direct ReduceScatter: own with me-1's, then me-2's, ...
  Status reduce(void* buffer, DataType dtype, ReduceOp op, const MpiGroup& lane) {
    CHIMERA_RETURN_IF_ERROR(reduction_.waitAll(lane, "hierarchical collective across hosts (reduction)"));
    const std::size_t es = dataTypeSize(dtype);
    const RangeList& mine = parts_[static_cast<std::size_t>(lane.index)];
    const std::size_t total = elementsOf(mine);
    for (int i = 1; i < lane.size; ++i) {
      const std::byte* copy = copies + static_cast<std::size_t>(i - 1) * total * es;
      for (const ElementRange& r : mine) {
        std::byte* target = at(buffer, r.offset, es);
        if (i == 1) {
          reduceTo(target, copy, target, r.count, dtype, op);
        } else {
          reduceInto(target, copy, r.count, dtype, op);
        }
        copy += r.count * es;
      }
    }
    return Status::ok();
  }

  // Posts the AllGather of `parts` (by default those of the reduction) over the lane.
  Status postGather(void* buffer, DataType dtype, const MpiGroup& lane,
                    std::optional<std::vector<RangeList>> parts = std::nullopt) {
    if (parts) parts_ = std::move(*parts);
    return postRanges(buffer, buffer, allGatherTransfers(parts_, lane.index), dtype, lane, kCrossGatherTag,
                      Lends::Caller, gather_);
  }

  Status gathered(const MpiGroup& lane) {
    return gather_.waitAll(lane, "hierarchical collective across hosts (gather)");
  }

  // This member's part.
  const RangeList& mine(const MpiGroup& lane) const { return parts_[static_cast<std::size_t>(lane.index)]; }

 private:
  std::vector<RangeList> parts_;
  RequestSet reduction_;
  RequestSet gather_;
};

// Three pieces cross at once at most (the AllReduce's: one reducing, one gathering, one spread).
using Crossings = std::array<Crossing, 3>;

// Gives each crossing room for `copyElements` elements of copies in `room`, after `skipBytes`.
Status placeCopies(Crossings& crossings, ScratchBuffer& room, std::size_t skipBytes, std::size_t copyElements,
                   std::size_t es, std::byte*& front) {
  const std::size_t copyBytes = copyElements * es;
  auto* base = static_cast<std::byte*>(room.get(skipBytes + crossings.size() * copyBytes));
  if (base == nullptr && skipBytes + copyBytes > 0)
    return Status::backendError("cannot allocate the staging of a hierarchical collective");
  front = base;
  for (std::size_t c = 0; c < crossings.size(); ++c) crossings[c].copies = base + skipBytes + c * copyBytes;
  return Status::ok();
}

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
  const MpiGroup& lane = hierarchy.lane;
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
  const auto lanePartsOf = [&](int p) {
    const BlockSplit chunks{pieces.size(p), layout.lanes};
    const BlockSplit blocks{chunks.size(host.index), lane.size};
    std::vector<RangeList> parts(static_cast<std::size_t>(lane.size));
    for (int h = 0; h < lane.size; ++h)
      appendRange(parts[static_cast<std::size_t>(h)],
                  {pieces.offset(p) + chunks.offset(host.index) + blocks.offset(h), blocks.size(h)});
    return parts;
  };
  Crossings crossings;
  if (crosses) {
    const std::size_t block = BlockSplit{BlockSplit{pieces.size(0), layout.lanes}.size(0), lane.size}.size(0);
    std::byte* unused = nullptr;
    CHIMERA_RETURN_IF_ERROR(
        placeCopies(crossings, staging, 0, static_cast<std::size_t>(lane.size - 1) * block, es, unused));
  }
  // Step s: piece s is reduced inside the host and posted across; piece s - 1 is reduced across
  // and its result posted back; piece s - 2 has arrived and is spread inside the host.
  for (int s = 0; s < pieces.parts + 2; ++s) {
    if (s < pieces.parts) {
      CHIMERA_RETURN_IF_ERROR(reduceRanges(send, recv, hostPartsOf(s), dtype, op, host, scratch, segmentBytes));
      if (crosses) CHIMERA_RETURN_IF_ERROR(crossings[s % 3].postReduction(recv, lanePartsOf(s), dtype, lane));
    }
    if (crosses && s >= 1 && s - 1 < pieces.parts) {
      Crossing& crossing = crossings[(s - 1) % 3];
      CHIMERA_RETURN_IF_ERROR(crossing.reduce(recv, dtype, op, lane));
      if (op == ReduceOp::Avg) {
        for (const ElementRange& r : crossing.mine(lane))
          divideByCount(at(recv, r.offset, es), r.count, dtype, group.size);
      }
      CHIMERA_RETURN_IF_ERROR(crossing.postGather(recv, dtype, lane));
    }
    if (s >= 2) {
      if (crosses) CHIMERA_RETURN_IF_ERROR(crossings[(s - 2) % 3].gathered(lane));
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
  const MpiGroup& lane = hierarchy.lane;
  const int me = group.index;
  const int myHost = layout.hostOf[static_cast<std::size_t>(me)];
  const std::size_t es = dataTypeSize(dtype);
  const std::size_t inputCount = recvCount * static_cast<std::size_t>(group.size);
  // Piece p of every block: its own pipeline.
  const BlockSplit pieces{recvCount, hierarchicalPieces(inputCount * es, segmentBytes)};
  const bool crosses = layout.inLane(me);
  // Partial sums live at their places in a buffer the size of the input; the copies after it.
  Crossings crossings;
  const std::size_t mineCount = crosses ? served(layout, myHost, host.index).size() * pieces.size(0) : 0;
  std::byte* staged = nullptr;
  CHIMERA_RETURN_IF_ERROR(placeCopies(crossings, staging, inputCount * es,
                                      static_cast<std::size_t>(crosses ? lane.size - 1 : 0) * mineCount, es, staged));
  // Step s: piece s of the blocks lane j carries is reduced inside the host onto its lane-j
  // member and posted across (the blocks of host h's members to host h's lane member); piece
  // s - 1 is reduced across and handed to its members on this host.
  for (int s = 0; s < pieces.parts + 1; ++s) {
    if (s < pieces.parts) {
      const ElementRange part = pieceOf(pieces, s);
      std::vector<RangeList> hostParts(static_cast<std::size_t>(host.size));
      for (int j = 0; j < layout.lanes; ++j)
        hostParts[static_cast<std::size_t>(j)] = blocksOf(servedEverywhere(layout, j), recvCount, -1, part);
      CHIMERA_RETURN_IF_ERROR(reduceRanges(send, staged, hostParts, dtype, op, host, scratch, segmentBytes));
      if (crosses) {
        std::vector<RangeList> laneParts(static_cast<std::size_t>(lane.size));
        for (int h = 0; h < lane.size; ++h)
          laneParts[static_cast<std::size_t>(h)] = blocksOf(served(layout, h, host.index), recvCount, -1, part);
        CHIMERA_RETURN_IF_ERROR(crossings[s % 3].postReduction(staged, std::move(laneParts), dtype, lane));
      }
    }
    if (s >= 1) {
      const ElementRange part = pieceOf(pieces, s - 1);
      RangeTransfers forward = noTransfers(host.size);
      if (crosses) {
        CHIMERA_RETURN_IF_ERROR(crossings[(s - 1) % 3].reduce(staged, dtype, op, lane));
        // Keep this member's piece, send the others it holds to their members.
        for (const int m : served(layout, myHost, host.index)) {
          const ElementRange piece{static_cast<std::size_t>(m) * recvCount + part.offset, part.count};
          if (m == me) {
            std::memcpy(at(recv, part.offset, es), at(staged, piece.offset, es), part.count * es);
          } else {
            appendRange(forward.sends[static_cast<std::size_t>(layout.localIndex[static_cast<std::size_t>(m)])], piece);
          }
        }
      } else {
        appendRange(forward.receives[static_cast<std::size_t>(layout.laneOf(me))], part);
      }
      CHIMERA_RETURN_IF_ERROR(exchangeRanges(staged, recv, forward, dtype, host));
    }
  }
  if (op == ReduceOp::Avg) divideByCount(recv, recvCount, dtype, group.size);
  return Status::ok();
}

Status hierarchicalAllGather(const void* send, void* recv, std::size_t sendCount, DataType dtype, const MpiGroup& group,
                             const HostHierarchy& hierarchy, std::size_t segmentBytes) {
  const HostLayout& layout = hierarchy.layout;
  const MpiGroup& host = hierarchy.host;
  const MpiGroup& lane = hierarchy.lane;
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
  // Step s: piece s of the lane's blocks is posted across the hosts; piece s - 1 has arrived and
  // each lane member hands its lane's pieces to the rest of the host, less the receiver's own.
  const BlockSplit pieces{sendCount,
                          hierarchicalPieces(sendCount * static_cast<std::size_t>(group.size) * es, segmentBytes)};
  const bool crosses = layout.inLane(me);
  Crossings crossings;
  const auto& local = layout.members[static_cast<std::size_t>(myHost)];
  for (int s = 0; s < pieces.parts + 1; ++s) {
    if (s < pieces.parts && crosses) {
      std::vector<RangeList> laneParts(static_cast<std::size_t>(lane.size));
      for (int h = 0; h < lane.size; ++h)
        laneParts[static_cast<std::size_t>(h)] =
            blocksOf(served(layout, h, host.index), sendCount, -1, pieceOf(pieces, s));
      CHIMERA_RETURN_IF_ERROR(crossings[s % 3].postGather(recv, dtype, lane, std::move(laneParts)));
    }
    if (s >= 1) {
      const ElementRange part = pieceOf(pieces, s - 1);
      if (crosses) CHIMERA_RETURN_IF_ERROR(crossings[(s - 1) % 3].gathered(lane));
      RangeTransfers spread = noTransfers(host.size);
      for (int d = 0; d < host.size; ++d) {
        if (d == host.index) continue;
        if (host.index < layout.lanes)
          spread.sends[static_cast<std::size_t>(d)] =
              blocksOf(servedEverywhere(layout, host.index), sendCount, local[static_cast<std::size_t>(d)], part);
        if (d < layout.lanes)
          spread.receives[static_cast<std::size_t>(d)] = blocksOf(servedEverywhere(layout, d), sendCount, me, part);
      }
      CHIMERA_RETURN_IF_ERROR(exchangeRanges(recv, recv, spread, dtype, host));
    }
  }
  return Status::ok();
}

}  // namespace chimera::detail
