// SPDX-License-Identifier: Apache-2.0
// The hand-off exchange between the two stages of a pipeline hand-off (see hand_off.hpp).
#include "session/hand_off.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "core/check.hpp"

namespace chimera::detail {
namespace {

constexpr std::uint8_t kHandOffChannel = 1;  // never matched by data transfers (channel 0)

// One side as the peer described it.
struct PeerEntry {
  bool sending = true;
  int stageStep = 1;
  TensorSpec spec;
  Layout from;                    // sending: where its chain starts
  Chain chain;                    // sending: its ops
  Layout received;                // both: the layout after the hand-off
  Chain tail;                     // receiving: its calls on the received value
  std::optional<Layout> consume;  // receiving: what its group reads
};

struct PeerMessage {
  bool fusion = true;
  bool failed = false;
  std::string reason;  // failed: why, as the peer's status says
  std::vector<PeerEntry> entries;
};

std::string shapeText(const TensorSpec& spec) {
  return spec.shape.empty() ? std::string("-") : fmt::format("{}", fmt::join(spec.shape, ","));
}

// The line that says why a rank gave its window up (one line, bounded so it fits a message).
std::string reasonLine(const Status& failure) {
  std::string text = failure.toString().substr(0, kHandOffMessageBytes / 2);
  std::replace(text.begin(), text.end(), '\n', ' ');
  return "reason " + text + "\n";
}

// Header line, then one line per side with this peer, in record order; a failed window ends
// with the reason.
std::string encode(const Mesh& mesh, const std::vector<HandOffSide*>& sides, bool fusion, const Status& failure) {
  const bool failed = !failure.isOk();
  std::string text =
      fmt::format("chimera-handoff fusion={} failed={} count={}\n", fusion ? 1 : 0, failed ? 1 : 0, sides.size());
  for (std::size_t i = 0; i < sides.size(); ++i) {
    const HandOffSide& s = *sides[i];
    const int step = s.stageStep;
    if (s.sending) {
      text += fmt::format("send {} {} {} {} {} {}\n", step, dataTypeName(s.spec.dtype), shapeText(s.spec),
                          s.request.from.toString(), s.request.chain.toString(mesh), s.received.toString());
    } else {
      text += fmt::format("recv {} {} {} {} {} {}\n", step, dataTypeName(s.spec.dtype), shapeText(s.spec),
                          s.received.toString(), s.tail.ops.empty() ? "-" : s.tail.toString(mesh),
                          s.consume ? s.consume->toString() : "-");
    }
  }
  if (failed) text += reasonLine(failure);
  return text;
}

Status decode(const Mesh& mesh, std::string_view text, int peer, PeerMessage& out) {
  std::istringstream in{std::string(text)};
  std::string line;
  std::getline(in, line);
  int fusion = 0;
  int failed = 0;
  std::size_t count = 0;
  if (std::sscanf(line.c_str(), "chimera-handoff fusion=%d failed=%d count=%zu", &fusion, &failed, &count) != 3) {
    return Status::mismatch(
        fmt::format("hand-off peer rank {} sent no hand-off description (got '{:.40}'): its "
                    "window does not hand off to this rank where this one does",
                    peer, line));
  }
  out.fusion = fusion != 0;
  out.failed = failed != 0;
  for (std::size_t i = 0; i < count && std::getline(in, line); ++i) {
    std::istringstream fields(line);
    std::string kind, dtype, shape, a, b, c;
    PeerEntry e;
    fields >> kind >> e.stageStep >> dtype >> shape >> a >> b >> c;
    e.sending = kind == "send";
    CHIMERA_RETURN_IF_ERROR(parseDataType(dtype, e.spec.dtype));
    if (shape != "-") CHIMERA_RETURN_IF_ERROR(TensorSpec::parseShape(shape, e.spec.shape));
    if (e.sending) {
      CHIMERA_RETURN_IF_ERROR(Layout::parse(a, mesh, e.from));
      CHIMERA_RETURN_IF_ERROR(Chain::parse(b, mesh, e.chain));
      CHIMERA_RETURN_IF_ERROR(Layout::parse(c, mesh, e.received));
    } else {
      CHIMERA_RETURN_IF_ERROR(Layout::parse(a, mesh, e.received));
      if (b != "-") CHIMERA_RETURN_IF_ERROR(Chain::parse(b, mesh, e.tail));
      if (c != "-") {
        Layout consume;
        CHIMERA_RETURN_IF_ERROR(Layout::parse(c, mesh, consume));
        e.consume = consume;
      }
    }
    out.entries.push_back(std::move(e));
  }
  CHIMERA_CHECK_ARG(out.entries.size() == count, "hand-off description of rank {} is truncated", peer);
  if (out.failed && std::getline(in, line) && line.starts_with("reason ")) out.reason = line.substr(7);
  return Status::ok();
}

// Completes the pair (mine, theirs) or says how they differ.
Status pair(const Mesh& mesh, int rank, int peer, HandOffSide& mine, const PeerEntry& theirs) {
  const int myStep = mine.stageStep;
  const char* way = mine.sending ? "to" : "from";
  if (theirs.sending == mine.sending || theirs.stageStep != myStep || !(theirs.spec == mine.spec) ||
      !(theirs.received == mine.received)) {
    return Status::mismatch(
        fmt::format("hand-off {} rank {}: rank {} {} {} arriving as {} ({}), rank {} {} {} arriving as {} ({})", way,
                    peer, rank, mine.sending ? "sends" : "receives", mine.spec.toString(), mine.received.toString(),
                    myStep > 0 ? "forward" : "backward", peer, theirs.sending ? "sends" : "receives",
                    theirs.spec.toString(), theirs.received.toString(), theirs.stageStep > 0 ? "forward" : "backward"));
  }
  if (mine.sending) {
    mine.tail = theirs.tail;
    mine.consume = theirs.consume;
    mine.request.chain.ops.insert(mine.request.chain.ops.end(), theirs.tail.ops.begin(), theirs.tail.ops.end());
    mine.request.consume = theirs.consume;
    return Status::ok();
  }
  // The sender's chain must end where this rank's receive says the tensor arrives.
  Layout at = theirs.from;
  for (const ChainOp& op : theirs.chain.ops) {
    OpEffect effect;
    CHIMERA_RETURN_IF_ERROR(applyChainOp(at, op, theirs.spec, effect));
    at = effect.output;
  }
  if (!(at == mine.received)) {
    return Status::mismatch(fmt::format("hand-off from rank {}: its chain {} from {} ends as {}, rank {} receives {}",
                                        peer, theirs.chain.toString(mesh), theirs.from.toString(), at.toString(), rank,
                                        mine.received.toString()));
  }
  mine.request.spec = theirs.spec;
  mine.request.from = theirs.from;
  mine.request.chain = theirs.chain;
  mine.request.chain.ops.insert(mine.request.chain.ops.end(), mine.tail.ops.begin(), mine.tail.ops.end());
  mine.request.consume = mine.consume;
  return Status::ok();
}

// Sends texts[p] to peers[p] and receives one message from each, all in one grouped call on
// the hand-off channel, ordered on `stream`; replies[p] is what peers[p] sent.
Status swapMessages(Backend& backend, BackendBuffer& buffer, const std::vector<int>& peers,
                    const std::vector<std::string>& texts, Stream stream, std::vector<std::string>& replies) {
  const std::size_t n = peers.size();
  const std::size_t half = n * kHandOffMessageBytes;
  std::vector<char> host(2 * half, 0);
  for (std::size_t p = 0; p < n; ++p)
    std::memcpy(host.data() + p * kHandOffMessageBytes, texts[p].data(), texts[p].size());
  CHIMERA_RETURN_IF_ERROR(buffer.reserve(2 * half));
  auto* device = static_cast<char*>(buffer.data());
  CHIMERA_RETURN_IF_ERROR(backend.copy(device, host.data(), 2 * half, stream));
  std::vector<P2POp> ops;
  for (std::size_t p = 0; p < n; ++p) {
    ops.push_back({P2POp::Kind::Send, device + p * kHandOffMessageBytes, kHandOffMessageBytes, DataType::U8, peers[p],
                   kHandOffChannel});
    ops.push_back({P2POp::Kind::Recv, device + half + p * kHandOffMessageBytes, kHandOffMessageBytes, DataType::U8,
                   peers[p], kHandOffChannel});
  }
  CHIMERA_RETURN_IF_ERROR(backend.groupedP2P(ops, stream));
  CHIMERA_RETURN_IF_ERROR(backend.copy(host.data() + half, device + half, half, stream));
  CHIMERA_RETURN_IF_ERROR(backend.synchronize(stream));
  replies.resize(n);
  for (std::size_t p = 0; p < n; ++p) {
    const char* text = host.data() + half + p * kHandOffMessageBytes;
    replies[p].assign(text, strnlen(text, kHandOffMessageBytes));
  }
  return Status::ok();
}

std::string failureMessage(bool fusion, const Status& failure) {
  return fmt::format("chimera-handoff fusion={} failed=1 count=0\n", fusion ? 1 : 0) + reasonLine(failure);
}

}  // namespace

int handOffPeer(const Mesh& mesh, int rank, AxisSet axis, int stage) {
  std::vector<int> coords = mesh.coordinates(rank);
  for (int a = 0; a < mesh.numAxes(); ++a) {
    if (axis.contains(a)) coords[static_cast<std::size_t>(a)] = stage;
  }
  return mesh.rankOf(coords);
}

void releaseHandOffPeers(Backend& backend, BackendBuffer& buffer, const std::vector<int>& peers, bool fusion,
                         const Status& failure, Stream stream) {
  const std::vector<std::string> text{failureMessage(fusion, failure)};
  std::vector<std::string> ignored;
  for (const int peer : peers) (void)swapMessages(backend, buffer, {peer}, text, stream, ignored);
}

Status exchangeHandOffs(Backend& backend, BackendBuffer& buffer, std::vector<HandOffSide>& sides, bool fusion,
                        const Status& local, Stream stream, std::uint64_t& exchanges) {
  const Mesh& mesh = backend.mesh();
  const int rank = backend.rank();
  // Peers in order of first appearance, with this rank's sides towards each.
  std::vector<int> peers;
  std::map<int, std::vector<HandOffSide*>> byPeer;
  for (HandOffSide& side : sides) {
    if (!byPeer.contains(side.peer)) peers.push_back(side.peer);
    byPeer[side.peer].push_back(&side);
  }
  if (peers.empty()) return local;
  const std::size_t n = peers.size();
  std::vector<std::string> texts(n);
  Status status = local;
  for (std::size_t p = 0; p < n; ++p) {
    texts[p] = encode(mesh, byPeer[peers[p]], fusion, status);
    if (texts[p].size() >= kHandOffMessageBytes) {
      if (status.isOk()) {
        status = Status::invalidArgument(fmt::format(
            "the description of this window's hand-offs with rank {} takes {} bytes, more than {}: flush more often",
            peers[p], texts[p].size(), kHandOffMessageBytes));
      }
      texts[p] = failureMessage(fusion, status);
    }
  }
  std::vector<std::string> replies;
  Status swapped = swapMessages(backend, buffer, peers, texts, stream, replies);
  if (!swapped.isOk()) {
    swapped = Status(swapped.code(),
                     fmt::format("rank {} describes a new window to its hand-off peer(s) {}, which run transfers of a "
                                 "window planned before (the window changed on one side only): {}",
                                 rank, fmt::join(peers, ", "), swapped.message()));
    // A peer ran something else: its window is cached and it waits in that window's data
    // transfers. The first of its hand-offs with this rank failed against this exchange; it
    // releases the others one by one (Session::Impl::releasePeers), and this rank meets each.
    std::vector<int> owed;
    for (const int peer : peers) owed.insert(owed.end(), byPeer[peer].size() - 1, peer);
    releaseHandOffPeers(backend, buffer, owed, fusion, status.isOk() ? swapped : status, stream);
    return status.isOk() ? swapped : status;
  }
  ++exchanges;
  if (!status.isOk()) return status;
  for (std::size_t p = 0; p < n; ++p) {
    const int peer = peers[p];
    PeerMessage message;
    CHIMERA_RETURN_IF_ERROR(decode(mesh, replies[p], peer, message));
    if (message.failed) {
      return Status::mismatch(
          fmt::format("hand-off peer rank {} failed its side of the window: {}", peer, message.reason));
    }
    if (message.fusion != fusion) {
      return Status::mismatch(fmt::format("hand-off peer rank {} runs with fusion {}, rank {} with fusion {}", peer,
                                          message.fusion ? "on" : "off", rank, fusion ? "on" : "off"));
    }
    // My sends pair with its receives, my receives with its sends, each in record order.
    std::vector<HandOffSide*>& mine = byPeer[peer];
    for (bool sending : {true, false}) {
      std::vector<HandOffSide*> own;
      std::vector<const PeerEntry*> theirs;
      for (HandOffSide* side : mine) {
        if (side->sending == sending) own.push_back(side);
      }
      for (const PeerEntry& e : message.entries) {
        if (e.sending != sending) theirs.push_back(&e);
      }
      if (own.size() != theirs.size()) {
        return Status::mismatch(fmt::format("rank {} {} {} hand-off(s) {} rank {} in this window, rank {} {} {}", rank,
                                            sending ? "sends" : "receives", own.size(), sending ? "to" : "from", peer,
                                            peer, sending ? "receives" : "sends", theirs.size()));
      }
      for (std::size_t i = 0; i < own.size(); ++i) {
        CHIMERA_RETURN_IF_ERROR(pair(mesh, rank, peer, *own[i], *theirs[i]));
      }
    }
  }
  return Status::ok();
}

}  // namespace chimera::detail
