// SPDX-License-Identifier: Apache-2.0
// Implements the hierarchical collectives over a group's host and lane communicators.
#include "mpi/hierarchical.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/host_reduce.hpp"
#include "core/check.hpp"
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

}  // namespace

Status hierarchicalAllReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                             const MpiGroup& group, const HostHierarchy& hierarchy, ScratchBuffer& scratch,
                             std::size_t segmentBytes) {
  const HostLayout& layout = hierarchy.layout;
  const MpiGroup& host = hierarchy.host;
  const int me = group.index;
  const std::size_t es = dataTypeSize(dtype);
  // (1) Chunk j of the host's sum onto its lane-j member.
  const BlockSplit chunks{count, layout.lanes};
  std::vector<RangeList> hostParts(static_cast<std::size_t>(host.size));
  for (int j = 0; j < layout.lanes; ++j)
    appendRange(hostParts[static_cast<std::size_t>(j)], {chunks.offset(j), chunks.size(j)});
  CHIMERA_RETURN_IF_ERROR(reduceRanges(send, recv, hostParts, dtype, op, host, scratch, segmentBytes));
  // (2) The chunk across the hosts: one block per host reduced, then gathered.
  if (layout.inLane(me)) {
    const MpiGroup& lane = hierarchy.lane;
    const int j = host.index;
    const BlockSplit blocks{chunks.size(j), lane.size};
    std::vector<RangeList> laneParts(static_cast<std::size_t>(lane.size));
    for (int h = 0; h < lane.size; ++h)
      appendRange(laneParts[static_cast<std::size_t>(h)], {chunks.offset(j) + blocks.offset(h), blocks.size(h)});
    CHIMERA_RETURN_IF_ERROR(reduceRanges(recv, recv, laneParts, dtype, op, lane, scratch, segmentBytes));
    if (op == ReduceOp::Avg) {
      for (const ElementRange& r : laneParts[static_cast<std::size_t>(lane.index)])
        divideByCount(at(recv, r.offset, es), r.count, dtype, group.size);
    }
    CHIMERA_RETURN_IF_ERROR(exchangeRanges(recv, recv, allGatherTransfers(laneParts, lane.index), dtype, lane));
  }
  // (3) Every chunk from its lane member to the rest of the host.
  return exchangeRanges(recv, recv, allGatherTransfers(hostParts, host.index), dtype, host);
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
