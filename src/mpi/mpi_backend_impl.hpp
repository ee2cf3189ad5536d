// SPDX-License-Identifier: Apache-2.0
// The MPI backend (host memory). Public entry points are in include/chimera/mpi_backend.hpp;
// this header exposes the implementation and its options to in-tree tests and tools.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/mpi_backend.hpp"
#include "common/env.hpp"
#include "core/check.hpp"
#include "mpi/arg_check.hpp"
#include "mpi/fault_notice.hpp"
#include "mpi/host_hierarchy.hpp"
#include "mpi/host_memory.hpp"
#include "mpi/library_output.hpp"
#include "mpi/mpi_group.hpp"
#include "mpi/mpi_util.hpp"
#include "mpi/peer_memory.hpp"
#include "mpi/ring.hpp"
#include "mpi/scratch_buffer.hpp"

namespace chimera::detail {

/// The public options and algorithm names (include/chimera/mpi_backend.hpp) under the names the
/// implementation uses.
using MpiAlgorithm = chimera::MpiAlgorithm;
using MpiBackendOptions = chimera::MpiBackendOptions;
using chimera::mpiAlgorithmName;

/// MpiBackendOptions::fromEnvironment.
[[nodiscard]] Status mpiBackendOptionsFromEnv(MpiBackendOptions& out);

/// createMpiBackend with explicit options.
[[nodiscard]] Status createMpiBackend(const Mesh& mesh, const MpiBackendOptions& options,
                                      std::unique_ptr<Backend>& out);
/// The backend on duplicates of `base` (whose ranks are the mesh's world ranks). `hostOfRank`,
/// when not empty, is taken as the host of every world rank instead of the one found
/// (createMpiBackendOnHosts).
[[nodiscard]] Status createMpiBackendOn(MPI_Comm base, const Mesh& mesh, const MpiBackendOptions& options,
                                        std::unique_ptr<Backend>& out, std::span<const int> hostOfRank = {});

/// Test hook: createMpiBackend over MPI_COMM_WORLD as if world rank r ran on host
/// `hostOfRank[r]` (any numbers: equal means one host), so that placements over several hosts
/// (blocks, round-robin, uneven) run on one machine. Everything that reads the placement sees
/// this one: hostOfRank(), the peer reads (within a faked host only) and the hierarchical
/// collectives. Collective over the world, bounded by options.timeoutMs; InvalidArgument when
/// the list is not one entry per world rank, Mismatch when the ranks pass different lists.
[[nodiscard]] Status createMpiBackendOnHosts(const Mesh& mesh, const MpiBackendOptions& options,
                                             std::span<const int> hostOfRank, std::unique_ptr<Backend>& out);

/// Backend over MPI_COMM_WORLD with host buffers; every call completes before it returns.
/// With argument checking off, a rank-local argument error returns at once on that rank
/// only and its peers may wait for it (as in NCCL); with it on, every rank gets the error.
/// Every wait is bounded by options.timeoutMs (bounded_wait.hpp). A Timeout or an MPI
/// failure makes the backend unusable, as NCCL's abort does: every later call returns the
/// stored error, and the destructor leaves communicators and scratch unfreed (operations may
/// still be pending on them).
class MpiBackend final : public Backend {
 public:
  /// Takes ownership of `world` (a duplicate of MPI_COMM_WORLD), `p2p` (another, for send/recv)
  /// and `notices` (another, for fault notices, fault_notice.hpp);
  /// `hosts`: the host of every world rank (findHosts); `peers`: the ranks of this host whose
  /// memory boxes are read from.
  MpiBackend(Mesh mesh, int rank, MPI_Comm world, MPI_Comm p2p, MPI_Comm notices, MpiBackendOptions options,
             std::vector<int> hosts, PeerMemory peers);
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;
  ~MpiBackend() override;

  std::string_view name() const override { return "mpi"; }
  const Mesh& mesh() const override { return mesh_; }
  /// host:N on one host; across hosts the host-network topology of where the ranks run.
  std::string defaultTopology() const override { return hostsTopologyName(hosts_); }
  int rank() const override { return rank_; }

  // Host calls: each completes before it returns, so the stream is ignored.
  Status allReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, AxisSet axes,
                   Stream stream) override;
  Status reduceScatter(const void* send, void* recv, std::size_t recvCount, DataType dtype, ReduceOp op, AxisSet axes,
                       Stream stream) override;
  Status allGather(const void* send, void* recv, std::size_t sendCount, DataType dtype, AxisSet axes,
                   Stream stream) override;
  Status allToAll(const void* send, void* recv, std::size_t countPerPeer, DataType dtype, AxisSet axes,
                  Stream stream) override;
  Status allToAllV(const void* send, std::span<const std::size_t> sendCounts, std::span<const std::size_t> sendOffsets,
                   void* recv, std::span<const std::size_t> recvCounts, std::span<const std::size_t> recvOffsets,
                   DataType dtype, AxisSet axes, Stream stream) override;
  Status broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root, AxisSet axes,
                   Stream stream) override;
  Status send(const void* buf, std::size_t count, DataType dtype, int peer, Stream stream) override;
  Status recv(void* buf, std::size_t count, DataType dtype, int peer, Stream stream) override;
  Status groupedP2P(std::span<const P2POp> ops, Stream stream) override;
  Status refuseCollective(AxisSet axes, const Status& local, Stream stream) override;
  Status agreeOnArguments(AxisSet axes, std::int64_t count, int root, const Status& local, Stream stream) override;
  Status refuseTransfers(std::span<const P2POp> ops, const Status& local, Stream stream) override;
  Status announceFault(const Status& local) override;
  bool movesBoxes(int peer) const override { return peers_.reads(peer); }
  bool movesBoxesEverywhere() const override { return peers_.readsEveryRank(); }
  std::vector<int> hostOfRank() const override { return hosts_; }

  Status allocate(std::size_t bytes, void** out) override;
  void deallocate(void* ptr) override;
  Status copy(void* dst, const void* src, std::size_t bytes, Stream stream) override;
  Status synchronize(Stream /*stream*/) override { return Status::ok(); }
  Status createGroups(std::span<const AxisSet> groups) override;
  bool hasGroup(AxisSet axes) const override { return mesh_.groupSize(axes) == 1 || groups_.contains(axes); }
  Status packBox(const void* tensor, std::span<const std::int64_t> shape, const Box& box, void* packed, DataType dtype,
                 Stream stream) override;
  Status unpackBox(const void* packed, void* tensor, std::span<const std::int64_t> shape, const Box& box,
                   DataType dtype, Stream stream) override;
  Status scale(const void* input, void* output, std::size_t count, DataType dtype, double factor,
               Stream stream) override;

  /// The options in force.
  const MpiBackendOptions& options() const { return options_; }

  /// Ok while the backend is usable; else the failure that made it unusable.
  const Status& failure() const { return failure_; }

  /// Collectives that ran the hierarchical program since creation (tests and tools check the
  /// selection with it).
  std::uint64_t hierarchicalCalls() const { return hierarchicalCalls_; }

 private:
  // Runs `body` unless the backend already failed; a Timeout or BackendError from it is
  // stored (prefixed with the text `describe()` returns) and makes the backend unusable. An
  // exception (an allocation that failed) becomes a BackendError: none leaves the backend.
  template <typename Describe, typename Body>
  Status guarded(Describe describe, Body body) {
    if (!failure_.isOk()) return unusable();
    if (notices_.gaveUp()) return fail(describe(), Status::mismatch("gave up on an earlier call after a fault notice"));
    Status status;
    try {
      status = body();
    } catch (const std::exception& e) {
      status = Status::backendError(std::string("unexpected exception: ") + e.what());
    }
    if (status.code() == StatusCode::Timeout || status.code() == StatusCode::BackendError || notices_.gaveUp())
      return fail(describe(), status);
    return status;
  }
  Status unusable() const;
  Status fail(std::string_view call, const Status& status);

  Status allReduceCall(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, AxisSet axes);
  Status reduceScatterCall(const void* send, void* recv, std::size_t recvCount, DataType dtype, ReduceOp op,
                           AxisSet axes);
  Status allGatherCall(const void* send, void* recv, std::size_t sendCount, DataType dtype, AxisSet axes);
  Status allToAllCall(const void* send, void* recv, std::size_t countPerPeer, DataType dtype, AxisSet axes);
  Status allToAllVCall(const void* send, std::span<const std::size_t> sendCounts,
                       std::span<const std::size_t> sendOffsets, void* recv, std::span<const std::size_t> recvCounts,
                       std::span<const std::size_t> recvOffsets, DataType dtype, AxisSet axes);
  Status broadcastCall(const void* send, void* recv, std::size_t count, DataType dtype, int root, AxisSet axes);
  Status groupedP2PCall(std::span<const P2POp> ops);

  // Resolves the group, then (with checking on) agrees with its members on `signature`
  // and `local`; returns `group` ready for the call or the verdict.
  Status prepare(AxisSet axes, const CallSignature& signature, const Status& local, const MpiGroup*& group);
  // Whether to run chimera's own algorithm for `kind` moving `bytes` per rank in a group of `groupSize`.
  bool usePointToPoint(OpKind kind, std::size_t bytes, int groupSize) const;
  // The hierarchy of `group` (along `axes`) when `kind` moving `bytes` per rank runs the
  // hierarchical program (its communicators made on first use); else null.
  Status chooseHierarchy(OpKind kind, std::size_t bytes, AxisSet axes, const MpiGroup& group,
                         const HostHierarchy*& out);
  Status checkPeer(int peer, std::size_t count, DataType dtype, const void* buf) const;
  // send and recv: one blocking transfer (checked, agreed, split into messages).
  Status blockingP2P(const P2POp& op);
  // With checking on, agrees with the peers of `ops` (p2p_check.hpp): a rank whose `local` is
  // an error refuses, so its peers fail at once; `failedPeers` gets the peers whose transfers
  // must not run. With checking off, `local` (the peers of a failed call wait, as in NCCL).
  Status agreeOnP2P(std::span<const P2POp> ops, const Status& local, std::vector<int>& failedPeers);
  // The local checks of an op with a box (a peer whose memory is read, a box of its shape
  // holding `count` elements); `out` the box for the reads.
  Status checkBoxOp(const P2POp& op, TensorBox& out) const;
  // Whether `count` elements fit one MPI call (options_.maxMessageCount).
  bool fitsOneCall(std::size_t count) const { return count <= messageCount(); }
  std::size_t messageCount() const {
    return std::max<std::size_t>(1, std::min(options_.maxMessageCount, kMaxMpiCount));
  }
  // Calls send(byteOffset, count) for consecutive messages of at most messageCount() elements
  // of `elementSize` bytes covering `count` elements (none for 0); stops at the first error.
  template <typename Send>
  Status forEachMessage(std::size_t count, std::size_t elementSize, Send send) const {
    const std::size_t most = messageCount();
    for (std::size_t begin = 0; begin < count; begin += most) {
      CHIMERA_RETURN_IF_ERROR(send(begin * elementSize, static_cast<int>(std::min(most, count - begin))));
    }
    return Status::ok();
  }

  // Whether library collectives write through staging_ (library_output.hpp): when a Timeout
  // returns instead of ending the job.
  bool stagesOutput() const { return !options_.abortOnTimeout; }
  static Status checkStaging(const LibraryOutput& out);
  Status libraryAllReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                          const MpiGroup& group);
  Status libraryReduceScatter(const void* send, void* recv, std::size_t recvCount, DataType dtype, ReduceOp op,
                              const MpiGroup& group);

  Mesh mesh_;
  int rank_;
  MPI_Comm world_;
  MPI_Comm p2p_;
  MpiBackendOptions options_;
  FaultNotices notices_;  // before every group whose waits take it in
  MpiGroup p2pGroup_;     // the world over p2p_, for bounded point-to-point waits
  Status failure_;        // the Timeout or MPI failure that made the backend unusable
  MpiGroupCache groups_;
  ScratchBuffer scratch_;
  ScratchBuffer staging_;  // library collectives' outputs (stagesOutput)
  HostMemory memory_;
  std::vector<int> hosts_;  // host of every world rank
  PeerMemory peers_;
  HostHierarchyCache hierarchies_;
  ScratchBuffer hierarchyStaging_;  // the hierarchical ReduceScatter's partial sums, the AllReduce's copies in flight
  std::uint64_t hierarchicalCalls_ = 0;
};

}  // namespace chimera::detail
