// SPDX-License-Identifier: Apache-2.0
// Implements the same-host peer reads of the MPI backend (process_vm_readv).
#include "mpi/peer_memory.hpp"

#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <system_error>

#include "common/log.hpp"
#include "core/check.hpp"
#include "mpi/abandoned_memory.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_group.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::detail {
namespace {

constexpr int kVerdictTag = 0x504d;  // 'PM'
// iovec entries per process_vm_readv call on each side (Linux's UIO_MAXIOV).
constexpr std::size_t kIovecsPerRead = 1024;

// What each rank tells the others at creation.
struct Announcement {
  std::int64_t pid = 0;
  std::uint64_t nonceAddress = 0;
  std::uint64_t nonce = 0;
  Ancestry ancestry{};
};

// Reads `bytes` at `remote` of process `pid` into `local`; whether all of them arrived.
bool readBytes(std::int64_t pid, void* local, std::uint64_t remote, std::size_t bytes) {
  iovec mine{local, bytes};
  iovec theirs{reinterpret_cast<void*>(remote), bytes};
  return process_vm_readv(static_cast<pid_t>(pid), &mine, 1, &theirs, 1, 0) == static_cast<ssize_t>(bytes);
}

// The runs of a box, one after another: where each starts (elements) and how long it is.
class RunCursor {
 public:
  RunCursor(const TensorBox& box, std::size_t elementSize)
      : runs_(boxRuns(box)), runBytes_(static_cast<std::size_t>(runs_.runLength) * elementSize), es_(elementSize) {}
  bool done() const { return run_ >= runs_.numRuns; }
  std::size_t offset() const { return static_cast<std::size_t>(runOffset(runs_, run_)) * es_ + within_; }
  std::size_t left() const { return runBytes_ - within_; }
  void advance(std::size_t bytes) {
    within_ += bytes;
    if (within_ == runBytes_) {
      within_ = 0;
      ++run_;
    }
  }

 private:
  BoxRuns runs_;
  std::size_t runBytes_;
  std::size_t es_;
  std::int64_t run_ = 0;
  std::size_t within_ = 0;
};

}  // namespace

Status PeerMemory::create(MPI_Comm comm, int rank, int size, std::int64_t timeoutMs, bool enabled,
                          const std::vector<int>& hostOfRank, PeerMemory& out) {
  out.pids_.assign(static_cast<std::size_t>(size), 0);
  if (!enabled || size == 1) return Status::ok();
  std::random_device device;
  const std::uint64_t nonce = (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
                              static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const MpiGroup world = worldGroup(comm, rank, size, timeoutMs, "the world (peer memory)");
  // MPI writes these while the requests are pending: the sets own them, so that a late peer
  // completes into memory that is still chimera's after a Timeout.
  auto mine = std::make_shared<Announcement>(
      Announcement{static_cast<std::int64_t>(getpid()), reinterpret_cast<std::uint64_t>(&nonce), nonce, ownAncestry()});
  auto all = std::make_shared<std::vector<Announcement>>(static_cast<std::size_t>(size));
  {
    RequestSet announce;
    announce.keep(mine);
    announce.keep(all);
    CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Iallgather(mine.get(), sizeof(Announcement), MPI_BYTE, all->data(),
                                                     sizeof(Announcement), MPI_BYTE, comm, &announce.add(kWholeGroup)),
                                      "MPI_Iallgather (peer memory)"));
    CHIMERA_RETURN_IF_ERROR(announce.waitAll(world, "announcing this rank's memory to its host"));
  }
  std::vector<int> peers;
  for (int p = 0; p < size; ++p) {
    if (p != rank && hostOfRank[static_cast<std::size_t>(p)] == hostOfRank[static_cast<std::size_t>(rank)])
      peers.push_back(p);
  }
  const auto announcement = [&](std::size_t i) -> const Announcement& {
    return (*all)[static_cast<std::size_t>(peers[i])];
  };
  // Round 1 reads every peer of this host as things are; round 2, only under Yama scope 1, retries
  // the pairs where a read failed after the refused ranks declared their launcher as ptracer.
  // Both ends of a pair know both verdicts after a round, so they retry alike.
  auto readable = std::make_shared<std::vector<std::uint8_t>>(peers.size(), 0);
  auto heard = std::make_shared<std::vector<std::uint8_t>>(peers.size(), 0);
  const auto round = [&](const std::vector<std::size_t>& which, std::string_view what) -> Status {
    RequestSet verdicts;
    verdicts.keep(readable);
    verdicts.keep(heard);
    verdicts.reserve(2 * which.size());
    for (const std::size_t i : which) {
      const Announcement& a = announcement(i);
      std::uint64_t value = 0;
      (*readable)[i] = readBytes(a.pid, &value, a.nonceAddress, sizeof(value)) && value == a.nonce ? 1 : 0;
    }
    // Each peer's verdict on this rank arrives after its read of this rank's nonce is over.
    for (const std::size_t i : which) {
      CHIMERA_RETURN_IF_ERROR(
          mpiStatus(MPI_Irecv(&(*heard)[i], 1, MPI_BYTE, peers[i], kVerdictTag, comm, &verdicts.add(peers[i])),
                    "MPI_Irecv (peer memory)"));
      CHIMERA_RETURN_IF_ERROR(
          mpiStatus(MPI_Isend(&(*readable)[i], 1, MPI_BYTE, peers[i], kVerdictTag, comm, &verdicts.add(peers[i])),
                    "MPI_Isend (peer memory)"));
    }
    return verdicts.waitAll(world, what);
  };
  std::vector<std::size_t> everyPeer(peers.size());
  for (std::size_t i = 0; i < peers.size(); ++i) everyPeer[i] = i;
  CHIMERA_RETURN_IF_ERROR(round(everyPeer, "agreeing on peer memory reads"));
  const int scope = yamaPtraceScope();
  std::vector<std::size_t> retry, refusedPeers;
  std::vector<Ancestry> refused;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if ((*readable)[i] != 0 && (*heard)[i] != 0) continue;
    retry.push_back(i);
    if ((*heard)[i] == 0) {
      refusedPeers.push_back(i);
      refused.push_back(announcement(i).ancestry);
    }
  }
  if (scope == 1 && !retry.empty()) {
    const PtraceGrant grant = decidePtraceGrant(scope, mine->ancestry, refused);
    CHIMERA_LOG_DEBUG("mpi", "peer reads: {}", grant.reason);
    if (grant.tracer != 0) {
      const Status declared = out.declaration_.declare(grant.tracer);
      if (!declared.isOk()) CHIMERA_LOG_DEBUG("mpi", "peer reads: {}", declared.message());
    }
    CHIMERA_RETURN_IF_ERROR(round(retry, "agreeing on peer memory reads (after declaring a ptracer)"));
  }
  int readsAll = peers.size() == static_cast<std::size_t>(size - 1) ? 1 : 0;
  bool anyPair = false;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if ((*readable)[i] != 0 && (*heard)[i] != 0) {
      out.pids_[static_cast<std::size_t>(peers[i])] = announcement(i).pid;
      anyPair = true;
    } else {
      readsAll = 0;
    }
  }
  // A declaration no refused peer ended up using is taken back at once.
  const bool declarationUsed = std::any_of(refusedPeers.begin(), refusedPeers.end(),
                                           [&](std::size_t i) { return (*readable)[i] != 0 && (*heard)[i] != 0; });
  if (!declarationUsed) out.declaration_.release();
  if (anyPair) {
    out.lease_ = std::make_shared<std::atomic<std::uint64_t>>(0);
    keepUntilExit(out.lease_);
  }
  auto agreed = std::make_shared<int>(readsAll);
  RequestSet verdict;
  verdict.keep(agreed);
  CHIMERA_RETURN_IF_ERROR(
      mpiStatus(MPI_Iallreduce(MPI_IN_PLACE, agreed.get(), 1, MPI_INT, MPI_MIN, comm, &verdict.add(kWholeGroup)),
                "MPI_Iallreduce (peer memory)"));
  CHIMERA_RETURN_IF_ERROR(verdict.waitAll(world, "agreeing on whether every rank reads every other"));
  out.everyRank_ = *agreed != 0;
  return Status::ok();
}

namespace {

// Lease values: a random start, then one per lease, never 0 (the revoked value).
std::uint64_t nextLeaseValue() {
  static std::atomic<std::uint64_t> next{(static_cast<std::uint64_t>(std::random_device()()) << 32) | 1};
  std::uint64_t value = next.fetch_add(1);
  return value == 0 ? next.fetch_add(1) : value;
}

}  // namespace

PeerMemory::Lease::Lease(const PeerMemory& memory) : word_(memory.lease_.get()), value_(nextLeaseValue()) {
  if (word_ != nullptr) word_->store(value_, std::memory_order_seq_cst);
}

PeerMemory::Lease::~Lease() {
  // Before the sender's call returns and its caller may change the tensor: a reader that checks
  // the word after its read then sees that the read may have raced with a change.
  if (word_ != nullptr) word_->store(0, std::memory_order_seq_cst);
}

void PeerMemory::Lease::stamp(BoxAddress& address) const {
  address.leaseAddress = reinterpret_cast<std::uint64_t>(word_);
  address.lease = value_;
}

bool PeerMemory::reads(int peer) const {
  return peer >= 0 && static_cast<std::size_t>(peer) < pids_.size() && pids_[static_cast<std::size_t>(peer)] != 0;
}

Status PeerMemory::read(int peer, const BoxAddress& from, void* base, std::size_t elementSize,
                        const TensorBox& box) const {
  CHIMERA_CHECK_ARG(reads(peer), "rank {} is not a peer whose memory this rank reads", peer);
  bool same = from.elementSize == elementSize && from.box.ndims == box.ndims;
  for (int d = 0; same && d < box.ndims; ++d) same = from.box.extent[d] == box.extent[d];
  if (!same || boxError(from.box) != nullptr || boxError(box) != nullptr)
    return Status::invalidArgument(
        fmt::format("box from rank {} ({} dims of {} bytes) does not match the box this rank receives ({} dims of {} "
                    "bytes, or other extents)",
                    peer, from.box.ndims, from.elementSize, box.ndims, elementSize));
  RunCursor remote(from.box, elementSize), local(box, elementSize);
  std::vector<iovec> theirs, mine;
  theirs.reserve(kIovecsPerRead);
  mine.reserve(kIovecsPerRead);
  auto* bytes = static_cast<std::byte*>(base);
  while (!remote.done()) {
    // Pieces contiguous on both sides, up to the iovec limit.
    theirs.clear();
    mine.clear();
    std::size_t batch = 0;
    while (!remote.done() && theirs.size() < kIovecsPerRead) {
      const std::size_t piece = std::min(remote.left(), local.left());
      theirs.push_back({reinterpret_cast<void*>(from.address + remote.offset()), piece});
      mine.push_back({bytes + local.offset(), piece});
      remote.advance(piece);
      local.advance(piece);
      batch += piece;
    }
    const ssize_t got = process_vm_readv(static_cast<pid_t>(pids_[static_cast<std::size_t>(peer)]), mine.data(),
                                         mine.size(), theirs.data(), theirs.size(), 0);
    if (got != static_cast<ssize_t>(batch)) {
      const std::string why = got < 0 ? std::error_code(errno, std::generic_category()).message()
                                      : fmt::format("{} of {} bytes arrived", got, batch);
      return Status::backendError(fmt::format("reading a box from rank {}'s memory: {}", peer, why));
    }
  }
  // Checked after the data: a lease still held now was held during the whole read.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::uint64_t lease = 0;
  if (!readBytes(pids_[static_cast<std::size_t>(peer)], &lease, from.leaseAddress, sizeof(lease)) ||
      lease != from.lease || from.lease == 0)
    return Status::backendError(fmt::format(
        "rank {} withdrew the box this rank was reading (it gave up on the transfer, and its tensor may have "
        "changed during the read); the data read is not used",
        peer));
  return Status::ok();
}

}  // namespace chimera::detail
