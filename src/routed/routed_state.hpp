// SPDX-License-Identifier: Apache-2.0
// The state of one routed dispatch (private): the records this rank sent, per destination,
// and the records it received, with the rows they expanded to. Combine and both backwards
// walk these tables; nothing in them is keyed by anything but this dispatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chimera/routed_exchange.hpp"

namespace chimera {

struct RoutedDispatch::State {
  // The exchange that dispatched into this state (RoutedExchange::Impl::serial; 0: none yet):
  // its tables are sized by that exchange's group, slots and rows, so every other exchange
  // refuses the handle.
  std::uint64_t exchange = 0;
  std::int64_t tokens = 0;  // T, this rank's tokens
  // The rows this rank dispatches: all of them, or its block when replicas split.
  std::int64_t ownBegin = 0;
  std::int64_t ownEnd = 0;
  int slots = 1;  // local experts one record carries
  // The world rank whose own check failed, where this rank learned it from the replicas of its
  // tokens (-1: none, or this rank's own check failed): its count words name that rank
  // (detail::countWord), so every rank's Mismatch names the rank at fault, not the replica
  // that passed the failure on.
  int faultRank = -1;

  // Send side, by destination group index: records [sendFirst[p], sendFirst[p] + sendCount[p]).
  std::vector<std::size_t> sendCount;
  std::vector<std::size_t> sendFirst;
  // Where the local expert ids are implied by the records' order (Impl::idsByOrder): the records
  // per (destination, local expert), each destination's in local expert order.
  std::vector<std::size_t> sendExpertCount;
  std::vector<std::int64_t> recordToken;  // per send record: its token
  std::vector<std::int32_t> recordK;      // per send record and slot: the k it carries, -1 empty
  // Per (token - ownBegin, k): the send record carrying it (-1: dropped by capacity) and
  // whether k is the first slot of that record (where the record's row is summed in).
  std::vector<std::int64_t> pairRecord;
  std::vector<std::uint8_t> pairFirst;

  // Receive side, by source group index.
  std::vector<std::size_t> recvCount;
  std::vector<std::size_t> recvExpertCount;  // per (source, local expert), where ids are implied
  std::vector<std::size_t> recvFirst;
  std::vector<std::int32_t> recvLocal;  // per received record and slot: local expert, -1 empty
  std::vector<std::int64_t> slotRow;    // per received record and slot: its row, -1 empty
  std::vector<std::int64_t> tokensPerExpert;
  std::int64_t rows = 0;
  // The received records (headers and rows, after each block's word of `wordBytes`: none in a
  // dropless dispatch over the group, whose count exchange carried it) until receive() expands them.
  std::size_t wordBytes = 0;
  std::vector<std::byte> received;
  std::vector<std::size_t> receivedOffset;  // per source: byte offset of its block in `received`

  // Once per destination host (RoutedExchange::Impl::hostDispatch): the tables above are the
  // once-per-rank dispatch's (the backwards run on them); these say how the records travelled.
  // Send side, by forwarder group index: host records [hostSendFirst[f], + hostSendCount[f]),
  // each one token's slots for every rank of the forwarder's host; per host record and host
  // slot the k it carries (-1 empty); per (token - ownBegin, k) the host record carrying it (-1:
  // sent straight, to a rank of this host, or dropped) and whether k is its first slot.
  std::vector<std::size_t> hostSendCount;
  std::vector<std::size_t> hostSendFirst;
  std::vector<std::int64_t> hostRecordToken;
  std::vector<std::int32_t> hostRecordK;
  std::vector<std::int64_t> pairHostRecord;
  std::vector<std::uint8_t> pairHostFirst;
  // Forwarder side, by source group index: the host records received from each source of
  // another host (fwdCount, fwdFirst), the records forwarded per (source, member of this host)
  // (fwdSeg, R x R), and per host record its fan-out [fwdTargetFirst[j], fwdTargetFirst[j + 1]):
  // the member each record went to and its index within that member's segment of the source,
  // in the order of their first k; per host record and host slot, the record of its fan-out
  // (0 .. its targets - 1) that slot went to, -1 empty (the dispatch backward's weight gradients
  // return through it).
  std::vector<std::size_t> fwdCount;
  std::vector<std::size_t> fwdFirst;
  std::vector<std::size_t> fwdSeg;
  std::vector<std::size_t> fwdTargetFirst;
  std::vector<std::int32_t> fwdTargetMember;
  std::vector<std::size_t> fwdTargetIndex;
  std::vector<std::int32_t> fwdSlotTarget;

  RoutedStats stats;
  bool complete = false;  // a dispatch succeeded into this state
};

}  // namespace chimera
