// SPDX-License-Identifier: Apache-2.0
// What a receive on the process group's point-to-point channel reports, on either transport
// (mpi_transfer.cpp, gloo_point_to_point.cpp), when its sender's header or control message says
// the send failed there or carries another byte count. No torch headers: the MPI part includes it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera::torch_ext {

/// Mismatch naming group rank `source`, whose send to this rank with `tag` failed there with
/// `reason` (the error it raised), so nothing was sent.
inline Status refusedSend(int source, int tag, std::string_view reason) {
  const std::string rank = std::to_string(source);
  return Status::mismatch("recv from rank " + rank + " (tag " + std::to_string(tag) + "): rank " + rank +
                          "'s send to this rank failed there, so nothing was sent: " + std::string(reason));
}

/// Mismatch naming group rank `source`, which sends `sent` bytes with `tag` to a receive that
/// expects `expected`.
inline Status otherByteCount(int source, int tag, std::int64_t sent, std::int64_t expected) {
  const std::string rank = std::to_string(source);
  const std::int64_t delta = sent > expected ? sent - expected : expected - sent;
  return Status::mismatch("recv from rank " + rank + " (tag " + std::to_string(tag) + "): rank " + rank + " sends " +
                          std::to_string(sent) + " bytes but this receive expects " + std::to_string(expected) + " (" +
                          std::to_string(delta) + " bytes " + (sent > expected ? "more" : "fewer") +
                          "): the tensors differ in size or dtype");
}

}  // namespace chimera::torch_ext
