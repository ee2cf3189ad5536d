// SPDX-License-Identifier: Apache-2.0
// Combine and the two backwards of the routed exchange: each one uneven all-to-all whose
// counts the dispatch's handle already holds (no count exchange; two once per host,
// src/routed/host_dispatch.cpp and host_combine.cpp), plus, when replicas split their tokens,
// one AllGather of the rows over the token axes.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "core/check.hpp"
#include "routed/exchange_blocks.hpp"
#include "routed/record_sums.hpp"
#include "routed/routed_impl.hpp"
#include "routed/row_math.hpp"

namespace chimera {

using detail::exchangeRecords;
using detail::kBlockWordBytes;
using detail::layOutBlocks;
using detail::RecordBlocks;
using detail::sumRecordRows;
using detail::sumReturnedRows;
using detail::wordsOf;

namespace {

// The opening of every call on a completed dispatch: InvalidArgument (returned) when the handle
// holds none or comes from another exchange; else this rank's verdict `local`, which the call carries into its
// exchange: `localError`, or InvalidArgument naming a null buffer that the handle's rows or tokens need.
Status openCall(const RoutedExchange::Impl& m, const RoutedDispatch::State& st, const char* call,
                const Status& localError, bool rowBufferNull, const char* rowBuffer, bool tokenBufferNull,
                const char* tokenBuffer, Status& local) {
  CHIMERA_RETURN_IF_ERROR(m.checkHandle(st, call));
  local = localError;
  if (local.isOk() && st.rows > 0 && rowBufferNull)
    local = Status::invalidArgument(fmt::format("{}: null {} with {} rows", call, rowBuffer, st.rows));
  if (local.isOk() && st.tokens > 0 && tokenBufferNull)
    local = Status::invalidArgument(fmt::format("{}: null {} with {} tokens", call, tokenBuffer, st.tokens));
  return Status::ok();
}

}  // namespace

Status RoutedExchange::Impl::gatherReplicas(void* data, std::int64_t tokens, std::size_t rowSize, const Status& local,
                                            RoutedStats& stats) {
  const std::int64_t block = (tokens + tokenSize - 1) / tokenSize;
  const auto range = [&](int member, std::int64_t& begin, std::int64_t& end) {
    begin = std::min(tokens, block * member);
    end = std::min(tokens, begin + block);
  };
  std::int64_t begin = 0, end = 0;
  range(tokenIndex, begin, end);
  const auto mine = static_cast<std::size_t>(end - begin) * rowSize;
  std::vector<std::byte> send(kBlockWordBytes + mine);
  detail::writeWord(send.data(), static_cast<std::size_t>(end - begin), tag, !local.isOk());
  // A failed rank's rows are not read (its word fails every member), and its buffer may be null.
  if (mine > 0 && local.isOk())
    std::memcpy(send.data() + kBlockWordBytes,
                static_cast<std::byte*>(data) + static_cast<std::size_t>(begin) * rowSize, mine);
  const auto n = static_cast<std::size_t>(tokenSize);
  std::vector<std::size_t> sendOffset(n, 0), sendBytes(n, send.size()), recvBytes(n), recvOffset, expected(n);
  for (std::size_t m = 0; m < n; ++m) {
    std::int64_t b = 0, e = 0;
    range(static_cast<int>(m), b, e);
    expected[m] = static_cast<std::size_t>(e - b);
    recvBytes[m] = kBlockWordBytes + expected[m] * rowSize;
  }
  std::vector<std::byte> recv;
  CHIMERA_RETURN_IF_ERROR(
      detail::exchangeBlocks(backend, tokenAxes, send, sendOffset, sendBytes, recvBytes, recv, recvOffset));
  stats.reduceBytes += (n - 1) * mine;
  stats.rounds += 1;
  CHIMERA_RETURN_IF_ERROR(detail::blockVerdict(wordsOf(recv, recvOffset), tokenRanks, expected, tag, local,
                                               "routed exchange: AllGather over the token axes"));
  for (std::size_t m = 0; m < n; ++m) {
    if (static_cast<int>(m) == tokenIndex || expected[m] == 0) continue;
    std::int64_t b = 0, e = 0;
    range(static_cast<int>(m), b, e);
    std::memcpy(static_cast<std::byte*>(data) + static_cast<std::size_t>(b) * rowSize,
                recv.data() + recvOffset[m] + kBlockWordBytes, expected[m] * rowSize);
  }
  return Status::ok();
}

Status RoutedExchange::combine(const void* expertOut, const void* rowWeights, const RoutedDispatch& handle, void* y,
                               RoutedStats* stats, const Status& localError) {
  Impl& m = *impl_;
  const RoutedDispatch::State& st = handle.state();
  CHIMERA_RETURN_IF_ERROR(m.checkRole("routed combine", true));
  Status local;
  CHIMERA_RETURN_IF_ERROR(openCall(m, st, "routed combine", localError, expertOut == nullptr, "expert output",
                                   y == nullptr, "output", local));
  RoutedStats own;
  if (m.hostDispatch) {
    Status verdict;
    CHIMERA_RETURN_IF_ERROR(
        m.returnHosts(st, expertOut, rowWeights, false, nullptr, y, nullptr, own, local, "routed combine", verdict));
    if (m.split) CHIMERA_RETURN_IF_ERROR(m.gatherReplicas(y, st.tokens, m.rowBytes, verdict, own));
    if (stats != nullptr) *stats = own;
    return verdict;
  }
  // Each received record goes back as one row: its slots' rows weighted and summed in slot order.
  RecordBlocks b = layOutBlocks(m, st.recvCount, st.sendCount, m.rowBytes);
  sumRecordRows(m, st, b.sendOffset, m.rowBytes, expertOut, rowWeights, local);
  CHIMERA_RETURN_IF_ERROR(exchangeRecords(m, b));
  m.count(own, st.recvCount, m.rowBytes, 0, kBlockWordBytes);
  Status verdict =
      detail::blockVerdict(wordsOf(m.back, b.recvOffset), m.groupRanks, st.sendCount, m.tag, local, "routed combine");
  // A token's rows from every destination, summed at the source in k order.
  if (verdict.isOk()) sumReturnedRows(m, st, b.recvOffset, m.rowBytes, y);
  if (m.split) CHIMERA_RETURN_IF_ERROR(m.gatherReplicas(y, st.tokens, m.rowBytes, verdict, own));
  if (stats != nullptr) *stats = own;
  return verdict;
}

Status RoutedExchange::combineBackward(const void* gradY, const void* expertOut, const void* rowWeights,
                                       const RoutedDispatch& handle, void* gradExpertOut, void* gradRowWeights,
                                       RoutedStats* stats, const Status& localError) {
  Impl& m = *impl_;
  const RoutedDispatch::State& st = handle.state();
  CHIMERA_RETURN_IF_ERROR(m.checkRole("routed combine backward", true));
  Status local;
  CHIMERA_RETURN_IF_ERROR(openCall(m, st, "routed combine backward", localError,
                                   gradExpertOut == nullptr || (gradRowWeights != nullptr && expertOut == nullptr),
                                   "expert output or its gradient", gradY == nullptr, "gradient of y", local));
  RoutedStats own;
  if (m.hostDispatch) {
    const Status verdict =
        m.combineBackwardHosts(gradY, expertOut, rowWeights, st, gradExpertOut, gradRowWeights, own, local);
    if (stats != nullptr) *stats = own;
    return verdict;
  }
  // dy of each sent record's token goes the dispatch's way, once per record.
  RecordBlocks b = layOutBlocks(m, st.sendCount, st.recvCount, m.rowBytes);
  for (std::size_t p = 0; p < st.sendCount.size(); ++p) {
    std::byte* block = m.sendScratch.data() + b.sendOffset[p];
    detail::writeWord(block, st.sendCount[p], m.tag, !local.isOk());
    if (!local.isOk()) continue;
    for (std::size_t r = 0; r < st.sendCount[p]; ++r) {
      const std::int64_t t = st.recordToken[st.sendFirst[p] + r];
      std::memcpy(block + kBlockWordBytes + r * m.rowBytes,
                  static_cast<const std::byte*>(gradY) + static_cast<std::size_t>(t) * m.rowBytes, m.rowBytes);
    }
  }
  CHIMERA_RETURN_IF_ERROR(exchangeRecords(m, b));
  m.count(own, st.sendCount, m.rowBytes, 0, kBlockWordBytes);
  if (stats != nullptr) *stats = own;
  CHIMERA_RETURN_IF_ERROR(detail::blockVerdict(wordsOf(m.back, b.recvOffset), m.groupRanks, st.recvCount, m.tag, local,
                                               "routed combine backward"));
  detail::combineGradients(
      m, st,
      [&](std::size_t p, std::size_t r) { return m.back.data() + b.recvOffset[p] + kBlockWordBytes + r * m.rowBytes; },
      expertOut, rowWeights, gradExpertOut, gradRowWeights);
  return Status::ok();
}

Status RoutedExchange::dispatchBackward(const void* gradRecvX, const void* gradRowWeights, const RoutedDispatch& handle,
                                        void* gradX, void* gradWeights, RoutedStats* stats, const Status& localError) {
  Impl& m = *impl_;
  const RoutedDispatch::State& st = handle.state();
  Status local;
  RoutedStats own;
  Status verdict;
  if (m.placement == TokenPlacement::Stage) {
    // Each side needs only its own buffers: the experts' rows' gradients, the source's grad x.
    CHIMERA_RETURN_IF_ERROR(m.checkRole("routed dispatch backward", false));
    const bool experts = m.role == RoutedRole::Experts;
    CHIMERA_RETURN_IF_ERROR(openCall(m, st, "routed dispatch backward", localError, experts && gradRecvX == nullptr,
                                     "gradient of the received rows", !experts && gradX == nullptr, "gradient of x",
                                     local));
    verdict = m.dispatchBackwardStage(gradRecvX, gradRowWeights, st, gradX, gradWeights, own, local);
  } else {
    CHIMERA_RETURN_IF_ERROR(openCall(m, st, "routed dispatch backward", localError, gradRecvX == nullptr,
                                     "gradient of the received rows", gradX == nullptr, "gradient of x", local));
    verdict = m.dispatchBackwardGroup(gradRecvX, gradRowWeights, st, gradX, gradWeights, own, local);
  }
  if (stats != nullptr) *stats = own;
  return verdict;
}

Status RoutedExchange::Impl::dispatchBackwardGroup(const void* gradRecvX, const void* gradRowWeights,
                                                   const RoutedDispatch::State& st, void* gradX, void* gradWeights,
                                                   RoutedStats& own, const Status& local) {
  Impl& m = *this;
  Status verdict;
  if (m.hostDispatch) {
    CHIMERA_RETURN_IF_ERROR(m.returnHosts(st, gradRecvX, nullptr, true, gradRowWeights, gradX, gradWeights, own, local,
                                          "routed dispatch backward", verdict));
  } else {
    // Each received record goes back as the sum of its rows' gradients, then its slots' weight gradients.
    const auto S = static_cast<std::size_t>(m.slots);
    const std::size_t record = m.rowBytes + S * m.weightBytes;
    RecordBlocks b = layOutBlocks(m, st.recvCount, st.sendCount, record);
    detail::sumRecordGradients(m, st, b.sendOffset, record, gradRecvX, gradRowWeights, local);
    CHIMERA_RETURN_IF_ERROR(exchangeRecords(m, b));
    m.count(own, st.recvCount, m.rowBytes, S * m.weightBytes, kBlockWordBytes);
    verdict = detail::blockVerdict(wordsOf(m.back, b.recvOffset), m.groupRanks, st.sendCount, m.tag, local,
                                   "routed dispatch backward");
    if (verdict.isOk()) detail::sumReturnedGradients(m, st, b.recvOffset, record, gradX, gradWeights);
  }
  if (m.split) {
    const int K = m.options.topK;
    CHIMERA_RETURN_IF_ERROR(m.gatherReplicas(gradX, st.tokens, m.rowBytes, verdict, own));
    if (gradWeights != nullptr)
      CHIMERA_RETURN_IF_ERROR(
          m.gatherReplicas(gradWeights, st.tokens, static_cast<std::size_t>(K) * m.weightBytes, verdict, own));
  }
  return verdict;
}

}  // namespace chimera
