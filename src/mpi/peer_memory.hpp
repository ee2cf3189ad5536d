// SPDX-License-Identifier: Apache-2.0
// Reading a peer's memory on the same host (private): ranks of one machine that can read each
// other's address space (Linux cross-memory attach, process_vm_readv, the mechanism of Open
// MPI's shared-memory single copy) move a box of one rank's tensor into a box of another's in
// one copy: no pack on the sender, no unpack on the receiver, no contiguous staging between.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "box/box_index.hpp"
#include "chimera/status.hpp"
#include "mpi/ptrace_permission.hpp"

namespace chimera::detail {

/// What a sender tells its receiver about a box it sends: where its tensor starts in the
/// sender's address space, its element size and the box, and the lease the reader checks after
/// reading: the word at `leaseAddress` in the sender holds `lease` while the sender still waits
/// for the reader, and changes before the sender returns (done or timed out), after which its
/// tensor is the caller's again.
struct BoxAddress {
  std::uint64_t address = 0;
  std::uint64_t elementSize = 0;
  TensorBox box;
  std::uint64_t leaseAddress = 0;
  std::uint64_t lease = 0;
};

/// The peers on this host whose memory this rank reads, and they its.
class PeerMemory {
 public:
  /// Collective over `comm` (the backend's world, `rank` of `size`), bounded by `timeoutMs`:
  /// takes the ranks of this host from `hostOfRank` (findHosts), reads a nonce from each and
  /// agrees pairwise, so that movesBoxes answers alike on both ranks of a pair. Where a pair
  /// fails under Yama scope 1, the refused rank declares the nearest ancestor it shares with the
  /// peers that could not read it as its ptracer (ptrace_permission.hpp) and the pair tries once
  /// more; the declaration is cleared again when no peer reads this rank, and when the PeerMemory
  /// goes. Then the world agrees on whether every pair reads. `enabled` false (no declaration, no
  /// read), or a read that fails: no peer (the backend packs).
  [[nodiscard]] static Status create(MPI_Comm comm, int rank, int size, std::int64_t timeoutMs, bool enabled,
                                     const std::vector<int>& hostOfRank, PeerMemory& out);

  /// A sender's lease on its tensors while a reader may read them: the word and the value a
  /// BoxAddress carries; revoked (the word changes) when the Lease goes, before the sender's call
  /// returns.
  class Lease {
   public:
    /// Takes a lease on the tensors of this rank that `memory`'s peers read.
    explicit Lease(const PeerMemory& memory);
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    /// Fills the lease fields of `address`.
    void stamp(BoxAddress& address) const;

   private:
    std::atomic<std::uint64_t>* word_;
    std::uint64_t value_;
  };
  /// The pid chimera declared as this rank's ptracer for these peers (0: none).
  std::int64_t ptracer() const { return declaration_.tracer(); }

  /// Whether boxes move with world rank `peer` by reading memory.
  bool reads(int peer) const;
  /// Whether every rank of the world reads every other rank's memory (agreed by all ranks).
  bool readsEveryRank() const { return everyRank_; }

  /// Copies the box `from` (the memory of world rank `peer`) into `box` of the tensor at
  /// `base` (this rank's) with element size `elementSize`: InvalidArgument when the boxes'
  /// extents or element sizes differ, BackendError naming the system error when a read fails,
  /// and BackendError when the sender's lease was revoked by the time the read ended (it gave up
  /// on the transfer and its tensor may have changed during the read).
  [[nodiscard]] Status read(int peer, const BoxAddress& from, void* base, std::size_t elementSize,
                            const TensorBox& box) const;

 private:
  std::vector<std::int64_t> pids_;  // per world rank; 0 where boxes do not move by reading
  bool everyRank_ = false;
  PtracerDeclaration declaration_;
  // The lease word peers read (never freed: a peer may check it after this rank gave up).
  std::shared_ptr<std::atomic<std::uint64_t>> lease_;
};

}  // namespace chimera::detail
