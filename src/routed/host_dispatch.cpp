// SPDX-License-Identifier: Apache-2.0
// The routed exchange once per destination host (rule 6, docs/moe.md), the dispatch's way: a
// token's records for the ranks of another host cross to that host once, as one host record to
// a forwarder there, which fans them out to its host's ranks. The receivers end up with the
// records of the once-per-rank dispatch, in its order, so receive runs unchanged; the combine
// backward sends dy the same way (the combine's way is src/routed/host_combine.cpp).
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

namespace {

// `scratch` holding at least `bytes`, its contents left as they are: every byte sent is written
// by the round (empty header slots explicitly), so the scratch is not filled first, which on
// blocks of tens of MiB per rank costs as much as writing them.
std::byte* holdAtLeast(std::vector<std::byte>& scratch, std::size_t bytes) {
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}

}  // namespace

void RoutedExchange::Impl::buildHostTable(const std::int64_t* topkIdx, RoutedDispatch::State& st) const {
  const int K = options.topK;
  const auto Sh = static_cast<std::size_t>(hostSlots);
  const std::int64_t own = st.ownEnd - st.ownBegin;
  const int myHost = hostOf[static_cast<std::size_t>(index)];
  const std::size_t hosts = hostMembers.size();
  st.pairHostRecord.assign(static_cast<std::size_t>(own * K), -1);
  st.pairHostFirst.assign(st.pairHostRecord.size(), 0);
  st.hostSendCount.assign(static_cast<std::size_t>(ranks), 0);
  // The host of a kept pair's destination rank, or -1 (dropped, or a rank of this host).
  const auto hostOfPair = [&](std::int64_t i, int k) {
    if (st.pairRecord[static_cast<std::size_t>(i * K + k)] < 0) return -1;
    const auto dest = static_cast<std::size_t>(topkIdx[(st.ownBegin + i) * K + k] / localExperts);
    const int host = hostOf[dest];
    return host == myHost ? -1 : host;
  };
  std::vector<std::int64_t> open(hosts, -1);
  for (std::int64_t i = 0; i < own; ++i) {
    for (int k = 0; k < K; ++k) {
      const int h = hostOfPair(i, k);
      if (h < 0 || open[static_cast<std::size_t>(h)] == i) continue;
      open[static_cast<std::size_t>(h)] = i;
      ++st.hostSendCount[static_cast<std::size_t>(forwarder(index, h))];
    }
  }
  st.hostSendFirst.assign(st.hostSendCount.size(), 0);
  std::size_t total = 0;
  for (std::size_t f = 0; f < st.hostSendCount.size(); ++f) {
    st.hostSendFirst[f] = total;
    total += st.hostSendCount[f];
  }
  st.hostRecordToken.assign(total, 0);
  st.hostRecordK.assign(total * Sh, -1);
  std::vector<std::size_t> next = st.hostSendFirst;
  for (std::int64_t i = 0; i < own; ++i) {
    std::fill(open.begin(), open.end(), -1);
    for (int k = 0; k < K; ++k) {
      const int h = hostOfPair(i, k);
      if (h < 0) continue;
      std::int64_t& record = open[static_cast<std::size_t>(h)];
      bool first = false;
      if (record < 0) {
        record = static_cast<std::int64_t>(next[static_cast<std::size_t>(forwarder(index, h))]++);
        st.hostRecordToken[static_cast<std::size_t>(record)] = st.ownBegin + i;
        first = true;
      }
      std::int32_t* recordSlots = st.hostRecordK.data() + static_cast<std::size_t>(record) * Sh;
      std::size_t s = 0;
      while (recordSlots[s] >= 0) ++s;
      recordSlots[s] = k;
      st.pairHostRecord[static_cast<std::size_t>(i * K + k)] = record;
      st.pairHostFirst[static_cast<std::size_t>(i * K + k)] = first ? 1 : 0;
    }
  }
}

Status RoutedExchange::Impl::dispatchHosts(RoutedDispatch::State& st, const std::int64_t* topkIdx,
                                           const void* topkWeights, const std::byte* rows, std::int64_t firstRow,
                                           const Status& local) {
  Impl& m = *this;
  const auto R = static_cast<std::size_t>(ranks);
  const auto me = static_cast<std::size_t>(index);
  const int myHost = hostOf[me];
  const auto Sh = static_cast<std::size_t>(hostSlots);
  const std::size_t record = headerBytes + rowBytes;
  const std::size_t hostRecord = hostHeaderBytes + rowBytes;
  const int K = options.topK;
  Status verdict = local;
  if (verdict.isOk()) buildHostTable(topkIdx, st);
  if (verdict.isOk()) verdict = checkSendScratch(st.hostSendCount, hostRecord);
  if (!verdict.isOk()) {
    st.sendCount.assign(R, 0);
    st.sendFirst.assign(R, 0);
    st.hostSendCount.assign(R, 0);
    st.hostSendFirst.assign(R, 0);
  }
  const auto sameHost = [&](std::size_t p) { return hostOf[p] == myHost; };

  // The count exchange: per peer the records it receives in the end and the host records it
  // forwards; every rank's verdict reaches every rank here, before any row moves.
  std::vector<std::int32_t> words(2 * R), theirs(2 * R);
  std::vector<int> from(2 * R);
  for (std::size_t p = 0; p < R; ++p) {
    words[2 * p] = detail::countWord(static_cast<std::int64_t>(st.sendCount[p]), tag, !verdict.isOk(), st.faultRank);
    words[2 * p + 1] =
        detail::countWord(static_cast<std::int64_t>(st.hostSendCount[p]), tag, !verdict.isOk(), st.faultRank);
    from[2 * p] = from[2 * p + 1] = groupRanks[p];
  }
  CHIMERA_RETURN_IF_ERROR(backend.exchangeCounts(words, theirs, group));
  st.stats.countBytes += (R - 1) * 2 * sizeof(std::int32_t);
  for (std::size_t p = 0; p < R; ++p) {
    if (!sameHost(p)) st.stats.crossHostBytes += 2 * sizeof(std::int32_t);
  }
  st.stats.rounds += 1;
  std::vector<std::size_t> counts;
  CHIMERA_RETURN_IF_ERROR(detail::countVerdict(theirs, from, tag, verdict, counts));
  st.recvCount.assign(R, 0);
  st.fwdCount.assign(R, 0);
  for (std::size_t p = 0; p < R; ++p) {
    st.recvCount[p] = counts[2 * p];
    if (!sameHost(p)) st.fwdCount[p] = counts[2 * p + 1];
  }

  // Round 1: the records for this host's ranks straight, one host record per token to the
  // forwarder of each other host.
  std::vector<std::size_t> sendBytes(R), sendOffset, recvBytes(R), recvOffset;
  for (std::size_t p = 0; p < R; ++p) {
    sendBytes[p] = sameHost(p) ? st.sendCount[p] * record : st.hostSendCount[p] * hostRecord;
    recvBytes[p] = sameHost(p) ? st.recvCount[p] * record : st.fwdCount[p] * hostRecord;
  }
  holdAtLeast(m.sendScratch, detail::blockOffsets(sendBytes, 0, sendOffset));
  for (std::size_t p = 0; p < R; ++p) {
    std::byte* block = m.sendScratch.data() + sendOffset[p];
    if (sameHost(p)) {
      for (std::size_t r = 0; r < st.sendCount[p]; ++r) {
        std::memset(block + r * record, 0xff, headerBytes);  // empty slots: local expert -1
        packRecord(st, st.sendFirst[p] + r, topkIdx, topkWeights, rows, firstRow, block + r * record);
      }
      continue;
    }
    for (std::size_t r = 0; r < st.hostSendCount[p]; ++r) {
      const std::size_t rec = st.hostSendFirst[p] + r;
      const std::int64_t t = st.hostRecordToken[rec];
      std::byte* out = block + r * hostRecord;
      std::memset(out, 0xff, hostHeaderBytes);
      for (std::size_t s = 0; s < Sh; ++s) {
        const std::int32_t k = st.hostRecordK[rec * Sh + s];
        if (k < 0) continue;
        const auto expert = static_cast<std::int32_t>(topkIdx[t * K + k]);
        std::byte* slot = out + s * (sizeof(std::int32_t) + weightBytes);
        std::memcpy(slot, &expert, sizeof(expert));
        std::memcpy(slot + sizeof(expert),
                    static_cast<const std::byte*>(topkWeights) + static_cast<std::size_t>(t * K + k) * weightBytes,
                    weightBytes);
      }
      std::memcpy(out + hostHeaderBytes, rows + static_cast<std::size_t>(t - firstRow) * rowBytes, rowBytes);
    }
  }
  // Round 2's receive size is known now (the counts): both rounds land in one buffer, the
  // records of this host's sources from round 1, the others' from their forwarders in round 2.
  std::vector<std::size_t> fanBytes, fanOffset;
  const std::vector<std::size_t> fanPlace = viaForwarders(st, fanBytes);
  for (std::size_t& bytes : fanBytes) bytes *= record;
  const std::size_t firstEnd = (detail::blockOffsets(recvBytes, 0, recvOffset) + 7) / 8 * 8;
  const std::size_t fanEnd = detail::blockOffsets(fanBytes, 0, fanOffset);
  st.received.swap(spareReceived());
  st.received.resize(firstEnd + fanEnd);
  CHIMERA_RETURN_IF_ERROR(backend.allToAllV(m.sendScratch.data(), sendBytes, sendOffset, st.received.data(), recvBytes,
                                            recvOffset, DataType::U8, group));
  for (std::size_t p = 0; p < R; ++p) {
    if (sameHost(p)) {
      countBlock(st.stats, p, st.sendCount[p], rowBytes, headerBytes, 0);
    } else {
      countBlock(st.stats, p, st.hostSendCount[p], rowBytes, hostHeaderBytes, 0);
    }
  }
  st.stats.rounds += 1;

  // The forwarder: each host record becomes one once-per-rank record per rank of this host it
  // names, in the order of their first k, each with its slots in k order.
  st.fwdFirst.assign(R, 0);
  st.fwdSeg.assign(R * R, 0);
  std::size_t hostRecords = 0;
  for (std::size_t p = 0; p < R; ++p) {
    st.fwdFirst[p] = hostRecords;
    hostRecords += st.fwdCount[p];
  }
  const auto slotAt = [&](std::size_t p, std::size_t r, std::size_t s) {
    return st.received.data() + recvOffset[p] + r * hostRecord + s * (sizeof(std::int32_t) + weightBytes);
  };
  st.fwdTargetFirst.assign(hostRecords + 1, 0);
  st.fwdTargetMember.clear();
  st.fwdTargetIndex.clear();
  st.fwdSlotTarget.assign(hostRecords * Sh, -1);
  std::vector<std::int32_t> members;  // this host record's members, in the order of their first k
  for (std::size_t p = 0; p < R; ++p) {
    for (std::size_t r = 0; r < st.fwdCount[p]; ++r) {
      members.clear();
      for (std::size_t s = 0; s < Sh; ++s) {
        std::int32_t expert = -1;
        std::memcpy(&expert, slotAt(p, r, s), sizeof(expert));
        if (expert < 0) continue;
        const std::int32_t dest = expert < options.numExperts ? static_cast<std::int32_t>(expert / localExperts) : -1;
        if (dest < 0 || hostOf[static_cast<std::size_t>(dest)] != myHost)
          return Status::mismatch(fmt::format(
              "routed dispatch: rank {} sent expert {} to this rank, which forwards to the ranks of its host only "
              "(corrupt records)",
              groupRanks[p], expert));
        if (std::find(members.begin(), members.end(), dest) != members.end()) continue;
        members.push_back(dest);
        st.fwdTargetMember.push_back(dest);
        st.fwdTargetIndex.push_back(st.fwdSeg[p * R + static_cast<std::size_t>(dest)]++);
      }
      if (members.empty())
        return Status::mismatch(fmt::format("routed dispatch: rank {} sent an empty host record", groupRanks[p]));
      st.fwdTargetFirst[st.fwdFirst[p] + r + 1] = st.fwdTargetMember.size();
    }
  }
  // Round 2: per member of this host, the records of each source this rank forwards for, by source.
  std::vector<std::size_t> outBytes, outOffset, segment;
  forwardedSegments(st, outBytes, segment);
  for (std::size_t& bytes : outBytes) bytes *= record;
  holdAtLeast(m.sendScratch, detail::blockOffsets(outBytes, 0, outOffset));
  const std::size_t slot = slotBytes();
  std::vector<std::size_t> filled;  // slots written per record of the host record at hand
  for (std::size_t p = 0; p < R; ++p) {
    for (std::size_t r = 0; r < st.fwdCount[p]; ++r) {
      const std::size_t j = st.fwdFirst[p] + r;
      const std::size_t firstTarget = st.fwdTargetFirst[j];
      const std::size_t targets = st.fwdTargetFirst[j + 1] - firstTarget;
      filled.assign(targets, 0);
      const auto recordOf = [&](std::size_t target) {
        const auto d = static_cast<std::size_t>(st.fwdTargetMember[firstTarget + target]);
        return m.sendScratch.data() + outOffset[d] +
               (segment[p * R + d] + st.fwdTargetIndex[firstTarget + target]) * record;
      };
      for (std::size_t target = 0; target < targets; ++target) std::memset(recordOf(target), 0xff, headerBytes);
      for (std::size_t s = 0; s < Sh; ++s) {
        std::int32_t expert = -1;
        std::memcpy(&expert, slotAt(p, r, s), sizeof(expert));
        if (expert < 0) continue;
        const auto dest = static_cast<std::int32_t>(expert / localExperts);
        const auto target = static_cast<std::size_t>(
            std::find(st.fwdTargetMember.begin() + static_cast<std::ptrdiff_t>(firstTarget),
                      st.fwdTargetMember.begin() + static_cast<std::ptrdiff_t>(firstTarget + targets), dest) -
            (st.fwdTargetMember.begin() + static_cast<std::ptrdiff_t>(firstTarget)));
        st.fwdSlotTarget[j * Sh + s] = static_cast<std::int32_t>(target);
        std::byte* out = recordOf(target) + filled[target]++ * slot;
        const auto localExpert = static_cast<std::int32_t>(expert % localExperts);
        if (idBytes > 0) std::memcpy(out, &localExpert, idBytes);
        std::memcpy(out + idBytes, slotAt(p, r, s) + sizeof(std::int32_t), weightBytes);
      }
      const std::byte* row = st.received.data() + recvOffset[p] + r * hostRecord + hostHeaderBytes;
      for (std::size_t target = 0; target < targets; ++target)
        std::memcpy(recordOf(target) + headerBytes, row, rowBytes);
    }
  }
  std::vector<std::size_t> fanOffsetAbsolute(R);
  for (std::size_t f = 0; f < R; ++f) fanOffsetAbsolute[f] = firstEnd + fanOffset[f];
  CHIMERA_RETURN_IF_ERROR(backend.allToAllV(m.sendScratch.data(), outBytes, outOffset, st.received.data(), fanBytes,
                                            fanOffsetAbsolute, DataType::U8, group));
  for (std::size_t d = 0; d < R; ++d) {
    std::size_t forwarded = 0;
    for (std::size_t p = 0; p < R; ++p) forwarded += st.fwdSeg[p * R + d];
    countBlock(st.stats, d, forwarded, rowBytes, headerBytes, 0);
  }
  st.stats.rounds += 1;

  // Every source's records where the once-per-rank dispatch would have put them in its order.
  st.wordBytes = 0;
  st.receivedOffset.assign(R, 0);
  for (std::size_t p = 0; p < R; ++p) {
    st.receivedOffset[p] = sameHost(p)
                               ? recvOffset[p]
                               : fanOffsetAbsolute[static_cast<std::size_t>(forwarder(static_cast<int>(p), myHost))] +
                                     fanPlace[p] * record;
  }
  return receivedTable(st);
}

std::vector<std::size_t> RoutedExchange::Impl::viaForwarders(const RoutedDispatch::State& st,
                                                             std::vector<std::size_t>& total) const {
  const auto R = static_cast<std::size_t>(ranks);
  const int myHost = hostOf[static_cast<std::size_t>(index)];
  std::vector<std::size_t> place(R, 0);
  total.assign(R, 0);
  for (std::size_t p = 0; p < R; ++p) {
    if (hostOf[p] == myHost) continue;
    const auto f = static_cast<std::size_t>(forwarder(static_cast<int>(p), myHost));
    place[p] = total[f];
    total[f] += st.recvCount[p];
  }
  return place;
}

void RoutedExchange::Impl::forwardedSegments(const RoutedDispatch::State& st, std::vector<std::size_t>& total,
                                             std::vector<std::size_t>& start) const {
  const auto R = static_cast<std::size_t>(ranks);
  total.assign(R, 0);
  start.assign(R * R, 0);
  for (std::size_t p = 0; p < R; ++p) {
    for (std::size_t d = 0; d < R; ++d) {
      start[p * R + d] = total[d];
      total[d] += st.fwdSeg[p * R + d];
    }
  }
}

Status RoutedExchange::Impl::combineBackwardHosts(const void* gradY, const void* expertOut, const void* rowWeights,
                                                  const RoutedDispatch::State& st, void* gradExpertOut,
                                                  void* gradRowWeights, RoutedStats& stats, const Status& local) {
  Impl& m = *this;
  const auto R = static_cast<std::size_t>(ranks);
  const int myHost = hostOf[static_cast<std::size_t>(index)];
  const auto sameHost = [&](std::size_t p) { return hostOf[p] == myHost; };
  const auto word = kBlockWordBytes;
  const char* const what = "routed combine backward";

  // Round 1: dy of a token once per record to the ranks of this host, once per host record to
  // the forwarder of each other host. Every member gets a word, so every rank's verdict is known
  // to every rank after this round.
  std::vector<std::size_t> sendRows(R), sendBytes(R), sendOffset, recvRows(R), recvBytes(R), recvOffset;
  for (std::size_t p = 0; p < R; ++p) {
    sendRows[p] = sameHost(p) ? st.sendCount[p] : st.hostSendCount[p];
    recvRows[p] = sameHost(p) ? st.recvCount[p] : st.fwdCount[p];
    sendBytes[p] = word + sendRows[p] * rowBytes;
    recvBytes[p] = word + recvRows[p] * rowBytes;
  }
  holdAtLeast(m.sendScratch, detail::blockOffsets(sendBytes, word, sendOffset));
  for (std::size_t p = 0; p < R; ++p) {
    std::byte* block = m.sendScratch.data() + sendOffset[p];
    detail::writeWord(block, sendRows[p], tag, !local.isOk());
    if (!local.isOk()) continue;
    const std::vector<std::int64_t>& token = sameHost(p) ? st.recordToken : st.hostRecordToken;
    const std::size_t first = sameHost(p) ? st.sendFirst[p] : st.hostSendFirst[p];
    for (std::size_t r = 0; r < sendRows[p]; ++r) {
      std::memcpy(block + word + r * rowBytes,
                  static_cast<const std::byte*>(gradY) + static_cast<std::size_t>(token[first + r]) * rowBytes,
                  rowBytes);
    }
  }
  CHIMERA_RETURN_IF_ERROR(
      detail::exchangeBlocks(backend, group, m.sendScratch, sendOffset, sendBytes, recvBytes, m.back, recvOffset));
  for (std::size_t p = 0; p < R; ++p) countBlock(stats, p, sendRows[p], rowBytes, 0, word);
  stats.rounds += 1;
  CHIMERA_RETURN_IF_ERROR(
      detail::blockVerdict(detail::wordsOf(m.back, recvOffset), groupRanks, recvRows, tag, local, what));

  // Round 2: each forwarder's copies of a host record's dy, one per rank of its host the record
  // names, per member by source, as the dispatch's second round placed the records.
  std::vector<std::size_t> outRows, segment, outBytes(R), outOffset;
  forwardedSegments(st, outRows, segment);
  for (std::size_t d = 0; d < R; ++d) outBytes[d] = word + outRows[d] * rowBytes;
  holdAtLeast(m.sendScratch, detail::blockOffsets(outBytes, word, outOffset));
  for (std::size_t d = 0; d < R; ++d) detail::writeWord(m.sendScratch.data() + outOffset[d], outRows[d], tag, false);
  for (std::size_t p = 0; p < R; ++p) {
    for (std::size_t r = 0; r < st.fwdCount[p]; ++r) {
      const std::size_t j = st.fwdFirst[p] + r;
      const std::byte* dy = m.back.data() + recvOffset[p] + word + r * rowBytes;
      for (std::size_t i = st.fwdTargetFirst[j]; i < st.fwdTargetFirst[j + 1]; ++i) {
        const auto d = static_cast<std::size_t>(st.fwdTargetMember[i]);
        std::memcpy(m.sendScratch.data() + outOffset[d] + word + (segment[p * R + d] + st.fwdTargetIndex[i]) * rowBytes,
                    dy, rowBytes);
      }
    }
  }
  std::vector<std::size_t> fanRows, fanBytes(R), fanOffset;
  const std::vector<std::size_t> fanPlace = viaForwarders(st, fanRows);
  for (std::size_t f = 0; f < R; ++f) fanBytes[f] = word + fanRows[f] * rowBytes;
  CHIMERA_RETURN_IF_ERROR(
      detail::exchangeBlocks(backend, group, m.sendScratch, outOffset, outBytes, fanBytes, m.hostBack, fanOffset));
  for (std::size_t d = 0; d < R; ++d) countBlock(stats, d, outRows[d], rowBytes, 0, word);
  stats.rounds += 1;
  CHIMERA_RETURN_IF_ERROR(
      detail::blockVerdict(detail::wordsOf(m.hostBack, fanOffset), groupRanks, fanRows, tag, Status::ok(), what));

  // dy of every received record where the once-per-rank exchange has it, then its gradients.
  detail::combineGradients(
      m, st,
      [&](std::size_t p, std::size_t r) -> const std::byte* {
        if (sameHost(p)) return m.back.data() + recvOffset[p] + word + r * rowBytes;
        const auto f = static_cast<std::size_t>(forwarder(static_cast<int>(p), myHost));
        return m.hostBack.data() + fanOffset[f] + word + (fanPlace[p] + r) * rowBytes;
      },
      expertOut, rowWeights, gradExpertOut, gradRowWeights);
  return Status::ok();
}

}  // namespace chimera
