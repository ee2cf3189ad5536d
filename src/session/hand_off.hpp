// SPDX-License-Identifier: Apache-2.0
// Pipeline hand-offs recorded per rank: the two sides of a send, each known to one stage only,
// become one chain that both stages plan alike. The sending side knows where the chain starts
// and its ops; the receiving side knows what its group reads. The two exchange that, once per
// new window, on the hand-off's own channel (a grouped point-to-point call between the pair).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/chain.hpp"
#include "chimera/executor.hpp"
#include "chimera/layout.hpp"
#include "chimera/tensor_spec.hpp"
#include "session/backend_buffer.hpp"

namespace chimera::detail {

/// This rank's side of one hand-off, as recorded.
struct HandOffSide {
  bool sending = true;
  int peer = 0;       ///< world rank at the other end
  int stageStep = 1;  ///< the send's direction: +1 to the next stage, -1 to the previous
  TensorSpec spec;    ///< the tensor handed off
  Layout received;    ///< its layout after the hand-off (on the receiving stage)
  /// Sending: the chain this rank runs, from where it starts (`from`) through its ops, the
  /// last a send. Receiving: filled from the peer by `exchangeHandOffs`.
  ChainRequest request;
  /// Receiving: the calls this rank makes on the received value before it is read (they join
  /// the hand-off's chain, e.g. the AllToAll of PP+EP). Sending: filled from the peer.
  Chain tail;
  /// Receiving: what this rank's group reads at the end of `tail` (nullopt: all of it, as
  /// recorded). Sending: filled from the peer.
  std::optional<Layout> consume;
};

/// Bytes of one hand-off description message (a pair exchanges one each way per new window).
inline constexpr std::size_t kHandOffMessageBytes = 4096;

/// The peer of a hand-off along the single axis of `op` for `rank`: the rank with the same
/// coordinates except on that axis, where it has `stage`.
int handOffPeer(const Mesh& mesh, int rank, AxisSet axis, int stage);

/// Gives a failed window up towards its hand-off peers: one failure message (carrying
/// `failure`'s text) swapped with each entry of `peers` in turn, a peer named once per
/// hand-off this rank owes it. A peer waiting in the window's data transfer fails there
/// against the swap (the backend's point-to-point argument check sees other transfers) and
/// returns Mismatch instead of waiting; a peer giving up too swaps its own message. Errors of
/// the swaps are ignored: the window has failed already. The swaps are ordered on `stream`.
void releaseHandOffPeers(Backend& backend, BackendBuffer& buffer, const std::vector<int>& peers, bool fusion,
                         const Status& failure, Stream stream);

/// Exchanges the descriptions of `sides` with every peer they name: one message each way per
/// peer, all in one grouped point-to-point call through `buffer`. Pairs this rank's sends to a
/// peer with the peer's receives from it (and the reverse), in record order, and completes
/// each side's `request` (consume included) so that both ends hold the very same chain.
/// `fusion` must be equal at both ends. `local` is this rank's verdict on the window so far:
/// when it is an error the rank still sends (a failure flag) so its peers return Mismatch
/// instead of waiting, and `local` is returned. When the swap itself fails (a peer runs a
/// cached window and waits in its data transfers), this rank then meets each further hand-off
/// it has with that peer with a failure message, as the peer releases them. Mismatch naming the peer when the two sides
/// differ (counts, tensors, layouts, fusion) or the peer failed; InvalidArgument when a
/// description does not fit a message. Counts one exchange in `exchanges` when it ran. The
/// exchange is ordered on `stream` and waited for.
[[nodiscard]] Status exchangeHandOffs(Backend& backend, BackendBuffer& buffer, std::vector<HandOffSide>& sides,
                                      bool fusion, const Status& local, Stream stream, std::uint64_t& exchanges);

}  // namespace chimera::detail
