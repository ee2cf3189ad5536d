// SPDX-License-Identifier: Apache-2.0
// The routed dispatch: the routing turned into records per destination rank, one count
// exchange, one uneven all-to-all of records, and the expansion of received records into rows
// grouped by local expert.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/stream_copy.hpp"
#include "core/check.hpp"
#include "routed/exchange_blocks.hpp"
#include "routed/routed_impl.hpp"
#include "routed/row_math.hpp"

namespace chimera {

using detail::kBlockWordBytes;

std::vector<std::byte>& spareReceived() {
  thread_local std::vector<std::byte> spare;
  return spare;
}

Status RoutedExchange::Impl::ownRange(std::int64_t tokens, std::int64_t& begin, std::int64_t& end) const {
  begin = 0;
  end = tokens;
  if (!split) return Status::ok();
  const std::int64_t block = (tokens + tokenSize - 1) / tokenSize;
  begin = std::min(tokens, block * tokenIndex);
  end = std::min(tokens, begin + block);
  return Status::ok();
}

std::size_t RoutedExchange::Impl::blocks(std::span<const std::size_t> counts, std::size_t perRecord,
                                         std::size_t wordBytes, std::vector<std::size_t>& offset,
                                         std::vector<std::size_t>& bytes) const {
  bytes.assign(counts.size(), 0);
  for (std::size_t p = 0; p < counts.size(); ++p) bytes[p] = wordBytes + counts[p] * perRecord;
  return detail::blockOffsets(bytes, wordBytes, offset);
}

bool RoutedExchange::Impl::onOtherHost(int rank) const {
  const auto host = [&](int r) {
    return static_cast<std::size_t>(r) < worldHosts.size() ? worldHosts[static_cast<std::size_t>(r)] : 0;
  };
  return host(rank) != host(backend.rank());
}

void RoutedExchange::Impl::countBlock(RoutedStats& stats, std::size_t member, std::size_t records,
                                      std::size_t perRecord, std::size_t perHeader, std::size_t wordBytes) const {
  const std::vector<int>& members = role == RoutedRole::Source ? stageRanks : groupRanks;
  const int to = members[member];
  if (to == backend.rank()) return;
  stats.payloadBytes += records * perRecord;
  stats.headerBytes += records * perHeader + wordBytes;
  if (onOtherHost(to)) stats.crossHostBytes += records * (perRecord + perHeader) + wordBytes;
}

void RoutedExchange::Impl::count(RoutedStats& stats, std::span<const std::size_t> counts, std::size_t perRecord,
                                 std::size_t perHeader, std::size_t wordBytes) const {
  for (std::size_t p = 0; p < counts.size(); ++p) countBlock(stats, p, counts[p], perRecord, perHeader, wordBytes);
  stats.rounds += 1;
}

Status RoutedExchange::Impl::checkSendScratch(std::span<const std::size_t> records, std::size_t perRecord) const {
  // Each block may hold 1/R of the limit, so that no rank receives more than the limit either:
  // the receive side is then known to fit before any data moves.
  const std::size_t perBlock = options.scratchLimitBytes / static_cast<std::size_t>(ranks);
  const std::vector<int>& members = role == RoutedRole::Source ? stageRanks : groupRanks;
  for (std::size_t p = 0; p < records.size(); ++p) {
    const std::size_t bytes = kBlockWordBytes + records[p] * perRecord;
    CHIMERA_CHECK_ARG(bytes <= perBlock,
                      "routed dispatch: rank {} would send {} bytes to rank {}, over the limit of {} bytes per peer "
                      "(scratchLimitBytes {} / {} ranks; RoutedExchangeOptions::scratchLimitBytes, "
                      "CHIMERA_ROUTED_SCRATCH_LIMIT_BYTES)",
                      backend.rank(), bytes, members[p], perBlock, options.scratchLimitBytes, ranks);
  }
  return Status::ok();
}

Status RoutedExchange::Impl::agreeReplicas(std::int64_t tokens, Status& local, int& faultRank, RoutedStats& stats) {
  // MIN of {the rank if its own check failed, else kNoFault; T; -T}: the lowest rank at fault,
  // and the smallest and largest T.
  constexpr std::int64_t kNoFault = std::numeric_limits<std::int64_t>::max();
  std::int64_t words[3] = {local.isOk() ? kNoFault : backend.rank(), tokens, -tokens};
  CHIMERA_RETURN_IF_ERROR(backend.allReduce(words, words, 3, DataType::I64, ReduceOp::Min, tokenAxes));
  stats.countBytes +=
      2 * static_cast<std::uint64_t>(tokenSize - 1) * sizeof(words) / static_cast<std::uint64_t>(tokenSize);
  stats.rounds += 1;
  if (!local.isOk()) return Status::ok();
  if (words[0] != kNoFault) {
    faultRank = static_cast<int>(words[0]);
    local = Status::mismatch(fmt::format(
        "routed dispatch: rank {} reported an error in its routing or arguments (see its message); it is a replica "
        "of this rank's tokens (token layout '{}', ranks {})",
        faultRank, options.tokenLayout, fmt::join(tokenRanks, ", ")));
  } else if (words[1] != -words[2]) {
    local = Status::mismatch(
        fmt::format("routed dispatch: the replicas of this rank's tokens (token layout '{}', ranks {}) pass from {} to "
                    "{} tokens; each must pass the same T",
                    options.tokenLayout, fmt::join(tokenRanks, ", "), words[1], -words[2]));
  }
  return Status::ok();
}

Status RoutedExchange::Impl::reducePartial(const void* x, std::int64_t tokens, const std::byte*& rows,
                                           std::int64_t& firstRow, RoutedStats& stats) {
  const auto H = static_cast<std::size_t>(options.hidden);
  const auto T = static_cast<std::size_t>(tokens);
  const auto n = static_cast<std::size_t>(tokenSize);
  firstRow = 0;
  if (!split) {  // AllReduce, then every replica dispatches every token
    rowScratch.resize(std::max<std::size_t>(1, T * rowBytes));
    CHIMERA_RETURN_IF_ERROR(backend.allReduce(x, rowScratch.data(), T * H, options.dtype, ReduceOp::Sum, tokenAxes));
    stats.reduceBytes += 2 * (n - 1) * T * rowBytes / n;
    rows = rowScratch.data();
  } else {
    // ReduceScatter of blocks of ceil(T / tp) rows, straight from x when they fill it; else
    // from a copy whose last rows are padded with zeros.
    const std::size_t block = (T + n - 1) / n;
    const std::size_t stride = block * rowBytes;
    const bool padded = block * n != T;
    rowScratch.resize(std::max<std::size_t>(1, (padded ? n + 1 : 1) * stride));
    const void* send = x;
    std::byte* mine = rowScratch.data();
    if (padded) {
      std::memcpy(rowScratch.data(), x, T * rowBytes);
      std::memset(rowScratch.data() + T * rowBytes, 0, n * stride - T * rowBytes);
      send = rowScratch.data();
      mine = rowScratch.data() + n * stride;
    }
    CHIMERA_RETURN_IF_ERROR(backend.reduceScatter(send, mine, block * H, options.dtype, ReduceOp::Sum, tokenAxes));
    stats.reduceBytes += (n - 1) * stride;
    rows = mine;
    firstRow = static_cast<std::int64_t>(block) * tokenIndex;
  }
  stats.rounds += 1;
  return Status::ok();
}

Status RoutedExchange::Impl::checkHandle(const RoutedDispatch::State& st, const char* call) const {
  // Without this exchange's dispatch the rank knows no sizes to take part in the call with: the
  // failure is announced to every rank (Backend::announceFault), so that peers waiting in it give up.
  if (st.exchange != 0 && st.exchange != serial)
    return backend.announceFault(Status::invalidArgument(
        fmt::format("{}: the handle was dispatched by another routed exchange (#{}, this one is #{}); pass each "
                    "handle to the exchange that made it",
                    call, st.exchange, serial)));
  if (!st.complete)
    return backend.announceFault(
        Status::invalidArgument(fmt::format("{}: the handle holds no completed dispatch", call)));
  return Status::ok();
}

Status RoutedExchange::Impl::checkRouting(const std::int64_t* topkIdx, std::int64_t begin, std::int64_t end) const {
  const int K = options.topK;
  const std::int64_t E = options.numExperts;
  for (std::int64_t t = begin; t < end; ++t) {
    const std::int64_t* ids = topkIdx + t * K;
    for (int k = 0; k < K; ++k) {
      CHIMERA_CHECK_ARG(ids[k] >= 0 && ids[k] < E, "routed dispatch: token {} routes to expert {}, outside 0..{}", t,
                        ids[k], E - 1);
      for (int j = 0; j < k; ++j) {
        CHIMERA_CHECK_ARG(ids[j] != ids[k],
                          "routed dispatch: token {} routes to expert {} twice (top-k ids must be "
                          "distinct per token)",
                          t, ids[k]);
      }
    }
  }
  return Status::ok();
}

Status RoutedExchange::Impl::buildSendTable(const std::int64_t* topkIdx, RoutedDispatch::State& st) const {
  const int K = options.topK;
  const std::int64_t own = st.ownEnd - st.ownBegin;
  const auto S = static_cast<std::size_t>(slots);
  const auto L = static_cast<std::size_t>(localExperts);
  st.sendCount.assign(static_cast<std::size_t>(ranks), 0);
  st.sendExpertCount.assign(idsByOrder ? static_cast<std::size_t>(ranks) * L : 0, 0);
  st.pairRecord.assign(static_cast<std::size_t>(own * K), -1);
  st.pairFirst.assign(static_cast<std::size_t>(own * K), 0);
  // Pass 1: count the records per destination.
  CHIMERA_RETURN_IF_ERROR(checkRouting(topkIdx, st.ownBegin, st.ownEnd));
  std::vector<std::int64_t> dest(static_cast<std::size_t>(own * K));
  for (std::int64_t i = 0; i < own; ++i) {
    const std::int64_t* ids = topkIdx + (st.ownBegin + i) * K;
    for (int k = 0; k < K; ++k) dest[static_cast<std::size_t>(i * K + k)] = ids[k] / localExperts;
    for (int k = 0; k < K; ++k) {
      const std::int64_t d = dest[static_cast<std::size_t>(i * K + k)];
      bool opens = true;
      for (int j = 0; j < k && oncePerRank; ++j) opens = opens && dest[static_cast<std::size_t>(i * K + j)] != d;
      if (opens) ++st.sendCount[static_cast<std::size_t>(d)];
      if (opens && idsByOrder)
        ++st.sendExpertCount[static_cast<std::size_t>(d) * L + static_cast<std::size_t>(ids[k]) % L];
    }
  }
  // Capacity: at most `capacity` records per destination; the rest are dropped (or an error).
  std::vector<std::size_t> kept = st.sendCount;
  if (options.capacity > 0) {
    for (std::size_t p = 0; p < kept.size(); ++p) {
      const auto cap = static_cast<std::size_t>(options.capacity);
      if (kept[p] <= cap) continue;
      CHIMERA_CHECK_ARG(options.overflow == CapacityOverflow::Drop,
                        "routed dispatch: {} tokens for rank {} exceed the capacity of {} per rank pair "
                        "(CapacityOverflow::Error)",
                        kept[p], groupRanks[p], cap);
      st.stats.droppedTokens += kept[p] - cap;
      kept[p] = cap;
    }
  }
  st.sendFirst.assign(static_cast<std::size_t>(ranks), 0);
  std::size_t total = 0;
  for (std::size_t p = 0; p < kept.size(); ++p) {
    st.sendFirst[p] = total;
    total += kept[p];
  }
  st.sendCount = kept;
  st.recordToken.assign(total, 0);
  st.recordK.assign(total * S, -1);
  // Pass 2: fill the records in token order (then k order) per destination, and in local expert
  // order first where that order implies the ids: one bin per destination, or per (destination,
  // local expert).
  const std::size_t bins = idsByOrder ? L : 1;
  std::vector<std::size_t> next(st.sendCount.size() * bins), end(next.size());
  for (std::size_t p = 0; p < st.sendCount.size(); ++p) {
    std::size_t at = st.sendFirst[p];
    for (std::size_t b = 0; b < bins; ++b) {
      next[p * bins + b] = at;
      at += idsByOrder ? st.sendExpertCount[p * L + b] : st.sendCount[p];
      end[p * bins + b] = at;
    }
  }
  std::vector<std::int64_t> open(static_cast<std::size_t>(ranks), -1);  // this token's record per destination
  for (std::int64_t i = 0; i < own; ++i) {
    std::fill(open.begin(), open.end(), -1);
    for (int k = 0; k < K; ++k) {
      const auto d = static_cast<std::size_t>(dest[static_cast<std::size_t>(i * K + k)]);
      const std::size_t bin =
          d * bins + (idsByOrder ? static_cast<std::size_t>(topkIdx[(st.ownBegin + i) * K + k]) % L : 0);
      std::int64_t record = oncePerRank ? open[d] : -1;
      bool first = false;
      if (record < 0) {
        if (next[bin] == end[bin]) continue;  // dropped by capacity
        record = static_cast<std::int64_t>(next[bin]++);
        open[d] = record;
        st.recordToken[static_cast<std::size_t>(record)] = st.ownBegin + i;
        first = true;
      }
      std::int32_t* recordSlots = st.recordK.data() + static_cast<std::size_t>(record) * S;
      std::size_t s = 0;
      while (recordSlots[s] >= 0) ++s;
      recordSlots[s] = k;
      st.pairRecord[static_cast<std::size_t>(i * K + k)] = record;
      st.pairFirst[static_cast<std::size_t>(i * K + k)] = first ? 1 : 0;
    }
  }
  return Status::ok();
}

Status RoutedExchange::Impl::receivedTable(RoutedDispatch::State& st) const {
  const auto S = static_cast<std::size_t>(slots);
  std::size_t total = 0;
  st.recvFirst.assign(static_cast<std::size_t>(ranks), 0);
  for (std::size_t p = 0; p < st.recvCount.size(); ++p) {
    st.recvFirst[p] = total;
    total += st.recvCount[p];
  }
  st.recvLocal.assign(total * S, -1);
  st.slotRow.assign(total * S, -1);
  st.tokensPerExpert.assign(static_cast<std::size_t>(localExperts), 0);
  const std::size_t record = headerBytes + rowBytes;
  const auto L = static_cast<std::size_t>(localExperts);
  for (std::size_t p = 0; p < st.recvCount.size(); ++p) {
    const std::byte* block = st.received.data() + st.receivedOffset[p] + st.wordBytes;
    std::int32_t implied = 0;  // the local expert of a record without ids (0 with one expert per rank)
    std::size_t expertEnd = idsByOrder ? st.recvExpertCount[p * L] : 0;
    for (std::size_t r = 0; r < st.recvCount[p]; ++r) {
      const std::byte* header = block + r * record;
      while (idsByOrder && r >= expertEnd) expertEnd += st.recvExpertCount[p * L + static_cast<std::size_t>(++implied)];
      bool any = false;
      for (std::size_t s = 0; s < S; ++s) {
        std::int32_t local = implied;
        if (idBytes > 0) std::memcpy(&local, header + s * slotBytes(), idBytes);
        if (local < 0) continue;
        if (local >= localExperts)
          return Status::mismatch(fmt::format("routed dispatch: rank {} sent local expert {} of {} (corrupt records)",
                                              groupRanks[p], local, localExperts));
        any = true;
        st.recvLocal[(st.recvFirst[p] + r) * S + s] = local;
        ++st.tokensPerExpert[static_cast<std::size_t>(local)];
      }
      if (!any) return Status::mismatch(fmt::format("routed dispatch: rank {} sent an empty record", groupRanks[p]));
    }
  }
  // Rows grouped by local expert; within one, in (source, record) order.
  std::vector<std::int64_t> next(static_cast<std::size_t>(localExperts), 0);
  std::int64_t rows = 0;
  for (std::size_t e = 0; e < next.size(); ++e) {
    next[e] = rows;
    rows += st.tokensPerExpert[e];
  }
  st.rows = rows;
  for (std::size_t i = 0; i < st.recvLocal.size(); ++i) {
    if (st.recvLocal[i] >= 0) st.slotRow[i] = next[static_cast<std::size_t>(st.recvLocal[i])]++;
  }
  return Status::ok();
}

void RoutedExchange::Impl::packRecord(const RoutedDispatch::State& st, std::size_t rec, const std::int64_t* topkIdx,
                                      const void* topkWeights, const std::byte* rows, std::int64_t firstRow,
                                      std::byte* out) const {
  const auto S = static_cast<std::size_t>(slots);
  const int K = options.topK;
  const std::int64_t t = st.recordToken[rec];
  for (std::size_t s = 0; s < S; ++s) {
    const std::int32_t k = st.recordK[rec * S + s];
    if (k < 0) continue;
    const auto expert = static_cast<std::int32_t>(topkIdx[t * K + k] % localExperts);
    std::byte* slot = out + s * slotBytes();
    if (idBytes > 0) std::memcpy(slot, &expert, idBytes);
    std::memcpy(slot + idBytes,
                static_cast<const std::byte*>(topkWeights) + static_cast<std::size_t>(t * K + k) * weightBytes,
                weightBytes);
  }
  std::memcpy(out + headerBytes, rows + static_cast<std::size_t>(t - firstRow) * rowBytes, rowBytes);
}

void RoutedExchange::Impl::packRecords(const RoutedDispatch::State& st, const std::int64_t* topkIdx,
                                       const void* topkWeights, const std::byte* rows, std::int64_t firstRow,
                                       std::span<const std::size_t> sendOffset, bool failed) {
  const std::size_t record = headerBytes + rowBytes;
  for (std::size_t p = 0; p < st.sendCount.size(); ++p) {
    std::byte* block = sendScratch.data() + sendOffset[p];
    if (st.wordBytes > 0) detail::writeWord(block, st.sendCount[p], tag, failed, st.faultRank);
    for (std::size_t r = 0; r < st.sendCount[p]; ++r) {
      packRecord(st, st.sendFirst[p] + r, topkIdx, topkWeights, rows, firstRow, block + st.wordBytes + r * record);
    }
  }
}

Status RoutedExchange::dispatch(const void* x, const std::int64_t* topkIdx, const void* topkWeights,
                                std::int64_t tokens, RoutedDispatch& handle, const Status& localError) {
  Impl& m = *impl_;
  handle = RoutedDispatch();
  RoutedDispatch::State& st = handle.state();
  st.exchange = m.serial;
  st.tokens = tokens;
  st.slots = m.slots;
  Status local = localError;
  if (local.isOk() && (tokens < 0 || tokens > detail::kMaxCountRecords))
    local = Status::invalidArgument(
        fmt::format("routed dispatch: {} tokens, outside 0..{}", tokens, detail::kMaxCountRecords));
  if (local.isOk() && tokens > 0 && (x == nullptr || topkIdx == nullptr || topkWeights == nullptr))
    local = Status::invalidArgument("routed dispatch: null x, top-k ids or weights with tokens > 0");
  if (m.placement == TokenPlacement::Stage) return m.dispatchStage(x, topkIdx, topkWeights, tokens, st, local);
  return m.dispatchGroup(x, topkIdx, topkWeights, tokens, st, local);
}

Status RoutedExchange::Impl::dispatchGroup(const void* x, const std::int64_t* topkIdx, const void* topkWeights,
                                           std::int64_t tokens, RoutedDispatch::State& st, Status local) {
  Impl& m = *this;
  st.tokens = tokens;
  st.slots = m.slots;
  // Replicas of the tokens (tp=R, tp=P) agree first, before any row moves: a replica that
  // failed, or replicas that pass different T, fail the dispatch on every replica, and the
  // count exchange tells the other ranks. Partial tokens are then reduced over the token axes.
  // Every replica checks the whole routing before they agree, not only the block it dispatches:
  // an id out of range on any replica then fails all of them (and, through the count exchange,
  // their peers), instead of the ranks of one replica only.
  const std::byte* rows = static_cast<const std::byte*>(x);
  std::int64_t firstRow = 0;
  if ((m.placement == TokenPlacement::Replicated || m.placement == TokenPlacement::Partial) && m.tokenSize > 1) {
    if (local.isOk() && tokens > 0) local = m.checkRouting(topkIdx, 0, tokens);
    CHIMERA_RETURN_IF_ERROR(m.agreeReplicas(tokens, local, st.faultRank, st.stats));
  }
  if (m.placement == TokenPlacement::Partial && local.isOk())
    CHIMERA_RETURN_IF_ERROR(m.reducePartial(x, tokens, rows, firstRow, st.stats));
  if (!local.isOk()) tokens = 0;
  st.tokens = tokens;
  (void)m.ownRange(tokens, st.ownBegin, st.ownEnd);
  if (local.isOk()) local = m.buildSendTable(topkIdx, st);
  // The count exchange (dropless), or fixed capacity blocks.
  const std::size_t record = m.headerBytes + m.rowBytes;
  if (local.isOk() && m.options.capacity == 0) local = m.checkSendScratch(st.sendCount, record);
  if (!local.isOk()) {
    st.sendCount.assign(static_cast<std::size_t>(m.ranks), 0);
    st.sendFirst.assign(static_cast<std::size_t>(m.ranks), 0);
    st.sendExpertCount.assign(m.idsByOrder ? static_cast<std::size_t>(m.ranks * m.localExperts) : 0, 0);
  }
  if (m.hostDispatch) {
    CHIMERA_RETURN_IF_ERROR(m.dispatchHosts(st, topkIdx, topkWeights, rows, firstRow, local));
    st.complete = true;
    return Status::ok();
  }
  std::vector<std::size_t> recvCount;
  if (m.options.capacity == 0) {
    // One count per peer, or per (peer, local expert) where the records' order implies their
    // experts. No count exceeds kMaxCountRecords: a dispatch of more tokens failed above.
    const std::vector<std::size_t>& counts = m.idsByOrder ? st.sendExpertCount : st.sendCount;
    const std::size_t perPeer = counts.size() / static_cast<std::size_t>(m.ranks);
    std::vector<std::int32_t> words(counts.size()), theirs(words.size());
    std::vector<int> from(words.size());
    for (std::size_t i = 0; i < words.size(); ++i) {
      words[i] = detail::countWord(static_cast<std::int64_t>(counts[i]), m.tag, !local.isOk(), st.faultRank);
      from[i] = m.groupRanks[i / perPeer];
    }
    CHIMERA_RETURN_IF_ERROR(m.backend.exchangeCounts(words, theirs, m.group));
    st.stats.countBytes += static_cast<std::uint64_t>(m.ranks - 1) * perPeer * sizeof(std::int32_t);
    for (std::size_t p = 0; p < m.hostOf.size(); ++p) {
      if (m.hostOf[p] != m.hostOf[static_cast<std::size_t>(m.index)])
        st.stats.crossHostBytes += perPeer * sizeof(std::int32_t);
    }
    st.stats.rounds += 1;
    CHIMERA_RETURN_IF_ERROR(detail::countVerdict(theirs, from, m.tag, local, recvCount));
    if (m.idsByOrder) {
      st.recvExpertCount = recvCount;
      recvCount.assign(static_cast<std::size_t>(m.ranks), 0);
      for (std::size_t i = 0; i < theirs.size(); ++i) recvCount[i / perPeer] += st.recvExpertCount[i];
    }
  } else {
    recvCount.assign(static_cast<std::size_t>(m.ranks), static_cast<std::size_t>(m.options.capacity));
  }

  // Records: [local expert id (int32, none with one expert per rank), weight] x slots, then the
  // row; one block per destination, after a word in capacity mode (its record count).
  st.wordBytes = m.options.capacity == 0 ? 0 : kBlockWordBytes;
  std::vector<std::size_t> sendOffset, sendBytes, recvBytes, unused;
  const std::vector<std::size_t> sendSlots =
      m.options.capacity == 0 ? st.sendCount : recvCount;  // capacity mode sends full blocks
  const std::size_t sendTotal = m.blocks(sendSlots, record, st.wordBytes, sendOffset, sendBytes);
  m.blocks(recvCount, record, st.wordBytes, unused, recvBytes);
  m.sendScratch.assign(sendTotal, std::byte{0xff});  // empty slots read as local expert -1
  m.packRecords(st, topkIdx, topkWeights, rows, firstRow, sendOffset, !local.isOk());
  st.received.swap(spareReceived());
  CHIMERA_RETURN_IF_ERROR(detail::exchangeBlocks(m.backend, m.group, m.sendScratch, sendOffset, sendBytes, recvBytes,
                                                 st.received, st.receivedOffset, st.wordBytes));
  m.count(st.stats, st.sendCount, m.rowBytes, m.headerBytes, st.wordBytes);
  if (m.options.capacity > 0) {  // the blocks' words tell the records each holds
    for (std::size_t p = 0; p < st.sendCount.size(); ++p) {
      if (static_cast<int>(p) != m.index) st.stats.paddingBytes += (recvCount[p] - st.sendCount[p]) * record;
    }
    const std::vector<std::int32_t> words = detail::wordsOf(st.received, st.receivedOffset);
    CHIMERA_RETURN_IF_ERROR(detail::blockVerdict(words, m.groupRanks, {}, m.tag, local, "routed dispatch"));
    for (std::size_t p = 0; p < words.size(); ++p) {
      recvCount[p] = static_cast<std::uint32_t>(words[p]) & 0xffffffu;
      CHIMERA_CHECK_ARG(recvCount[p] <= static_cast<std::size_t>(m.options.capacity),
                        "routed dispatch: rank {} sent {} records, over the capacity {}", m.groupRanks[p], recvCount[p],
                        m.options.capacity);
    }
  }
  st.recvCount = recvCount;
  CHIMERA_RETURN_IF_ERROR(m.receivedTable(st));
  st.complete = true;
  return Status::ok();
}

Status RoutedExchange::receive(RoutedDispatch& handle, void* recvX, std::int64_t* recvExpert, void* recvWeight) const {
  const Impl& m = *impl_;
  CHIMERA_RETURN_IF_ERROR(m.checkRole("routed receive", true));
  RoutedDispatch::State& st = handle.state();
  CHIMERA_RETURN_IF_ERROR(m.checkHandle(st, "routed receive"));
  CHIMERA_CHECK_ARG(!st.received.empty() || st.rows == 0, "routed receive: the handle's rows were received already");
  const auto S = static_cast<std::size_t>(m.slots);
  const std::size_t record = m.headerBytes + m.rowBytes;
  // A received row expands to one row per local expert it carries: past the caches, the rows
  // are streamed (written once, read by the experts later).
  const bool stream = static_cast<std::size_t>(st.rows) * m.rowBytes >= detail::kStreamCopyMinBytes;
  for (std::size_t p = 0; p < st.recvCount.size(); ++p) {
    const std::byte* block = st.received.data() + st.receivedOffset[p] + st.wordBytes;
    for (std::size_t r = 0; r < st.recvCount[p]; ++r) {
      const std::byte* in = block + r * record;
      for (std::size_t s = 0; s < S; ++s) {
        const std::int64_t row = st.slotRow[(st.recvFirst[p] + r) * S + s];
        if (row < 0) continue;
        const auto u = static_cast<std::size_t>(row);
        if (recvX != nullptr) {
          std::byte* out = static_cast<std::byte*>(recvX) + u * m.rowBytes;
          if (stream) {
            detail::streamCopy(out, in + m.headerBytes, m.rowBytes);
          } else {
            std::memcpy(out, in + m.headerBytes, m.rowBytes);
          }
        }
        if (recvExpert != nullptr)
          recvExpert[u] =
              static_cast<std::int64_t>(m.index) * m.localExperts + st.recvLocal[(st.recvFirst[p] + r) * S + s];
        if (recvWeight != nullptr)
          std::memcpy(static_cast<std::byte*>(recvWeight) + u * m.weightBytes, in + s * m.slotBytes() + m.idBytes,
                      m.weightBytes);
      }
    }
  }
  if (stream) detail::streamFence();
  spareReceived().swap(st.received);
  st.received.clear();
  st.received.shrink_to_fit();
  return Status::ok();
}

}  // namespace chimera
