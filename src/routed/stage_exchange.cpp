// SPDX-License-Identifier: Apache-2.0
// The routed exchange of a pipeline stage's tokens ("pp=@k"): stage k holds the tokens, the
// dispatch group of stage k+1 the experts, and each stage-k rank's peer on stage k+1 (same
// coordinates) owns its tokens after the hand-off. Two programs, the same calls on each side:
// straight (stage k sends its records to stage k+1's expert ranks and its routing to the peer;
// the row gradients return straight to stage k) or the hand-off (x and routing to the peer, the
// ordinary dispatch there, grad x and grad w back). Only ranks of stages k and k+1 take part.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "core/check.hpp"
#include "routed/exchange_blocks.hpp"
#include "routed/record_sums.hpp"
#include "routed/routed_impl.hpp"

namespace chimera {

using detail::countWord;
using detail::kBlockWordBytes;

namespace {

using Impl = RoutedExchange::Impl;
using State = RoutedDispatch::State;

constexpr std::size_t align8(std::size_t bytes) { return (bytes + 7) / 8 * 8; }

// A block word in an 8-byte slot of a word round (its low 4 bytes), and back.
std::uint64_t slotOf(std::int32_t word) { return static_cast<std::uint32_t>(word); }
std::vector<std::int32_t> wordsIn(std::span<const std::uint64_t> slots) {
  std::vector<std::int32_t> words(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) words[i] = static_cast<std::int32_t>(slots[i] & 0xffffffffu);
  return words;
}

// One round of point-to-point blocks with the other stage: block p of `send` (`sendBytes[p]`
// bytes at `sendOffset[p]`) to world rank peers[p], and `recvBytes[p]` bytes from peers[p] into
// `recv` (resized; `recvOffset` says where each starts, laid out by detail::blockOffsets for
// blocks that open with a `wordBytes` word). Either side may be empty: rounds that only one
// stage sends in. Both sides know every size, so empty blocks are not posted.
Status stageRound(Backend& backend, std::span<const int> peers, std::span<const std::byte> send,
                  std::span<const std::size_t> sendOffset, std::span<const std::size_t> sendBytes,
                  std::span<const std::size_t> recvBytes, std::vector<std::byte>& recv,
                  std::vector<std::size_t>& recvOffset, std::size_t wordBytes = 0) {
  recv.resize(detail::blockOffsets(recvBytes, wordBytes, recvOffset));
  std::vector<P2POp> ops;
  for (std::size_t p = 0; p < sendBytes.size(); ++p) {
    if (sendBytes[p] > 0)
      ops.push_back({P2POp::Kind::Send, const_cast<std::byte*>(send.data() + sendOffset[p]), sendBytes[p], DataType::U8,
                     peers[p]});
  }
  for (std::size_t p = 0; p < recvBytes.size(); ++p) {
    if (recvBytes[p] > 0)
      ops.push_back({P2POp::Kind::Recv, recv.data() + recvOffset[p], recvBytes[p], DataType::U8, peers[p]});
  }
  return backend.groupedP2P(ops);
}

// Bytes of the routing a source appends to its peer's block: T, then T x K ids (int64), then
// T x K weights.
std::size_t routingBytes(const Impl& m, std::int64_t tokens) {
  const auto pairs = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(m.options.topK);
  return 8 + pairs * (8 + m.weightBytes);
}

// Whether a straight block from a source whose round word is `source` to a destination whose
// verdict word is `destination` carries records: not when the source failed, nor when both words
// are sound and name other options (another exchange's call), so that both sides size the block
// alike from the words they both hold, with no byte count in the round.
bool blockCarriesRecords(std::int32_t source, std::int32_t destination) {
  if (source < 0) return false;
  return destination < 0 || (source >> 24) == (destination >> 24);
}

// One round of small words with the other stage: `sendWords[p]` words of `send` (in order) to
// peers[p], `recvWords[p]` words from it into `heard` (in order). Either side may be empty: rounds
// that only one stage sends in.
template <typename Word>
Status wordRound(Backend& backend, std::span<const int> peers, std::span<const Word> send,
                 std::span<const std::size_t> sendWords, std::span<const std::size_t> recvWords,
                 std::vector<Word>& heard) {
  std::vector<std::size_t> sendOffset(sendWords.size()), sendBytes(sendWords.size()), recvBytes(recvWords.size()),
      recvOffset;
  std::size_t at = 0;
  for (std::size_t p = 0; p < sendWords.size(); ++p) {
    sendOffset[p] = at;
    sendBytes[p] = sizeof(Word) * sendWords[p];
    at += sendBytes[p];
  }
  for (std::size_t p = 0; p < recvWords.size(); ++p) recvBytes[p] = sizeof(Word) * recvWords[p];
  std::vector<std::byte> in;
  CHIMERA_RETURN_IF_ERROR(
      stageRound(backend, peers, std::as_bytes(send), sendOffset, sendBytes, recvBytes, in, recvOffset));
  heard.clear();
  for (std::size_t p = 0; p < recvWords.size(); ++p) {
    const std::size_t first = heard.size();
    heard.resize(first + recvWords[p]);
    std::memcpy(heard.data() + first, in.data() + recvOffset[p], recvBytes[p]);
  }
  return Status::ok();
}

// Words per peer of the hand-off's rounds, with its one peer.
constexpr std::size_t kOneWord[] = {1};
constexpr std::size_t kTwoWords[] = {2};

// Stage k, straight, in one round of 4-byte words: each source tells every destination its
// record count (and its peer its token count) and hears its verdict, and tells the other
// sources of its dispatch group whether it failed (and its options' tag), so that a failure
// anywhere fails every source before any row moves; then the record blocks, the peer's with
// the routing appended, sized on both sides from the words (blockCarriesRecords).
Status sendStraight(Impl& m, const std::int64_t* topkIdx, const void* topkWeights, const void* x, std::int64_t tokens,
                    State& st, Status local) {
  const auto R = static_cast<std::size_t>(m.ranks);
  const auto me = static_cast<std::size_t>(m.index);
  const std::size_t record = m.headerBytes + m.rowBytes;
  st.ownBegin = 0;
  st.ownEnd = tokens;
  if (local.isOk()) local = m.buildSendTable(topkIdx, st);
  if (local.isOk()) local = m.checkSendScratch(st.sendCount, record);
  const bool failed = !local.isOk();
  if (failed) {
    st.tokens = st.ownEnd = tokens = 0;
    st.sendCount.assign(R, 0);
    st.sendFirst.assign(R, 0);
  }
  // The round's peers: the destinations (the count word out, the verdict in), then the other
  // sources (this rank's word out, theirs in).
  std::vector<int> peers(m.stageRanks.begin(), m.stageRanks.end());
  std::vector<std::int32_t> counts(R), words;
  std::vector<std::size_t> sendWords(R, 1);
  for (std::size_t p = 0; p < R; ++p) {
    counts[p] = countWord(static_cast<std::int64_t>(st.sendCount[p]), m.tag, failed);
    words.push_back(counts[p]);
    if (p == me) words.push_back(static_cast<std::int32_t>(tokens));
  }
  sendWords[me] = 2;
  for (const int rank : m.groupRanks) {
    if (rank == m.backend.rank()) continue;
    peers.push_back(rank);
    words.push_back(countWord(0, m.tag, failed));
    sendWords.push_back(1);
  }
  const std::vector<std::size_t> recvWords(peers.size(), 1);
  std::vector<std::int32_t> heard;
  CHIMERA_RETURN_IF_ERROR(wordRound<std::int32_t>(m.backend, peers, words, sendWords, recvWords, heard));
  const std::span<const std::int32_t> verdicts(heard.data(), R), sources(heard.data() + R, heard.size() - R);
  st.stats.countBytes += 4 * words.size();
  for (std::size_t i = 0; i < peers.size(); ++i)
    st.stats.crossHostBytes += m.onOtherHost(peers[i]) ? 4 * sendWords[i] : 0;
  st.stats.rounds += 1;
  // Blocks laid out whole; each is sent whole or as its word alone (blockCarriesRecords).
  std::vector<std::size_t> offset, bytes(R), sent(R);
  for (std::size_t p = 0; p < R; ++p) {
    bytes[p] = kBlockWordBytes + st.sendCount[p] * record + (!failed && p == me ? routingBytes(m, tokens) : 0);
    sent[p] = blockCarriesRecords(counts[p], verdicts[p]) ? bytes[p] : kBlockWordBytes;
  }
  local = detail::blockVerdict(sources, std::span<const int>(peers).subspan(R), {}, m.tag, local,
                               fmt::format("routed dispatch (the sources of stage {})", m.stage));
  local = detail::blockVerdict(verdicts, m.stageRanks, {}, m.tag, local,
                               fmt::format("routed dispatch (the experts of stage {})", m.stage + 1));
  m.sendScratch.assign(detail::blockOffsets(bytes, kBlockWordBytes, offset), std::byte{0xff});  // empty slots: -1
  st.wordBytes = kBlockWordBytes;
  m.packRecords(st, topkIdx, topkWeights, static_cast<const std::byte*>(x), 0, offset, !local.isOk());
  if (!failed) {
    std::byte* routing = m.sendScratch.data() + offset[me] + kBlockWordBytes + st.sendCount[me] * record;
    const auto pairs = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(m.options.topK);
    std::memcpy(routing, &tokens, 8);
    if (pairs > 0) {
      std::memcpy(routing + 8, topkIdx, pairs * 8);
      std::memcpy(routing + 8 + pairs * 8, topkWeights, pairs * m.weightBytes);
    }
  }
  std::vector<std::byte> unused;
  std::vector<std::size_t> unusedOffset;
  CHIMERA_RETURN_IF_ERROR(stageRound(m.backend, m.stageRanks, m.sendScratch, offset, sent, {}, unused, unusedOffset));
  for (std::size_t p = 0; p < R; ++p) {  // every destination is on the other stage
    const std::size_t records = sent[p] > kBlockWordBytes ? st.sendCount[p] : 0;
    st.stats.payloadBytes += records * m.rowBytes;
    st.stats.headerBytes += sent[p] - records * m.rowBytes;
    st.stats.crossHostBytes += m.onOtherHost(m.stageRanks[p]) ? sent[p] : 0;
  }
  st.stats.rounds += 1;
  st.complete = local.isOk();
  return local;
}

// Stage k+1, straight: the count words of every source of stage k (and its peer's token count),
// this rank's verdict back, the record blocks sized from those words; the routing in the peer's
// block builds the owner's table.
Status receiveStraight(Impl& m, State& st, Status local) {
  const auto R = static_cast<std::size_t>(m.ranks);
  const auto me = static_cast<std::size_t>(m.index);
  const std::size_t record = m.headerBytes + m.rowBytes;
  const std::int32_t verdict = countWord(0, m.tag, !local.isOk());
  const std::vector<std::int32_t> verdicts(R, verdict);
  const std::vector<std::size_t> one(R, 1);
  std::vector<std::size_t> recvWords(R, 1);
  recvWords[me] = 2;  // the peer's word and its token count
  std::vector<std::int32_t> announced;
  CHIMERA_RETURN_IF_ERROR(wordRound<std::int32_t>(m.backend, m.stageRanks, verdicts, one, recvWords, announced));
  const std::int32_t peerTokens = announced[me + 1];
  announced.erase(announced.begin() + static_cast<std::ptrdiff_t>(me) + 1);
  st.stats.countBytes += 4 * R;
  for (const int source : m.stageRanks) st.stats.crossHostBytes += m.onOtherHost(source) ? 4 : 0;
  st.stats.rounds += 1;
  std::vector<std::size_t> counts(R), bytes(R);
  for (std::size_t p = 0; p < R; ++p) {
    const bool records = blockCarriesRecords(announced[p], verdict) && (p != me || peerTokens >= 0);
    counts[p] = static_cast<std::uint32_t>(announced[p]) & 0xffffffu;
    bytes[p] =
        records ? kBlockWordBytes + counts[p] * record + (p == me ? routingBytes(m, peerTokens) : 0) : kBlockWordBytes;
  }
  std::vector<std::size_t> none;
  st.received.swap(spareReceived());
  CHIMERA_RETURN_IF_ERROR(
      stageRound(m.backend, m.stageRanks, {}, none, none, bytes, st.received, st.receivedOffset, kBlockWordBytes));
  st.stats.rounds += 1;
  CHIMERA_RETURN_IF_ERROR(detail::blockVerdict(detail::wordsOf(st.received, st.receivedOffset), m.stageRanks, counts,
                                               m.tag, local, "routed dispatch"));
  // The routing of this rank's tokens, after the records of its peer's block.
  const std::size_t records = kBlockWordBytes + counts[me] * record;
  std::int64_t tokens = -1;
  if (bytes[me] >= records + 8) std::memcpy(&tokens, st.received.data() + st.receivedOffset[me] + records, 8);
  if (tokens < 0 || tokens != peerTokens)
    return Status::mismatch(
        fmt::format("routed dispatch: rank {} announced {} tokens and sent the routing of {} (corrupt)", m.stagePeer,
                    peerTokens, tokens));
  const auto pairs = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(m.options.topK);
  std::vector<std::int64_t> ids(pairs);
  if (pairs > 0) std::memcpy(ids.data(), st.received.data() + st.receivedOffset[me] + records + 8, pairs * 8);
  st.tokens = tokens;
  st.ownBegin = 0;
  st.ownEnd = tokens;
  if (Status table = m.buildSendTable(ids.data(), st); !table.isOk())
    return Status::mismatch(
        fmt::format("routed dispatch: the routing from rank {} does not hold: {}", m.stagePeer, table.message()));
  st.recvCount = counts;
  st.wordBytes = kBlockWordBytes;
  CHIMERA_RETURN_IF_ERROR(m.receivedTable(st));
  st.complete = true;
  return Status::ok();
}

// The hand-off's message: T, the ids, x, the weights. The ids are read in place (8-byte aligned);
// the dispatch copies rows and weights bytewise, so they need no alignment.
struct HandOffLayout {
  std::size_t ids = 8, x = 0, weights = 0, bytes = 0;
  HandOffLayout(const Impl& m, std::int64_t tokens) {
    const auto T = static_cast<std::size_t>(tokens);
    const auto pairs = T * static_cast<std::size_t>(m.options.topK);
    x = ids + 8 * pairs;
    weights = x + T * m.rowBytes;
    bytes = weights + pairs * m.weightBytes;
  }
};

// Stage k, the hand-off: x and routing to the peer (its size first), then the peer's verdict
// on the dispatch it ran over stage k+1's group.
Status sendHandOff(Impl& m, const std::int64_t* topkIdx, const void* topkWeights, const void* x, std::int64_t tokens,
                   State& st, Status local) {
  if (local.isOk()) local = m.checkRouting(topkIdx, 0, tokens);
  if (!local.isOk()) tokens = 0;
  const HandOffLayout layout(m, tokens);
  const std::span<const int> peer(&m.stagePeer, 1);
  const std::uint64_t header[2] = {slotOf(countWord(0, m.tag, !local.isOk())), local.isOk() ? layout.bytes : 0};
  std::vector<std::uint64_t> nothing;
  CHIMERA_RETURN_IF_ERROR(wordRound<std::uint64_t>(m.backend, peer, header, kTwoWords, {}, nothing));
  const bool across = m.onOtherHost(m.stagePeer);
  st.stats.countBytes += 16;
  st.stats.crossHostBytes += across ? 16 : 0;
  st.stats.rounds += 1;
  if (local.isOk()) {
    const auto pairs = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(m.options.topK);
    m.sendScratch.assign(layout.bytes, std::byte{0});
    std::memcpy(m.sendScratch.data(), &tokens, 8);
    if (tokens > 0) {
      std::memcpy(m.sendScratch.data() + layout.ids, topkIdx, pairs * 8);
      std::memcpy(m.sendScratch.data() + layout.x, x, static_cast<std::size_t>(tokens) * m.rowBytes);
      std::memcpy(m.sendScratch.data() + layout.weights, topkWeights, pairs * m.weightBytes);
    }
    const std::size_t zero = 0, bytes = layout.bytes;
    std::vector<std::byte> unused;
    std::vector<std::size_t> unusedOffset;
    CHIMERA_RETURN_IF_ERROR(
        stageRound(m.backend, peer, m.sendScratch, {&zero, 1}, {&bytes, 1}, {}, unused, unusedOffset));
    st.stats.payloadBytes += static_cast<std::size_t>(tokens) * m.rowBytes;
    st.stats.headerBytes += layout.bytes - static_cast<std::size_t>(tokens) * m.rowBytes;
    st.stats.crossHostBytes += across ? layout.bytes : 0;
    st.stats.rounds += 1;
  }
  std::vector<std::uint64_t> verdict;
  CHIMERA_RETURN_IF_ERROR(wordRound<std::uint64_t>(m.backend, peer, {}, {}, kOneWord, verdict));
  st.stats.rounds += 1;
  CHIMERA_RETURN_IF_ERROR(
      detail::blockVerdict(wordsIn(verdict), peer, {}, m.tag, local,
                           fmt::format("routed dispatch (after the hand-off to stage {})", m.stage + 1)));
  st.tokens = tokens;
  st.complete = true;
  return Status::ok();
}

// Stage k+1, the hand-off: the peer's x and routing, the ordinary dispatch over this stage's
// group, and its verdict back to the peer.
Status receiveHandOff(Impl& m, State& st, Status local) {
  const std::span<const int> peer(&m.stagePeer, 1);
  std::vector<std::uint64_t> header;
  CHIMERA_RETURN_IF_ERROR(wordRound<std::uint64_t>(m.backend, peer, {}, {}, kTwoWords, header));
  st.stats.rounds += 1;
  const std::int32_t sourceWord = wordsIn({header.data(), 1})[0];
  const bool sourceFailed = sourceWord < 0;
  if (local.isOk()) local = detail::blockVerdict({&sourceWord, 1}, peer, {}, m.tag, local, "routed hand-off");
  std::vector<std::byte> message;
  std::int64_t tokens = 0;
  if (!sourceFailed) {
    const std::size_t bytes = header[1];
    std::vector<std::size_t> offset;
    CHIMERA_RETURN_IF_ERROR(stageRound(m.backend, peer, {}, {}, {}, {&bytes, 1}, message, offset));
    st.stats.rounds += 1;
    if (message.size() >= 8) std::memcpy(&tokens, message.data(), 8);
    if (local.isOk() && (tokens < 0 || message.size() != HandOffLayout(m, tokens).bytes))
      local = Status::mismatch(fmt::format(
          "routed hand-off: rank {} sent {} bytes, not the size of its tokens (corrupt)", m.stagePeer, message.size()));
  }
  if (!local.isOk()) tokens = 0;
  const HandOffLayout layout(m, tokens);
  const std::byte* base = message.data();
  const Status dispatched =
      m.dispatchGroup(tokens > 0 ? base + layout.x : nullptr,
                      tokens > 0 ? reinterpret_cast<const std::int64_t*>(base + layout.ids) : nullptr,
                      tokens > 0 ? base + layout.weights : nullptr, tokens, st, local);
  const std::uint64_t verdict = slotOf(countWord(0, m.tag, !dispatched.isOk()));
  std::vector<std::uint64_t> nothing;
  CHIMERA_RETURN_IF_ERROR(wordRound<std::uint64_t>(m.backend, peer, {&verdict, 1}, kOneWord, {}, nothing));
  st.stats.countBytes += 8;
  st.stats.crossHostBytes += m.onOtherHost(m.stagePeer) ? 8 : 0;
  st.stats.rounds += 1;
  return dispatched;
}

// The hand-off's way back: the block word (padded to 8 bytes), grad x (padded to 8 bytes), grad
// w; the backward writes grad x and grad w in place, typed.
struct HandBackLayout {
  std::size_t gradX = align8(kBlockWordBytes), gradWeights = 0, bytes = 0;
  HandBackLayout(const Impl& m, std::int64_t tokens) {
    const auto T = static_cast<std::size_t>(tokens);
    gradWeights = gradX + align8(T * m.rowBytes);
    bytes = gradWeights + T * static_cast<std::size_t>(m.options.topK) * m.weightBytes;
  }
};

// Stage k+1's dispatch backward: each received record's gradient sums straight back to its
// source on stage k; or, after a hand-off, the ordinary backward over this stage's group and
// grad x and grad w back to the peer.
Status sendGradients(Impl& m, const State& st, const void* gradRecvX, const void* gradRowWeights, RoutedStats& stats,
                     const Status& local) {
  std::vector<std::size_t> none;
  std::vector<std::byte> unused;
  if (m.straight) {
    const auto S = static_cast<std::size_t>(m.slots);
    const std::size_t record = m.rowBytes + S * m.weightBytes;
    detail::RecordBlocks b = detail::layOutBlocks(m, st.recvCount, st.recvCount, record);
    detail::sumRecordGradients(m, st, b.sendOffset, record, gradRecvX, gradRowWeights, local);
    CHIMERA_RETURN_IF_ERROR(
        stageRound(m.backend, m.stageRanks, m.sendScratch, b.sendOffset, b.sendBytes, {}, unused, none));
    for (std::size_t p = 0; p < st.recvCount.size(); ++p) {  // every source is on the other stage
      stats.payloadBytes += st.recvCount[p] * m.rowBytes;
      stats.headerBytes += st.recvCount[p] * S * m.weightBytes + kBlockWordBytes;
      stats.crossHostBytes += m.onOtherHost(m.stageRanks[p]) ? b.sendBytes[p] : 0;
    }
    stats.rounds += 1;
    return local;
  }
  const HandBackLayout layout(m, st.tokens);
  std::vector<std::byte> message(layout.bytes, std::byte{0});
  const Status verdict = m.dispatchBackwardGroup(gradRecvX, gradRowWeights, st, message.data() + layout.gradX,
                                                 message.data() + layout.gradWeights, stats, local);
  detail::writeWord(message.data(), static_cast<std::size_t>(st.tokens), m.tag, !verdict.isOk());
  const std::size_t zero = 0;
  CHIMERA_RETURN_IF_ERROR(
      stageRound(m.backend, {&m.stagePeer, 1}, message, {&zero, 1}, {&layout.bytes, 1}, {}, unused, none));
  const std::size_t rows = static_cast<std::size_t>(st.tokens) * m.rowBytes;
  stats.payloadBytes += rows;
  stats.headerBytes += layout.bytes - rows;
  stats.crossHostBytes += m.onOtherHost(m.stagePeer) ? layout.bytes : 0;
  stats.rounds += 1;
  return verdict;
}

// Stage k's dispatch backward: the gradients of the records it sent come back from stage k+1's
// expert ranks and are summed per token here; or, after a hand-off, grad x and grad w come
// back from the peer.
Status receiveGradients(Impl& m, const State& st, void* gradX, void* gradWeights, RoutedStats& stats,
                        const Status& local) {
  std::vector<std::size_t> none, offset;
  if (m.straight) {
    const std::size_t record = m.rowBytes + static_cast<std::size_t>(m.slots) * m.weightBytes;
    std::vector<std::size_t> bytes;
    m.blocks(st.sendCount, record, kBlockWordBytes, offset, bytes);
    CHIMERA_RETURN_IF_ERROR(
        stageRound(m.backend, m.stageRanks, {}, none, none, bytes, m.back, offset, kBlockWordBytes));
    stats.rounds += 1;
    CHIMERA_RETURN_IF_ERROR(detail::blockVerdict(detail::wordsOf(m.back, offset), m.stageRanks, st.sendCount, m.tag,
                                                 local, "routed dispatch backward"));
    detail::sumReturnedGradients(m, st, offset, record, gradX, gradWeights);
    return Status::ok();
  }
  const HandBackLayout layout(m, st.tokens);
  CHIMERA_RETURN_IF_ERROR(stageRound(m.backend, {&m.stagePeer, 1}, {}, none, none, {&layout.bytes, 1}, m.back, offset));
  stats.rounds += 1;
  std::int32_t word = 0;
  std::memcpy(&word, m.back.data(), sizeof(word));
  const auto T = static_cast<std::size_t>(st.tokens);
  CHIMERA_RETURN_IF_ERROR(detail::blockVerdict({&word, 1}, {&m.stagePeer, 1}, {&T, 1}, m.tag, local,
                                               "routed dispatch backward (the hand-off back)"));
  if (T > 0) std::memcpy(gradX, m.back.data() + layout.gradX, T * m.rowBytes);
  if (gradWeights != nullptr && layout.bytes > layout.gradWeights)
    std::memcpy(gradWeights, m.back.data() + layout.gradWeights, layout.bytes - layout.gradWeights);
  return Status::ok();
}

}  // namespace

Status RoutedExchange::Impl::checkRole(const char* call, bool experts) const {
  if (role == RoutedRole::Both || role == RoutedRole::Experts) return Status::ok();
  if (role == RoutedRole::Outside)
    return Status::invalidArgument(fmt::format(
        "{}: rank {} is on stage {} of {}; the exchange of '{}' runs on stages {} and {} only, and this "
        "rank makes no call",
        call, backend.rank(), tokenIndex, backend.mesh().axesName(tokenAxes), options.tokenLayout, stage, stage + 1));
  CHIMERA_CHECK_ARG(!experts,
                    "{}: rank {} is on stage {}, which holds the tokens of '{}'; this call runs on stage {} (the "
                    "experts), and stage {} calls dispatch and dispatchBackward only",
                    call, backend.rank(), stage, options.tokenLayout, stage + 1, stage);
  return Status::ok();
}

Status RoutedExchange::Impl::dispatchStage(const void* x, const std::int64_t* topkIdx, const void* topkWeights,
                                           std::int64_t tokens, RoutedDispatch::State& st, Status local) {
  CHIMERA_RETURN_IF_ERROR(checkRole("routed dispatch", false));
  if (role == RoutedRole::Source)
    return straight ? sendStraight(*this, topkIdx, topkWeights, x, tokens, st, local)
                    : sendHandOff(*this, topkIdx, topkWeights, x, tokens, st, local);
  if (local.isOk() && tokens != 0)
    local = Status::invalidArgument(fmt::format(
        "routed dispatch: rank {} on stage {} holds the experts of '{}' and passes no tokens (its peer, rank {} on "
        "stage {}, sends them); got {}",
        backend.rank(), stage + 1, options.tokenLayout, stagePeer, stage, tokens));
  st.tokens = 0;
  return straight ? receiveStraight(*this, st, local) : receiveHandOff(*this, st, local);
}

Status RoutedExchange::Impl::dispatchBackwardStage(const void* gradRecvX, const void* gradRowWeights,
                                                   const RoutedDispatch::State& st, void* gradX, void* gradWeights,
                                                   RoutedStats& stats, Status local) {
  if (role == RoutedRole::Source) return receiveGradients(*this, st, gradX, gradWeights, stats, local);
  if (local.isOk() && (gradX != nullptr || gradWeights != nullptr))
    local = Status::invalidArgument(
        fmt::format("routed dispatch backward: rank {} on stage {} forms no gradient of x or of the weights "
                    "('{}': its peer on stage {} does); pass null",
                    backend.rank(), stage + 1, options.tokenLayout, stage));
  return sendGradients(*this, st, gradRecvX, gradRowWeights, stats, local);
}

}  // namespace chimera
