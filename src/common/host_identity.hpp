// SPDX-License-Identifier: Apache-2.0
// Which ranks share a host (private): a key per process from its host name and boot id, and the
// hosts numbered from every rank's key, as Backend::hostOfRank reports them. The transports
// gather the keys their own way (MPI: an all-gather; gloo: the same over its context).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace chimera::detail {

/// A hash of this machine's host name and boot id: equal on two processes exactly when they run
/// on one host (a container or network namespace with its own host name counts as its own host).
std::uint64_t thisHostKey();

/// The host of every rank from every rank's key (`keys[r]`, thisHostKey on rank r): hosts numbered
/// 0, 1, ... in the order of their lowest rank (Backend::hostOfRank).
std::vector<int> hostsOfKeys(std::span<const std::uint64_t> keys);

}  // namespace chimera::detail
