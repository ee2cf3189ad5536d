// SPDX-License-Identifier: Apache-2.0
// Implements the argument agreement of point-to-point calls between the two peers.
#include "mpi/p2p_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/agreement.hpp"
#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::detail {
namespace {

constexpr int kManifestTag = 0x5043;  // 'PC'
// The one word of a refusal: the sender's own checks failed, it moves nothing with this rank.
constexpr std::int64_t kRefusal = -1;

// One transfer as the other end must see it.
struct Transfer {
  std::int64_t count = 0;
  std::int64_t dtype = 0;
  std::int64_t boxed = 0;  // moved as a box (P2POp::box), read from the sender's memory
  bool operator==(const Transfer&) const = default;
};

// The ops of `ops` with `peer` of one kind, in order.
std::vector<Transfer> transfersWith(std::span<const P2POp> ops, int peer, P2POp::Kind kind) {
  std::vector<Transfer> out;
  for (const P2POp& op : ops) {
    if (op.peer == peer && op.kind == kind) {
      out.push_back({static_cast<std::int64_t>(op.count), static_cast<std::int64_t>(op.dtype), op.box != nullptr});
    }
  }
  return out;
}

std::string describe(const std::vector<Transfer>& transfers) {
  std::string text;
  for (const Transfer& t : transfers) {
    if (!text.empty()) text += ", ";
    text +=
        fmt::format("{} {}{}", t.count, dataTypeName(static_cast<DataType>(t.dtype)), t.boxed != 0 ? " as a box" : "");
  }
  return text.empty() ? "none" : text;
}

// Mismatch unless what `from` sends equals what `to` receives (the lists of one direction).
Status compare(const std::vector<Transfer>& sent, const std::vector<Transfer>& received, int from, int to) {
  if (sent == received) return Status::ok();
  return Status::mismatch(
      fmt::format("point-to-point arguments differ: rank {} sends rank {} [{}] but rank {} "
                  "receives [{}] from rank {}",
                  from, to, describe(sent), to, describe(received), from));
}

// (kind, count, dtype, boxed) per op with `peer`.
std::vector<std::int64_t> manifest(std::span<const P2POp> ops, int peer) {
  std::vector<std::int64_t> words;
  for (const P2POp& op : ops) {
    if (op.peer != peer) continue;
    words.insert(words.end(), {static_cast<std::int64_t>(op.kind), static_cast<std::int64_t>(op.count),
                               static_cast<std::int64_t>(op.dtype), op.box != nullptr});
  }
  return words;
}

// The peer's view of its ops with this rank, as the lists this rank compares with its own.
struct PeerView {
  std::vector<Transfer> sends;     // what the peer sends this rank
  std::vector<Transfer> receives;  // what the peer receives from this rank
};

PeerView parse(const std::vector<std::int64_t>& words) {
  PeerView view;
  for (std::size_t i = 0; i + 4 <= words.size(); i += 4) {
    const Transfer t{words[i + 1], words[i + 2], words[i + 3]};
    (words[i] == static_cast<std::int64_t>(P2POp::Kind::Send) ? view.sends : view.receives).push_back(t);
  }
  return view;
}

}  // namespace

Status agreeOnTransfers(const MpiGroup& world, std::span<const P2POp> ops, const Status& local,
                        std::vector<int>& failedPeers) {
  const MPI_Comm comm = world.comm;
  const int self = world.index;
  failedPeers.clear();
  std::vector<int> peers;
  for (const P2POp& op : ops) {
    if (op.peer == self || op.peer < 0 || op.peer >= world.size) continue;
    if (std::find(peers.begin(), peers.end(), op.peer) != peers.end()) continue;
    peers.push_back(op.peer);
  }
  auto outgoingStore = std::make_shared<std::vector<std::vector<std::int64_t>>>();
  std::vector<std::vector<std::int64_t>>& outgoing = *outgoingStore;
  outgoing.reserve(peers.size());
  RequestSet requests;
  requests.reserve(peers.size());
  requests.keep(outgoingStore);
  for (std::size_t i = 0; i < peers.size(); ++i) {
    outgoing.push_back(local.isOk() ? manifest(ops, peers[i]) : std::vector<std::int64_t>{kRefusal});
    CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Isend(outgoing[i].data(), static_cast<int>(outgoing[i].size()), MPI_INT64_T,
                                                peers[i], kManifestTag, comm, &requests.add(peers[i])),
                                      "MPI_Isend (point-to-point argument check)"));
  }
  Status verdict = local;
  for (const int peer : peers) {
    MPI_Status probed;
    CHIMERA_RETURN_IF_ERROR(probeWithin(world, peer, kManifestTag, probed, "point-to-point argument check"));
    int words = 0;
    MPI_Get_count(&probed, MPI_INT64_T, &words);
    std::vector<std::int64_t> incoming(static_cast<std::size_t>(std::max(words, 0)));
    // The message was probed, so this receive completes at once.
    CHIMERA_RETURN_IF_ERROR(
        mpiStatus(MPI_Recv(incoming.data(), words, MPI_INT64_T, peer, kManifestTag, comm, MPI_STATUS_IGNORE),
                  "MPI_Recv (point-to-point argument check)"));
    // Every manifest is received, whatever the verdict, so none is left for a later call.
    if (!local.isOk()) continue;
    Status pair = Status::ok();
    if (incoming.size() == 1 && incoming[0] == kRefusal) {
      pair = transfersRefused(peer, self);
    } else {
      const PeerView view = parse(incoming);
      pair = compare(transfersWith(ops, peer, P2POp::Kind::Send), view.receives, self, peer);
      if (pair.isOk()) pair = compare(view.sends, transfersWith(ops, peer, P2POp::Kind::Recv), peer, self);
    }
    if (pair.isOk()) continue;
    failedPeers.push_back(peer);
    if (verdict.isOk()) verdict = pair;
  }
  CHIMERA_RETURN_IF_ERROR(requests.waitAll(world, "point-to-point argument check (manifest sends)"));
  if (!local.isOk()) return local;
  const Status itself =
      compare(transfersWith(ops, self, P2POp::Kind::Send), transfersWith(ops, self, P2POp::Kind::Recv), self, self);
  if (!itself.isOk()) {
    failedPeers.push_back(self);
    if (verdict.isOk()) verdict = itself;
  }
  return verdict;
}

}  // namespace chimera::detail
