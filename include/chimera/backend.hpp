// SPDX-License-Identifier: Apache-2.0
// The Backend interface (stable API): the plain collectives and point-to-point calls on mesh
// axis groups, the memory operations a plan needs, and NCCL's conventions for in-place calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/mesh.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"
#include "chimera/types.hpp"

namespace chimera {

/// Opaque execution stream. For the NCCL backend a `cudaStream_t`; ignored (nullptr) by
/// host backends, whose calls complete before they return.
using Stream = void*;

/// One transfer of a grouped point-to-point call.
struct P2POp {
  enum class Kind : std::uint8_t { Send, Recv };
  Kind kind = Kind::Send;
  /// Send: source buffer; Recv: destination buffer. Must not be null when count > 0.
  void* buffer = nullptr;
  /// Elements of `dtype`.
  std::size_t count = 0;
  DataType dtype = DataType::F32;
  /// World rank of the peer.
  int peer = 0;
  /// Transfers between two ranks match only transfers on the same channel, in order (MPI: a
  /// message tag per channel). Channel 0 carries data; the Session's hand-off descriptions
  /// travel on 1, so that a description can never be taken for data by a peer running a
  /// different program. NCCL has no tags: there every transfer between a pair matches in order.
  std::uint8_t channel = 0;
  /// Not null: `buffer` is a row-major tensor of `shape` and the transfer moves its `box`
  /// (`count` = the box's volume) straight from the sender's tensor into the receiver's, with
  /// no pack and no unpack. Only where Backend::movesBoxes(peer), and then on both sides of the
  /// pair (the receiver's box has the sender's extents). `shape` and `box` outlive the call.
  const Box* box = nullptr;
  std::span<const std::int64_t> shape{};
};

/// The cost model of a backend over host memory on one machine (its `defaultTopology`): the
/// preset "host:N" for a mesh of `ranks` ranks, fitted to MPI on one machine.
std::string hostTopology(int ranks);
/// The cost model of a launch whose ranks run on `hostOfRank` (Backend::hostOfRank): hostTopology
/// when they all run on one host, else "hosts:H0,H1,..." (the preset prefix kHostsPresetPrefix
/// of chimera/planning/topology.hpp), the host-network topology of where the ranks run.
std::string hostsTopologyName(std::span<const int> hostOfRank);

/// The communication interface every transport implements: MPI over host memory, NCCL over
/// device memory. A backend is bound to one Mesh; groups are named by mesh axes (`AxisSet`).
/// The communicator of each group is created by `createGroups` at setup, or else on first
/// use (collectively over the world), and cached.
///
/// Every collective is *collective over the group*: each rank of the group along `axes`
/// that contains the caller must make the matching call. Counts are in elements. Buffers
/// live in the backend's memory space (host for MPI, device for NCCL). `send == recv` is
/// in-place where the description allows it. The stream belongs to the caller: every call
/// that does work takes the `stream` it is ordered on as its last argument (NCCL: a
/// cudaStream_t, nullptr the legacy default stream; host backends ignore it and complete the
/// call before returning). A backend keeps no stream of its own, so callers on different
/// streams (an Executor run, a Session, the C API) share one backend without interfering.
///
/// Errors: InvalidArgument for bad input (null buffer with count > 0, empty axes, count not
/// divisible, dtype/op unsupported), Mismatch when argument checking is on
/// (`CHIMERA_CHECK_ARGS=1`, default in debug builds) and ranks of the group pass different
/// counts/dtypes/ops (returned on every rank), BackendError when the transport fails.
class Backend {
 public:
  virtual ~Backend() = default;

  /// "mpi" or "nccl".
  virtual std::string_view name() const = 0;
  /// The mesh this backend serves.
  virtual const Mesh& mesh() const = 0;
  /// The cost model a Session prices this backend's plans with when its options name none
  /// (`SessionOptions::topology`), and an Executor or a routed exchange without
  /// `CHIMERA_TOPOLOGY`: a topology preset or profile, or "bytes" (bytes alone).
  /// Host backends: "host:N" (hostTopology; N = the mesh's ranks), the preset fitted to MPI on one
  /// machine, when every rank runs on one host; across hosts (hostOfRank) the MPI backend gives
  /// "hosts:H0,H1,..." (hostsTopologyName), the host-network topology of where its ranks run.
  /// The default, for a backend no preset describes (NCCL), "bytes".
  virtual std::string defaultTopology() const { return "bytes"; }
  /// This process's world rank.
  virtual int rank() const = 0;

  /// recv[i] = op over the group of send[i], i < count. In-place when send == recv.
  [[nodiscard]] virtual Status allReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                                         AxisSet axes, Stream stream = nullptr) = 0;
  /// send holds n*recvCount elements; group member g receives block g reduced over the group.
  /// In-place when recv == send + g*recvCount*size (NCCL's convention).
  [[nodiscard]] virtual Status reduceScatter(const void* send, void* recv, std::size_t recvCount, DataType dtype,
                                             ReduceOp op, AxisSet axes, Stream stream = nullptr) = 0;
  /// recv (n*sendCount elements) = concatenation of every member's send, by group index.
  /// In-place when send == recv + g*sendCount*size.
  [[nodiscard]] virtual Status allGather(const void* send, void* recv, std::size_t sendCount, DataType dtype,
                                         AxisSet axes, Stream stream = nullptr) = 0;
  /// send and recv hold n blocks of countPerPeer; block j of member i's send lands in block i
  /// of member j's recv. Out-of-place only (send != recv).
  [[nodiscard]] virtual Status allToAll(const void* send, void* recv, std::size_t countPerPeer, DataType dtype,
                                        AxisSet axes, Stream stream = nullptr) = 0;
  /// Uneven all-to-all: block j of this rank's send (`sendCounts[j]` elements at element offset
  /// `sendOffsets[j]`) lands in block i of member j's recv (`recvCounts[i]` elements at
  /// `recvOffsets[i]` there), i = this rank's group index. The spans hold one entry per group
  /// member, by group index; `sendCounts[j]` here must equal `recvCounts[i]` on member j (the
  /// caller learns them, e.g. with exchangeCounts). Blocks must not overlap between send and
  /// recv. Default: one groupedP2P of the group's blocks (the block to itself is a local copy).
  /// MPI: point-to-point transfers straight into recv under the bounded wait; NCCL: grouped
  /// ncclSend/ncclRecv.
  [[nodiscard]] virtual Status allToAllV(const void* send, std::span<const std::size_t> sendCounts,
                                         std::span<const std::size_t> sendOffsets, void* recv,
                                         std::span<const std::size_t> recvCounts,
                                         std::span<const std::size_t> recvOffsets, DataType dtype, AxisSet axes,
                                         Stream stream = nullptr);
  /// The count exchange of an uneven all-to-all: `send` (host memory) holds c entries per group
  /// member, block j for member j; it lands in block i of member j's `recv` (as large), i = this
  /// rank's group index; returns once `recv` is readable on the host. One all-to-all of 4c bytes
  /// per peer. Default: allToAll of I32 on the host arrays (host backends); NCCL stages them
  /// through device memory and synchronizes `stream` (the one host copy of a routed dispatch).
  [[nodiscard]] virtual Status exchangeCounts(std::span<const std::int32_t> send, std::span<std::int32_t> recv,
                                              AxisSet axes, Stream stream = nullptr);
  /// Copies the group member with index `root`'s send into every member's recv.
  /// `send` is read on the root only. In-place when send == recv.
  [[nodiscard]] virtual Status broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                                         AxisSet axes, Stream stream = nullptr) = 0;
  /// Point-to-point send to world rank `peer`.
  [[nodiscard]] virtual Status send(const void* buf, std::size_t count, DataType dtype, int peer,
                                    Stream stream = nullptr) = 0;
  /// Point-to-point receive from world rank `peer`.
  [[nodiscard]] virtual Status recv(void* buf, std::size_t count, DataType dtype, int peer,
                                    Stream stream = nullptr) = 0;
  /// Issues every transfer of `ops` together and completes them all (the many-to-many
  /// primitive; NCCL: one ncclGroupStart/End). Ops between the same pair of ranks match in order.
  /// MPI with argument checking: a pair whose transfers disagree, or a peer whose own checks
  /// failed (it refuses), is Mismatch and only that pair's transfers are dropped; the others
  /// complete before the call returns.
  [[nodiscard]] virtual Status groupedP2P(std::span<const P2POp> ops, Stream stream = nullptr) = 0;
  /// For a rank whose call of a collective on `axes` failed before reaching the backend (a
  /// wrapper's own check, `local`, an error): takes part in the argument agreement the other
  /// members' collective starts with, as a member with bad arguments, so that their call fails
  /// at once (InvalidArgument) instead of waiting for this rank until the timeout. Returns
  /// `local` (or BackendError / Timeout when the agreement itself fails). Where the backend
  /// agrees on no arguments (CHIMERA_CHECK_ARGS off, or a backend without the check) it returns
  /// `local` without communicating, and the other members wait as they would.
  [[nodiscard]] virtual Status refuseCollective(AxisSet /*axes*/, const Status& local, Stream /*stream*/ = nullptr) {
    return local;
  }
  /// For a rank whose send, recv or groupedP2P failed before reaching the backend (a wrapper's
  /// own check, `local`, an error): takes part in the per-pair argument agreement the peers of
  /// `ops` start their transfers with, as a rank refusing (only each op's kind and peer are
  /// read), so that their calls fail at once (Mismatch naming this rank) instead of waiting for
  /// it until the timeout. Returns `local` (or BackendError / Timeout when the agreement itself
  /// fails). Where the backend agrees on no arguments (CHIMERA_CHECK_ARGS off, or a backend
  /// without the check) it returns `local` without communicating.
  [[nodiscard]] virtual Status refuseTransfers(std::span<const P2POp> /*ops*/, const Status& local,
                                               Stream /*stream*/ = nullptr) {
    return local;
  }
  /// For a rank whose call failed (`local`, an error) before the group or the peers it would run
  /// with were known (axes naming no group of the mesh, a handle of another object): its peers
  /// may wait in that call for this rank, in a group this rank cannot name, so it tells every
  /// rank of the world (MPI: a fault notice, docs/reliability.md). A peer whose wait then makes
  /// no progress from this rank for 200 ms gives up (Mismatch naming this rank) instead of
  /// waiting for its timeout; that peer's backend is unusable afterwards, since the call's
  /// messages it had sent stay unmatched, and a later call of this rank that waits on it gives
  /// up the same way. Ranks that all fail in the same call leave nobody waiting and stay
  /// usable. Returns `local`. Where the backend has no such notice (NCCL, gloo) it returns
  /// `local` without communicating, and the peers wait until their timeout.
  virtual Status announceFault(const Status& local) { return local; }
  /// The argument agreement alone, for a collective a caller composes of point-to-point
  /// transfers (a gather, a scatter, an uneven all-to-all as one groupedP2P): collective over
  /// `axes`, each member passing `count` (what must be equal on every member, -1 where the
  /// members' counts differ by design), `root` (0 where there is none) and `local`, the verdict
  /// of its own checks. One round, the one a collective of the backend starts with; a member
  /// whose call fails before it gets here joins with refuseCollective instead. Returns `local`
  /// when it is an error; Mismatch naming the lowest member whose `local` was an error (or that
  /// refused), or naming `count` or `root` when they differ; ok otherwise (BackendError /
  /// Timeout when the agreement itself fails). Where the backend agrees on no arguments
  /// (CHIMERA_CHECK_ARGS off, or a backend without the check) it returns `local` without
  /// communicating.
  [[nodiscard]] virtual Status agreeOnArguments(AxisSet /*axes*/, std::int64_t /*count*/, int /*root*/,
                                                const Status& local, Stream /*stream*/ = nullptr) {
    return local;
  }
  /// Whether grouped transfers with world rank `peer` may carry boxes (P2POp::box): the
  /// receiver reads the sender's box from its memory in one copy (MPI: ranks of one host that
  /// can read each other's memory, docs/performance.md). The same answer on both ranks of a
  /// pair. Default: no.
  virtual bool movesBoxes(int /*peer*/) const { return false; }
  /// Whether movesBoxes holds between every pair of ranks of the world, the same answer on
  /// every rank: the cost model of an Executor or Session then prices many-to-many boxes as
  /// moved, not packed and unpacked (Topology::movesBoxes). Default: no.
  virtual bool movesBoxesEverywhere() const { return false; }
  /// The host of every world rank (indexed by world rank): hosts numbered 0, 1, ... in the
  /// order of their lowest rank, so world rank 0 is on host 0. Ranks share a host when they
  /// share the host name and the boot id (MPI: found at creation, the same on every rank).
  /// Default: every rank on host 0, for a backend that cannot tell.
  virtual std::vector<int> hostOfRank() const { return std::vector<int>(static_cast<std::size_t>(mesh().size()), 0); }

  /// Allocates `bytes` in the backend's memory space (scratch for plans). InvalidArgument on 0.
  [[nodiscard]] virtual Status allocate(std::size_t bytes, void** out) = 0;
  /// Frees memory from allocate. nullptr is a no-op.
  virtual void deallocate(void* ptr) = 0;
  /// Allocates `bytes` of host memory that `copy` moves to and from the backend's memory
  /// without staging (NCCL: pinned, cudaMallocHost; host backends: ordinary memory). Small
  /// control data (agreement words) goes through it. InvalidArgument on 0.
  [[nodiscard]] virtual Status allocateHost(std::size_t bytes, void** out) {
    if (out == nullptr || bytes == 0) return Status::invalidArgument("allocateHost: null output or 0 bytes");
    *out = ::operator new(bytes, std::nothrow);
    return *out != nullptr ? Status::ok() : Status::backendError("allocateHost: out of host memory");
  }
  /// Frees memory from allocateHost. nullptr is a no-op.
  virtual void deallocateHost(void* ptr) { ::operator delete(ptr); }
  /// Local copy within the backend's memory space, ordered on `stream`.
  [[nodiscard]] virtual Status copy(void* dst, const void* src, std::size_t bytes, Stream stream = nullptr) = 0;
  /// Local op (no communication), ordered on `stream`: copies the elements of `box` (local
  /// coordinates) of the row-major tensor of `shape` at `tensor` into `packed`, contiguous in
  /// row-major box order. `tensor` and `packed` must not overlap. InvalidArgument on a null
  /// pointer or a box that does not fit `shape`.
  [[nodiscard]] virtual Status packBox(const void* tensor, std::span<const std::int64_t> shape, const Box& box,
                                       void* packed, DataType dtype, Stream stream = nullptr) = 0;
  /// The inverse of packBox: writes the contiguous `packed` elements into `box` of the tensor
  /// of `shape` at `tensor`, leaving the rest untouched. Same rules and errors.
  [[nodiscard]] virtual Status unpackBox(const void* packed, void* tensor, std::span<const std::int64_t> shape,
                                         const Box& box, DataType dtype, Stream stream = nullptr) = 0;
  /// packBox of several boxes of one tensor: `boxes[i]` into `packed[i]` (equal lengths),
  /// in as few launches as the backend can (NCCL: one kernel per 16 boxes). Same rules and
  /// errors as packBox. Default: one packBox per box.
  [[nodiscard]] virtual Status packBoxes(const void* tensor, std::span<const std::int64_t> shape,
                                         std::span<const Box> boxes, std::span<void* const> packed, DataType dtype,
                                         Stream stream = nullptr) {
    if (boxes.size() != packed.size()) return Status::invalidArgument("packBoxes: boxes and packed differ in length");
    for (std::size_t i = 0; i < boxes.size(); ++i) {
      if (Status s = packBox(tensor, shape, boxes[i], packed[i], dtype, stream); !s.isOk()) return s;
    }
    return Status::ok();
  }
  /// unpackBox of several boxes of one tensor: `packed[i]` into `boxes[i]` (equal lengths;
  /// boxes must not overlap), in as few launches as the backend can. Default: one unpackBox per box.
  [[nodiscard]] virtual Status unpackBoxes(std::span<const void* const> packed, void* tensor,
                                           std::span<const std::int64_t> shape, std::span<const Box> boxes,
                                           DataType dtype, Stream stream = nullptr) {
    if (boxes.size() != packed.size()) return Status::invalidArgument("unpackBoxes: boxes and packed differ in length");
    for (std::size_t i = 0; i < boxes.size(); ++i) {
      if (Status s = unpackBox(packed[i], tensor, shape, boxes[i], dtype, stream); !s.isOk()) return s;
    }
    return Status::ok();
  }
  /// Whether `stream` is being captured into a CUDA graph right now (host backends: never).
  /// The Executor pins the prepared plans it runs during a capture, since the graph keeps
  /// their scratch addresses.
  virtual bool capturing(Stream stream) const {
    (void)stream;
    return false;
  }
  /// Local op, ordered on `stream`: output[i] = input[i] * factor for i < count (integers:
  /// computed in double, truncated toward zero, saturated). In place when input == output.
  [[nodiscard]] virtual Status scale(const void* input, void* output, std::size_t count, DataType dtype, double factor,
                                     Stream stream = nullptr) = 0;
  /// Waits until every call issued so far on `stream` has completed (host: returns at once).
  [[nodiscard]] virtual Status synchronize(Stream stream = nullptr) = 0;

  /// Creates the communicators of the groups along each axis set of `groups` (MPI_Comm_split,
  /// ncclCommSplit), those that do not exist yet, in the order given. Collective over the
  /// world: every rank calls it with the same list, once, at setup, as a framework creates
  /// its process groups at initialisation. Callers that record per rank (a Session with
  /// `SessionOptions::perRank`) need every group they use created this way: a group's
  /// communicator is otherwise made on first use, collectively over the world, which a
  /// call made by one pipeline stage alone cannot do. The MPI backend and the gloo mesh
  /// backend (chimera.torch) first agree on the list of groups to make: ranks passing
  /// different lists all return Mismatch and none is made. Nothing is sent when every group
  /// exists. InvalidArgument for an empty axis set or axes the mesh lacks; BackendError when
  /// the transport fails.
  [[nodiscard]] virtual Status createGroups(std::span<const AxisSet> groups) = 0;
  /// True when the communicator of the group along `axes` exists on this rank (a single-rank
  /// group always counts as existing). Local.
  virtual bool hasGroup(AxisSet axes) const = 0;
};

}  // namespace chimera
