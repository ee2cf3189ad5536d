// SPDX-License-Identifier: Apache-2.0
// Implements the same-host peer reads of the MPI backend (process_vm_readv).
#include "backend/mpi/peer_memory.hpp"

#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <string_view>
#include <system_error>

#include "backend/mpi/bounded_wait.hpp"
#include "backend/mpi/mpi_group.hpp"
#include "backend/mpi/mpi_util.hpp"
#include "core/check.hpp"

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
#ifdef PR_SET_PTRACER
  (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // Yama scope 1 would refuse siblings
#endif
  std::random_device device;
  const std::uint64_t nonce = (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
                              static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const Announcement mine{static_cast<std::int64_t>(getpid()), reinterpret_cast<std::uint64_t>(&nonce), nonce};
  std::vector<Announcement> all(static_cast<std::size_t>(size));
  const MpiGroup world = worldGroup(comm, rank, size, timeoutMs, "the world (peer memory)");
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(
      mpiStatus(MPI_Iallgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, comm, &request),
                "MPI_Iallgather (peer memory)"));
  CHIMERA_RETURN_IF_ERROR(waitOne(world, request, kWholeGroup, "announcing this rank's memory to its host"));
  // Read each peer of this host, then tell it whether that worked and hear the same back: the
  // peer's read of this rank's nonce is over once its verdict is here.
  std::vector<int> peers;
  std::vector<std::uint8_t> readable, heard;
  for (int p = 0; p < size; ++p) {
    const Announcement& a = all[static_cast<std::size_t>(p)];
    if (p == rank || hostOfRank[static_cast<std::size_t>(p)] != hostOfRank[static_cast<std::size_t>(rank)]) continue;
    std::uint64_t value = 0;
    peers.push_back(p);
    readable.push_back(readBytes(a.pid, &value, a.nonceAddress, sizeof(value)) && value == a.nonce ? 1 : 0);
  }
  heard.assign(peers.size(), 0);
  RequestSet verdicts;
  verdicts.reserve(2 * peers.size());
  for (std::size_t i = 0; i < peers.size(); ++i) {
    CHIMERA_RETURN_IF_ERROR(
        mpiStatus(MPI_Irecv(&heard[i], 1, MPI_BYTE, peers[i], kVerdictTag, comm, &verdicts.add(peers[i])),
                  "MPI_Irecv (peer memory)"));
    CHIMERA_RETURN_IF_ERROR(
        mpiStatus(MPI_Isend(&readable[i], 1, MPI_BYTE, peers[i], kVerdictTag, comm, &verdicts.add(peers[i])),
                  "MPI_Isend (peer memory)"));
  }
  CHIMERA_RETURN_IF_ERROR(verdicts.waitAll(world, "agreeing on peer memory reads"));
  int readsAll = peers.size() == static_cast<std::size_t>(size - 1) ? 1 : 0;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (readable[i] != 0 && heard[i] != 0) {
      out.pids_[static_cast<std::size_t>(peers[i])] = all[static_cast<std::size_t>(peers[i])].pid;
    } else {
      readsAll = 0;
    }
  }
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Iallreduce(MPI_IN_PLACE, &readsAll, 1, MPI_INT, MPI_MIN, comm, &request),
                                    "MPI_Iallreduce (peer memory)"));
  CHIMERA_RETURN_IF_ERROR(waitOne(world, request, kWholeGroup, "agreeing on whether every rank reads every other"));
  out.everyRank_ = readsAll != 0;
  return Status::ok();
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
  return Status::ok();
}

}  // namespace chimera::detail
