// SPDX-License-Identifier: Apache-2.0
// Point-to-point transfers of one torch process group over its c10d gloo backend, as c10d
// expects them (see HostPointToPoint), with what gloo's own send/recv lack: a receive learns at
// once when its sender's send failed there or sends another byte count, and fails naming the
// sender instead of waiting for the timeout (or being aborted by gloo on a size mismatch).
//
// Every send is a fixed-size header (kind: data or refusal, the payload's byte count, the
// message's number among those its sender sent this rank, and how many refusals of a tag without
// a channel its sender had sent this rank before it) on the header tag of the caller's tag, then
// the payload (or the refusing rank's error text) on the payload tag of its number; a payload of
// up to 96 bytes travels in the header instead (one gloo message, not two). A receive posts its
// header receive at once; a continuation (a pool thread, one per waiting header: no receive
// waits behind another) takes the header and posts the payload receive at once, straight into
// the caller's tensor when the byte counts agree, into a scratch buffer of the announced size
// otherwise (gloo aborts the process on a receive of another size). So a send completes without
// waiting for its receiver's wait(), as gloo's rendezvous sends need when both ranks wait for
// their send first. Header receives of one source and tag match that rank's sends of the tag in
// order, so receives keep c10d's order.
//
// A send whose tag has no channel (out of [0, L]) is refused on the refusal tag instead, where
// one receive from any source is always posted. Such a refusal says which receive it fails only
// through its place among its sender's messages, and gloo does not keep that place: messages on
// different tags overtake each other, and the listener's thread may take a refusal before the
// continuation of a header that came first. So the receiver puts one sender's messages back in
// its order (the numbers are consecutive per pair of ranks):
//   - a header carrying refusal count k is handed on (to a receive, or kept) only once the
//     first k such refusals from its sender have been put in order (or the group's timeout
//     passed);
//   - a refusal numbered m is put in order only once every message numbered below m from its
//     sender has been handed on, except those it lists as unconfirmed: up to 16 (the latest)
//     messages its sender sent this rank whose send it had not yet seen complete. A send that
//     completed was taken by a receive this rank had posted, so its header is on its way; an
//     unconfirmed one may wait for a receive this rank has not posted yet (another tag). One
//     left out of the list (more than 16 unconfirmed) holds the refusal until it is handed on;
//   - a refusal put in order fails the earliest posted receive from its sender (or from any
//     source) that none of the messages sent before it will go to: each unconfirmed message not
//     yet handed on, and each message kept while no receive of its tag waited, passes over one
//     receive of its tag (the earliest). With no such receive it fails the next one posted that
//     qualifies; refusals of one sender fail receives in their order.
// So which receive a refusal fails follows from its sender's order alone, not from the
// threads' timing. The failed receive's header receive stays posted (gloo cannot cancel a
// receive): the message it takes goes to the next receive of its source and tag, or is kept
// until one comes, so the messages of one source and tag still arrive in order. For the same
// reason no wait on gloo ever reaches gloo's own bound (its expiry closes gloo's connections):
// waits are interrupted every tick and resumed, and a receive without a message fails with
// Timeout after the timeout while its header receive stays posted for the next message.
//
// Tags of the gloo backend (every one below the gloo transport's own, kReduceScatterTag and up):
//   [0, L)                 the caller's tags (L = kGlooUserTagLimit = 2^29; the process group checks)
//   L                      monitoredBarrier's (a channel like a caller's tag)
//   [L + 1, 2L + 2)        header tags: the header of tag t (in [0, L]) is on L + 1 + t
//   [2L + 2, 2L + 2 + S)   payload tags: the message numbered q from one rank to another is on
//                          2L + 2 + q mod S (S = 2^29, more than are ever in flight between two ranks)
//   2L + 2 + S             refusals of a tag without a channel, kGlooRefusalBytes each
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "host_transport.hpp"

namespace chimera::torch_ext {

inline constexpr int kGlooUserTagLimit = 1 << 29;
inline constexpr int kGlooBarrierTag = kGlooUserTagLimit;
inline constexpr int kGlooHeaderTagBase = kGlooBarrierTag + 1;
inline constexpr int kGlooPayloadTagBase = kGlooHeaderTagBase + kGlooUserTagLimit + 1;
inline constexpr int kGlooPayloadTags = 1 << 29;
inline constexpr int kGlooRefusalTag = kGlooPayloadTagBase + kGlooPayloadTags;
/// The tags above this one are free for the transport's other users.
inline constexpr int kGlooPointToPointTagTop = kGlooRefusalTag;
/// The size of a refusal of a tag without a channel: four words, then the reason (cut to fit).
inline constexpr std::size_t kGlooRefusalBytes = 1024;

/// The point-to-point channel over `gloo` (the group's c10d gloo backend), every wait bounded by
/// `timeoutMs` (> 0), that of its gloo backend. Destroying it abandons what is still in flight
/// (its Works fail) and joins its threads.
std::unique_ptr<HostPointToPoint> makeGlooPointToPoint(c10::intrusive_ptr<c10d::Backend> gloo, std::int64_t timeoutMs);

}  // namespace chimera::torch_ext
