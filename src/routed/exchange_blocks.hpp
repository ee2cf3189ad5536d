// SPDX-License-Identifier: Apache-2.0
// The blocks of a routed exchange (private): every uneven all-to-all of the routed exchange
// sends each peer one block that starts with a 4-byte word (its record count, 7 bits of the
// options tag of the sender, or an error), so that a rank with other options or a local failure
// fails every rank of the group in the same round, instead of sending garbage or hanging. The
// dropless dispatch's blocks carry none: the count exchange before them told the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// Bytes of a block's leading word.
inline constexpr std::size_t kBlockWordBytes = 4;
/// The word of a sender whose own check failed. A sender that failed because another rank's
/// check did (a replica of its tokens) sends `kCountError - 1 - rank` instead, naming that rank.
inline constexpr std::int32_t kCountError = -1;
/// Most records one word carries (24 bits; 7 more hold the tag). A dispatch of more tokens
/// is an error, so no count of a routed exchange exceeds it.
inline constexpr std::int64_t kMaxCountRecords = (std::int64_t{1} << 24) - 1;

/// A count-exchange or block word: `count` records and `tag`; when `failed`, kCountError, or
/// the word naming `faultRank` (>= 0) when that world rank's check failed rather than this one's.
std::int32_t countWord(std::int64_t count, std::uint32_t tag, bool failed, int faultRank = -1);
/// Writes countWord(count, tag, failed, faultRank) at the start of `block`.
void writeWord(std::byte* block, std::size_t count, std::uint32_t tag, bool failed, int faultRank = -1);

/// Offsets for blocks of `bytes[p]` bytes laid one after another, each placed so that what
/// follows its `wordBytes`-byte word starts on 8 bytes (typed rows are read in place); returns
/// the bytes the blocks span.
std::size_t blockOffsets(std::span<const std::size_t> bytes, std::size_t wordBytes, std::vector<std::size_t>& offset);

/// One uneven all-to-all of byte blocks over `axes`: block p of `send` (at `sendOffset[p]`,
/// `sendBytes[p]` bytes, word included) goes to group member p; `recv` is resized to hold every
/// member's block (`recvBytes[p]`, word included, laid out by blockOffsets with `wordBytes`)
/// and `recvOffset` says where each starts.
[[nodiscard]] Status exchangeBlocks(Backend& backend, AxisSet axes, std::span<const std::byte> send,
                                    std::span<const std::size_t> sendOffset, std::span<const std::size_t> sendBytes,
                                    std::span<const std::size_t> recvBytes, std::vector<std::byte>& recv,
                                    std::vector<std::size_t>& recvOffset, std::size_t wordBytes = kBlockWordBytes);

/// The word at the start of each block of `received` (at `offset[p]`).
std::vector<std::int32_t> wordsOf(std::span<const std::byte> received, std::span<const std::size_t> offset);

/// The verdict of a round after which every member's word is known: `local` when it is an error;
/// otherwise Mismatch naming the lowest world rank at fault (a member whose own check failed, or
/// the rank a failed member's word names), or the first member that runs other options
/// (`tag`), or sent another count than `expected[p]` (when `expected` is not empty).
/// `words[p]` is member p's word; `ranks[p]` its world rank; `what` names the round.
[[nodiscard]] Status blockVerdict(std::span<const std::int32_t> words, std::span<const int> ranks,
                                  std::span<const std::size_t> expected, std::uint32_t tag, const Status& local,
                                  std::string_view what);

/// The same for count-exchange words; `counts` receives each member's record count.
[[nodiscard]] Status countVerdict(std::span<const std::int32_t> words, std::span<const int> ranks, std::uint32_t tag,
                                  const Status& local, std::vector<std::size_t>& counts);

}  // namespace chimera::detail
