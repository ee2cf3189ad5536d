// SPDX-License-Identifier: Apache-2.0
// Reading a peer's memory on the same host (private): ranks of one machine that can read each
// other's address space (Linux cross-memory attach, process_vm_readv, the mechanism of Open
// MPI's shared-memory single copy) move a box of one rank's tensor into a box of another's in
// one copy: no pack on the sender, no unpack on the receiver, no contiguous staging between.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "box/box_index.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// What a sender tells its receiver about a box it sends: where its tensor starts in the
/// sender's address space, its element size and the box.
struct BoxAddress {
  std::uint64_t address = 0;
  std::uint64_t elementSize = 0;
  TensorBox box;
};

/// The peers on this host whose memory this rank reads, and they its.
class PeerMemory {
 public:
  /// Collective over `comm` (the backend's world, `rank` of `size`), bounded by `timeoutMs`:
  /// takes the ranks of this host from `hostOfRank` (findHosts), reads a nonce from each (after
  /// allowing every process of this user to read this one, as Open MPI does under Yama's
  /// ptrace scope 1) and agrees pairwise, so that movesBoxes answers alike on both ranks of a
  /// pair, then over the world on whether every pair reads. `enabled` false, or a read that
  /// fails: no peer (the backend packs).
  [[nodiscard]] static Status create(MPI_Comm comm, int rank, int size, std::int64_t timeoutMs, bool enabled,
                                     const std::vector<int>& hostOfRank, PeerMemory& out);

  /// Whether boxes move with world rank `peer` by reading memory.
  bool reads(int peer) const;
  /// Whether every rank of the world reads every other rank's memory (agreed by all ranks).
  bool readsEveryRank() const { return everyRank_; }

  /// Copies the box `from` (the memory of world rank `peer`) into `box` of the tensor at
  /// `base` (this rank's) with element size `elementSize`: InvalidArgument when the boxes'
  /// extents or element sizes differ, BackendError naming the system error when a read fails.
  [[nodiscard]] Status read(int peer, const BoxAddress& from, void* base, std::size_t elementSize,
                            const TensorBox& box) const;

 private:
  std::vector<std::int64_t> pids_;  // per world rank; 0 where boxes do not move by reading
  bool everyRank_ = false;
};

}  // namespace chimera::detail
