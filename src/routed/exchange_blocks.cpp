// SPDX-License-Identifier: Apache-2.0
// Block words and verdicts of the routed exchange's rounds.
#include "routed/exchange_blocks.hpp"

#include <fmt/format.h>

#include <cstring>

namespace chimera::detail {
namespace {

constexpr std::uint64_t kFailedBit = std::uint64_t{1} << 63;

}  // namespace

std::uint64_t blockWord(std::uint64_t count, std::uint32_t tag, bool failed) {
  return (failed ? kFailedBit : 0) | (static_cast<std::uint64_t>(tag & 0x7fffffffu) << 32) | (count & 0xffffffffu);
}

std::int32_t countWord(std::int64_t count, std::uint32_t tag, bool failed) {
  if (failed || count < 0 || count > kMaxCountRecords) return kCountError;
  return static_cast<std::int32_t>(((tag & 0x7fu) << 24) | static_cast<std::uint32_t>(count));
}

Status exchangeBlocks(Backend& backend, AxisSet axes, std::span<const std::byte> send,
                      std::span<const std::size_t> sendOffset, std::span<const std::size_t> sendBytes,
                      std::span<const std::size_t> recvBytes, std::vector<std::byte>& recv,
                      std::vector<std::size_t>& recvOffset) {
  recvOffset.assign(recvBytes.size(), 0);
  std::size_t total = 0;
  for (std::size_t p = 0; p < recvBytes.size(); ++p) {
    recvOffset[p] = total;
    total += recvBytes[p];
  }
  recv.resize(total);
  return backend.allToAllV(send.data(), sendBytes, sendOffset, recv.data(), recvBytes, recvOffset, DataType::U8, axes);
}

Status blockVerdict(std::span<const std::uint64_t> words, std::span<const int> ranks,
                    std::span<const std::size_t> expected, std::uint32_t tag, const Status& local,
                    std::string_view what) {
  if (!local.isOk()) return local;
  for (std::size_t p = 0; p < words.size(); ++p) {
    const std::uint64_t w = words[p];
    if ((w & kFailedBit) != 0)
      return Status::mismatch(
          fmt::format("{}: rank {} reported an error in this exchange (see its message)", what, ranks[p]));
    const auto theirs = static_cast<std::uint32_t>((w >> 32) & 0x7fffffffu);
    if (theirs != (tag & 0x7fffffffu))
      return Status::mismatch(
          fmt::format("{}: rank {} runs a routed exchange with other options (experts, top-k, "
                      "hidden size, dtypes, capacity, token layout or program differ)",
                      what, ranks[p]));
    const std::uint64_t count = w & 0xffffffffu;
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
  for (std::size_t p = 0; p < words.size(); ++p) {
    const std::int32_t w = words[p];
    if (w < 0)
      return Status::mismatch(fmt::format(
          "routed dispatch: rank {} reported an error in its routing (see its message: an expert id out of range, "
          "a repeated expert, a wrong top-k or too many tokens)",
          ranks[p]));
    if (((static_cast<std::uint32_t>(w) >> 24) & 0x7fu) != (tag & 0x7fu))
      return Status::mismatch(
          fmt::format("routed dispatch: rank {} runs a routed exchange with other options "
                      "(experts, top-k, hidden size, dtypes, capacity, token layout or program "
                      "differ)",
                      ranks[p]));
    counts[p] = static_cast<std::uint32_t>(w) & 0xffffffu;
  }
  return Status::ok();
}

}  // namespace chimera::detail
