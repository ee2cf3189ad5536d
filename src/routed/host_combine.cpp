// SPDX-License-Identifier: Apache-2.0
// The routed exchange once per destination host (rule 6, docs/moe.md), the combine's way: the
// combine and the dispatch backward return a record's sum from each expert rank; those of a
// source on another host go to its forwarder here first, which sums a host record's rows (and
// gathers its slots' weight gradients), so one row per token and host crosses back, where once
// per rank one row per token and rank does.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.hpp"
#include "routed/exchange_blocks.hpp"
#include "routed/record_sums.hpp"
#include "routed/routed_impl.hpp"
#include "routed/row_math.hpp"

namespace chimera {

using detail::kBlockWordBytes;

Status RoutedExchange::Impl::returnHosts(const RoutedDispatch::State& st, const void* rows, const void* weights,
                                         bool values, const void* slotValues, void* out, void* outValues,
                                         RoutedStats& stats, const Status& local, const char* what, Status& verdict) {
  Impl& m = *this;
  const auto R = static_cast<std::size_t>(ranks);
  const int myHost = hostOf[static_cast<std::size_t>(index)];
  const auto sameHost = [&](std::size_t p) { return hostOf[p] == myHost; };
  const auto word = kBlockWordBytes;
  const std::int64_t H = options.hidden;
  const int K = options.topK;
  const auto S = static_cast<std::size_t>(slots);
  const auto Sh = static_cast<std::size_t>(hostSlots);
  const std::size_t valueBytes = values ? weightBytes : 0;
  // A record's sum: its row, then (with values) one value per slot; a host record's: its row,
  // then one value per host slot.
  const std::size_t record = rowBytes + S * valueBytes;
  const std::size_t hostRecord = rowBytes + Sh * valueBytes;

  // Each received record's sum: those of sources on another host into round 1's block to the
  // source's forwarder here (one block per member, its sources in source order), those of this
  // host's sources straight into round 2's block to the source, which then crosses the link
  // concurrently with the forwarders' sums.
  std::vector<std::size_t> rowsA, bytesA(R), offsetA, rowsB(R), bytesB(R), offsetB, segStart(R);
  const std::vector<std::size_t> place = viaForwarders(st, rowsA);
  for (std::size_t p = 0; p < R; ++p) {
    rowsB[p] = sameHost(p) ? st.recvCount[p] : st.fwdCount[p];
    bytesA[p] = word + rowsA[p] * record;
    bytesB[p] = word + rowsB[p] * (sameHost(p) ? record : hostRecord);
  }
  const std::size_t endA = (detail::blockOffsets(bytesA, word, offsetA) + 7) / 8 * 8;
  const std::size_t endB = detail::blockOffsets(bytesB, word, offsetB);
  for (std::size_t& at : offsetB) at += endA;
  if (m.sendScratch.size() < endA + endB) m.sendScratch.resize(endA + endB);
  for (std::size_t p = 0; p < R; ++p) {
    // As a block whose records follow a word.
    segStart[p] = sameHost(p)
                      ? offsetB[p]
                      : offsetA[static_cast<std::size_t>(forwarder(static_cast<int>(p), myHost))] + place[p] * record;
  }
  for (std::size_t t = 0; t < R; ++t)
    detail::writeWord(m.sendScratch.data() + offsetA[t], rowsA[t], tag, !local.isOk());
  if (values) {
    detail::sumRecordGradients(m, st, segStart, record, rows, slotValues, local, false);
  } else {
    detail::sumRecordRows(m, st, segStart, record, rows, weights, local, detail::RowOnly{}, false);
  }

  // Round 1, inside the host: to each forwarder the sums of the sources it forwards for. From
  // member d of this host, those of the sources this rank forwards for, in source order. Every
  // member gets a word, so every rank's verdict is known to every rank after this round.
  std::vector<std::size_t> expected, segIn, recvBytes(R), recvOffset;
  forwardedSegments(st, expected, segIn);
  for (std::size_t d = 0; d < R; ++d) recvBytes[d] = word + expected[d] * record;
  CHIMERA_RETURN_IF_ERROR(
      detail::exchangeBlocks(backend, group, m.sendScratch, offsetA, bytesA, recvBytes, m.back, recvOffset));
  for (std::size_t t = 0; t < R; ++t) countBlock(stats, t, rowsA[t], rowBytes, S * valueBytes, word);
  stats.rounds += 1;
  verdict = detail::blockVerdict(detail::wordsOf(m.back, recvOffset), groupRanks, expected, tag, local, what);
  if (!verdict.isOk()) return Status::ok();

  // Round 2: to each source of this host its records' sums; to each source of another host, per
  // host record this rank forwarded, the sum of its members' rows in the order of their first k
  // and each host slot's value, from the member record its pair went to (that record's slots
  // are the host record's slots for its member, in order).
  const auto memberRecord = [&](std::size_t p, std::size_t i) {
    const auto d = static_cast<std::size_t>(st.fwdTargetMember[i]);
    return m.back.data() + recvOffset[d] + word + (segIn[p * R + d] + st.fwdTargetIndex[i]) * record;
  };
  detail::withRowType(options.dtype, [&]<typename T>() {
    for (std::size_t p = 0; p < R; ++p) {
      std::byte* block = m.sendScratch.data() + offsetB[p];
      detail::writeWord(block, rowsB[p], tag, false);
      for (std::size_t r = 0; r < st.fwdCount[p]; ++r) {
        std::byte* sum = block + word + r * hostRecord;
        std::memset(sum, 0, hostRecord);
        const std::size_t j = st.fwdFirst[p] + r;
        const std::size_t first = st.fwdTargetFirst[j];
        for (std::size_t i = first; i < st.fwdTargetFirst[j + 1]; ++i)
          detail::addRow(reinterpret_cast<T*>(sum), reinterpret_cast<const T*>(memberRecord(p, i)), H);
        for (std::size_t s = 0; values && s < Sh; ++s) {
          const std::int32_t target = st.fwdSlotTarget[j * Sh + s];
          if (target < 0) continue;
          const auto slot = static_cast<std::size_t>(
              std::count(st.fwdSlotTarget.begin() + static_cast<std::ptrdiff_t>(j * Sh),
                         st.fwdSlotTarget.begin() + static_cast<std::ptrdiff_t>(j * Sh + s), target));
          std::memcpy(sum + rowBytes + s * weightBytes,
                      memberRecord(p, first + static_cast<std::size_t>(target)) + rowBytes + slot * weightBytes,
                      weightBytes);
        }
      }
    }
  });
  std::vector<std::size_t> fromExpected(R), fromBytes(R), fromOffset;
  for (std::size_t p = 0; p < R; ++p) {
    fromExpected[p] = sameHost(p) ? st.sendCount[p] : st.hostSendCount[p];
    fromBytes[p] = word + fromExpected[p] * (sameHost(p) ? record : hostRecord);
  }
  CHIMERA_RETURN_IF_ERROR(
      detail::exchangeBlocks(backend, group, m.sendScratch, offsetB, bytesB, fromBytes, m.hostBack, fromOffset));
  for (std::size_t p = 0; p < R; ++p)
    countBlock(stats, p, rowsB[p], rowBytes, (sameHost(p) ? S : Sh) * valueBytes, word);
  stats.rounds += 1;
  verdict =
      detail::blockVerdict(detail::wordsOf(m.hostBack, fromOffset), groupRanks, fromExpected, tag, Status::ok(), what);
  if (!verdict.isOk()) return Status::ok();

  // A token's rows, summed at its source in k order: each record of this host's ranks, and each
  // other host's sum, at the first k it carries; a pair's value from the slot that carried its k.
  const auto returned = [&](const std::vector<std::size_t>& firstOf, std::size_t rec, std::size_t bytes) {
    const auto d =
        static_cast<std::size_t>(std::upper_bound(firstOf.begin(), firstOf.end(), rec) - firstOf.begin() - 1);
    return m.hostBack.data() + fromOffset[d] + word + (rec - firstOf[d]) * bytes;
  };
  const auto copyValue = [&](std::int64_t t, int k, const std::byte* in, const std::vector<std::int32_t>& slotK,
                             std::size_t rec, std::size_t n) {
    for (std::size_t s = 0; s < n; ++s) {
      if (slotK[rec * n + s] == k)
        std::memcpy(static_cast<std::byte*>(outValues) + static_cast<std::size_t>(t * K + k) * weightBytes,
                    in + rowBytes + s * weightBytes, weightBytes);
    }
  };
  detail::withRowType(options.dtype, [&]<typename T>() {
    for (std::int64_t t = st.ownBegin; t < st.ownEnd; ++t) {
      T* sum = static_cast<T*>(out) + t * H;
      std::memset(sum, 0, rowBytes);
      for (int k = 0; k < K; ++k) {
        const auto pair = static_cast<std::size_t>((t - st.ownBegin) * K + k);
        if (outValues != nullptr) detail::writeWeight(outValues, options.weightDtype, t * K + k, 0.0);
        const std::int64_t hostRec = st.pairHostRecord[pair];
        const std::int64_t rec = st.pairRecord[pair];
        const bool crossed = hostRec >= 0;
        if (!crossed && rec < 0) continue;  // dropped
        const auto u = static_cast<std::size_t>(crossed ? hostRec : rec);
        const std::byte* in = crossed ? returned(st.hostSendFirst, u, hostRecord) : returned(st.sendFirst, u, record);
        if ((crossed ? st.pairHostFirst[pair] : st.pairFirst[pair]) != 0)
          detail::addRow(sum, reinterpret_cast<const T*>(in), H);
        if (values && outValues != nullptr)
          copyValue(t, k, in, crossed ? st.hostRecordK : st.recordK, u, crossed ? Sh : S);
      }
    }
  });
  return Status::ok();
}

}  // namespace chimera
