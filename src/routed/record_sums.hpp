// SPDX-License-Identifier: Apache-2.0
// The record sums of the routed exchange (private): the block layout of the exchanges that
// reuse a dispatch's counts, the expert side's weighted sum of a record's rows, and the source
// side's sum of the rows returned for a token, shared by combine, the backwards and the
// pipeline-stage exchange.
#pragma once

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "routed/exchange_blocks.hpp"
#include "routed/routed_impl.hpp"
#include "routed/row_math.hpp"

namespace chimera::detail {

// Where the record `rec` this rank sent comes back in `received`: in the block of the peer it
// went to, at the same position, records `recordBytes` apart.
inline const std::byte* returnedRecord(const std::vector<std::byte>& received, const std::vector<std::size_t>& offset,
                                       const RoutedDispatch::State& st, std::size_t rec, std::size_t recordBytes) {
  const auto peer = static_cast<std::size_t>(std::upper_bound(st.sendFirst.begin(), st.sendFirst.end(), rec) -
                                             st.sendFirst.begin() - 1);
  return received.data() + offset[peer] + kBlockWordBytes + (rec - st.sendFirst[peer]) * recordBytes;
}

// The block layout of one exchange, both ways.
struct RecordBlocks {
  std::vector<std::size_t> sendOffset, sendBytes, recvBytes, recvOffset;
};

// Lays out `sendCounts` / `recvCounts` records of `perRecord` bytes and zeroes the send scratch.
inline RecordBlocks layOutBlocks(RoutedExchange::Impl& m, std::span<const std::size_t> sendCounts,
                                 std::span<const std::size_t> recvCounts, std::size_t perRecord) {
  RecordBlocks b;
  const std::size_t total = m.blocks(sendCounts, perRecord, kBlockWordBytes, b.sendOffset, b.sendBytes);
  m.blocks(recvCounts, perRecord, kBlockWordBytes, b.recvOffset, b.recvBytes);
  m.sendScratch.assign(total, std::byte{0});
  return b;
}

// Sends the send scratch's blocks over the group; the peers' blocks land in m.back.
inline Status exchangeRecords(RoutedExchange::Impl& m, RecordBlocks& b) {
  return exchangeBlocks(m.backend, m.group, m.sendScratch, b.sendOffset, b.sendBytes, b.recvBytes, m.back,
                        b.recvOffset);
}

// A record that carries nothing but its row.
struct RowOnly {
  void operator()(auto&&...) const {}
};

// Expert side: each source's block gets its word and, per record, the record's slot rows of `rows`
// times `weights` (null: 1) summed in slot order; `slotExtra(record, s, row)` adds the rest.
// Without `words`, the records of source p follow sendOffset[p] + kBlockWordBytes and no word
// is written (several sources' records share one block, whose word the caller writes).
template <typename SlotExtra = RowOnly>
void sumRecordRows(RoutedExchange::Impl& m, const RoutedDispatch::State& st, std::span<const std::size_t> sendOffset,
                   std::size_t recordBytes, const void* rows, const void* weights, const Status& local,
                   SlotExtra slotExtra = {}, bool words = true) {
  const auto S = static_cast<std::size_t>(m.slots);
  const std::int64_t H = m.options.hidden;
  withRowType(m.options.dtype, [&]<typename T>() {
    for (std::size_t p = 0; p < st.recvCount.size(); ++p) {
      std::byte* block = m.sendScratch.data() + sendOffset[p];
      if (words) writeWord(block, st.recvCount[p], m.tag, !local.isOk());
      if (!local.isOk()) continue;
      for (std::size_t r = 0; r < st.recvCount[p]; ++r) {
        std::byte* record = block + kBlockWordBytes + r * recordBytes;
        bool first = true;
        for (std::size_t s = 0; s < S; ++s) {
          const std::int64_t row = st.slotRow[(st.recvFirst[p] + r) * S + s];
          if (row < 0) continue;
          accumulateRow(reinterpret_cast<T*>(record), static_cast<const T*>(rows) + row * H,
                        readWeight(weights, m.options.weightDtype, row), H, first);
          first = false;
          slotExtra(record, s, row);
        }
      }
    }
  });
}

// Source side: out[t] = the rows returned in m.back for token t's records, summed in k order;
// `pairExtra(t, k, rec, record)` reads the rest of a pair's record (rec < 0, null: dropped).
template <typename PairExtra = RowOnly>
void sumReturnedRows(const RoutedExchange::Impl& m, const RoutedDispatch::State& st,
                     const std::vector<std::size_t>& recvOffset, std::size_t recordBytes, void* out,
                     PairExtra pairExtra = {}) {
  const int K = m.options.topK;
  const std::int64_t H = m.options.hidden;
  withRowType(m.options.dtype, [&]<typename T>() {
    for (std::int64_t t = st.ownBegin; t < st.ownEnd; ++t) {
      T* sum = static_cast<T*>(out) + t * H;
      std::memset(sum, 0, m.rowBytes);
      for (int k = 0; k < K; ++k) {
        const auto pair = static_cast<std::size_t>((t - st.ownBegin) * K + k);
        const std::int64_t rec = st.pairRecord[pair];
        const std::byte* record =
            rec < 0 ? nullptr : returnedRecord(m.back, recvOffset, st, static_cast<std::size_t>(rec), recordBytes);
        if (record != nullptr && st.pairFirst[pair] != 0) addRow(sum, reinterpret_cast<const T*>(record), H);
        pairExtra(t, k, rec, record);
      }
    }
  });
}

// Expert side of the dispatch backward: per received record, the sum of its rows' gradients
// (`gradRecvX` [rows, H]), then its slots' weight gradients (`gradRowWeights` [rows], or null:
// zero), records `recordBytes` apart in the send scratch at `sendOffset` (`words`: as sumRecordRows).
inline void sumRecordGradients(RoutedExchange::Impl& m, const RoutedDispatch::State& st,
                               std::span<const std::size_t> sendOffset, std::size_t recordBytes, const void* gradRecvX,
                               const void* gradRowWeights, const Status& local, bool words = true) {
  sumRecordRows(
      m, st, sendOffset, recordBytes, gradRecvX, nullptr, local,
      [&](std::byte* out, std::size_t s, std::int64_t row) {
        std::byte* value = out + m.rowBytes + s * m.weightBytes;
        if (gradRowWeights == nullptr) {
          std::memset(value, 0, m.weightBytes);
          return;
        }
        std::memcpy(value,
                    static_cast<const std::byte*>(gradRowWeights) + static_cast<std::size_t>(row) * m.weightBytes,
                    m.weightBytes);
      },
      words);
}

// Expert side of the combine backward: for received record r of source p, dy of its token at
// `dyOf(p, r)`; per slot row, gradExpertOut[row] = w * dy and (when not null) gradRowWeights[row]
// = <dy, expertOut[row]>.
template <typename DyOf>
void combineGradients(const RoutedExchange::Impl& m, const RoutedDispatch::State& st, DyOf dyOf, const void* expertOut,
                      const void* rowWeights, void* gradExpertOut, void* gradRowWeights) {
  const auto S = static_cast<std::size_t>(m.slots);
  const std::int64_t H = m.options.hidden;
  withRowType(m.options.dtype, [&]<typename T>() {
    for (std::size_t p = 0; p < st.recvCount.size(); ++p) {
      for (std::size_t r = 0; r < st.recvCount[p]; ++r) {
        const T* dy = reinterpret_cast<const T*>(dyOf(p, r));
        for (std::size_t s = 0; s < S; ++s) {
          const std::int64_t row = st.slotRow[(st.recvFirst[p] + r) * S + s];
          if (row < 0) continue;
          accumulateRow(static_cast<T*>(gradExpertOut) + row * H, dy,
                        readWeight(rowWeights, m.options.weightDtype, row), H, true);
          if (gradRowWeights != nullptr) {
            writeWeight(gradRowWeights, m.options.weightDtype, row,
                        dotRow(dy, static_cast<const T*>(expertOut) + row * H, H));
          }
        }
      }
    }
  });
}

// Source side of the dispatch backward: gradX[t] = the row gradients returned for token t's
// records (`recordBytes` apart in m.back), summed in k order; gradWeights[t, k] (when not
// null) the weight gradient of the record's slot that carried k, 0 when dropped.
inline void sumReturnedGradients(const RoutedExchange::Impl& m, const RoutedDispatch::State& st,
                                 const std::vector<std::size_t>& recvOffset, std::size_t recordBytes, void* gradX,
                                 void* gradWeights) {
  const int K = m.options.topK;
  const auto S = static_cast<std::size_t>(m.slots);
  sumReturnedRows(
      m, st, recvOffset, recordBytes, gradX, [&](std::int64_t t, int k, std::int64_t rec, const std::byte* in) {
        if (gradWeights == nullptr) return;
        writeWeight(gradWeights, m.options.weightDtype, t * K + k, 0.0);
        if (rec < 0) return;
        for (std::size_t s = 0; s < S; ++s) {
          if (st.recordK[static_cast<std::size_t>(rec) * S + s] != k) continue;
          std::memcpy(static_cast<std::byte*>(gradWeights) + static_cast<std::size_t>(t * K + k) * m.weightBytes,
                      in + m.rowBytes + s * m.weightBytes, m.weightBytes);
        }
      });
}

}  // namespace chimera::detail
