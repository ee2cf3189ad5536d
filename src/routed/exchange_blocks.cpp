// SPDX-License-Identifier: Apache-2.0
// Block words and verdicts of the routed exchange's rounds.
#include "routed/exchange_blocks.hpp"

#include <fmt/format.h>

#include <cstring>

#include "core/check.hpp"

namespace chimera::detail {

std::int32_t countWord(std::int64_t count, std::uint32_t tag, bool failed, int faultRank) {
  if (failed && faultRank >= 0) return kCountError - 1 - faultRank;
  if (failed || count < 0 || count > kMaxCountRecords) return kCountError;
  return static_cast<std::int32_t>(((tag & 0x7fu) << 24) | static_cast<std::uint32_t>(count));
}

void writeWord(std::byte* block, std::size_t count, std::uint32_t tag, bool failed, int faultRank) {
  const std::int32_t word = countWord(static_cast<std::int64_t>(count), tag, failed, faultRank);
  std::memcpy(block, &word, sizeof(word));
}

namespace {

// Mismatch naming the lowest rank at fault among the failed members' words (ok when none
// failed): a member's own rank for kCountError, else the rank its word names.
Status faultVerdict(std::span<const std::int32_t> words, std::span<const int> ranks, std::string_view what,
                    std::string_view where) {
  int fault = -1;
  int via = -1;
  for (std::size_t p = 0; p < words.size(); ++p) {
    if (words[p] >= 0) continue;
    const int rank = words[p] == kCountError ? ranks[p] : kCountError - 1 - words[p];
    if (fault >= 0 && rank >= fault) continue;
    fault = rank;
    via = ranks[p];
  }
  if (fault < 0) return Status::ok();
  if (via == fault)
    return Status::mismatch(fmt::format("{}: rank {} reported an error {} (see its message)", what, fault, where));
  return Status::mismatch(
      fmt::format("{}: rank {} reported an error {} (see its message), passed on by rank {}, a "
                  "replica of its tokens",
                  what, fault, where, via));
}

}  // namespace

std::size_t blockOffsets(std::span<const std::size_t> bytes, std::size_t wordBytes, std::vector<std::size_t>& offset) {
  offset.assign(bytes.size(), 0);
  std::size_t end = 0;
  for (std::size_t p = 0; p < bytes.size(); ++p) {
    offset[p] = (end + wordBytes + 7) / 8 * 8 - wordBytes;
    end = offset[p] + bytes[p];
  }
  return end;
}

Status exchangeBlocks(Backend& backend, AxisSet axes, std::span<const std::byte> send,
                      std::span<const std::size_t> sendOffset, std::span<const std::size_t> sendBytes,
                      std::span<const std::size_t> recvBytes, std::vector<std::byte>& recv,
                      std::vector<std::size_t>& recvOffset, std::size_t wordBytes) {
  recv.resize(blockOffsets(recvBytes, wordBytes, recvOffset));
  return backend.allToAllV(send.data(), sendBytes, sendOffset, recv.data(), recvBytes, recvOffset, DataType::U8, axes);
}

std::vector<std::int32_t> wordsOf(std::span<const std::byte> received, std::span<const std::size_t> offset) {
  std::vector<std::int32_t> words(offset.size());
  for (std::size_t p = 0; p < words.size(); ++p) std::memcpy(&words[p], received.data() + offset[p], sizeof(words[p]));
  return words;
}

Status blockVerdict(std::span<const std::int32_t> words, std::span<const int> ranks,
                    std::span<const std::size_t> expected, std::uint32_t tag, const Status& local,
                    std::string_view what) {
  if (!local.isOk()) return local;
  CHIMERA_RETURN_IF_ERROR(faultVerdict(words, ranks, what, "in this exchange"));
  for (std::size_t p = 0; p < words.size(); ++p) {
    const std::int32_t w = words[p];
    if (((static_cast<std::uint32_t>(w) >> 24) & 0x7fu) != (tag & 0x7fu))
      return Status::mismatch(
          fmt::format("{}: rank {} runs a routed exchange with other options (experts, top-k, "
                      "hidden size, dtypes, capacity, token layout or program differ)",
                      what, ranks[p]));
    const std::size_t count = static_cast<std::uint32_t>(w) & 0xffffffu;
    if (!expected.empty() && count != expected[p])
      return Status::mismatch(fmt::format("{}: rank {} sent {} records where this rank's dispatch expects {}", what,
                                          ranks[p], count, expected[p]));
  }
  return Status::ok();
}

Status countVerdict(std::span<const std::int32_t> words, std::span<const int> ranks, std::uint32_t tag,
                    const Status& local, std::vector<std::size_t>& counts) {
  counts.assign(words.size(), 0);
  if (!local.isOk()) return local;
  CHIMERA_RETURN_IF_ERROR(faultVerdict(words, ranks, "routed dispatch",
                                       "in its routing or arguments (an expert id out of range, a repeated expert, a "
                                       "wrong top-k, too many tokens)"));
  CHIMERA_RETURN_IF_ERROR(blockVerdict(words, ranks, {}, tag, local, "routed dispatch"));
  for (std::size_t p = 0; p < words.size(); ++p) counts[p] = static_cast<std::uint32_t>(words[p]) & 0xffffffu;
  return Status::ok();
}

}  // namespace chimera::detail
