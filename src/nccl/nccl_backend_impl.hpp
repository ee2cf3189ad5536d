// SPDX-License-Identifier: Apache-2.0
// The NCCL backend (private): Backend on device buffers over one world communicator and
// one ncclCommSplit sub-communicator per axis group.
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/mesh.hpp"
#include "chimera/status.hpp"
#include "common/agreement.hpp"
#include "nccl/nccl_api.hpp"
#include "nccl/nccl_options.hpp"

namespace chimera::detail {

/// Polls ncclCommGetAsyncError on every communicator of `comms` until none reports
/// ncclInProgress (the state of a non-blocking communicator while NCCL works on a call).
/// ok when all report ncclSuccess; BackendError naming `what` and NCCL's message when one
/// reports an error; Timeout naming `what` when `timeout` passes first. Aborts nothing.
[[nodiscard]] Status awaitNccl(std::span<const ncclComm_t> comms, std::chrono::milliseconds timeout,
                               std::string_view what);

/// ncclCommSplit(parent, color, key) in non-blocking mode, bounded by `timeout`. NCCL (2.23
/// and later) writes the child's handle only once the parent has left ncclInProgress, which
/// may be after the call returned: the parent is awaited first, then the handle is read and
/// the child awaited. `out` is the child, or null when the split failed before giving one
/// (past the timeout the handle's slot is left to NCCL, which may still write it). Aborts
/// nothing: on an error the caller aborts `out` (when set) and whatever else it must.
[[nodiscard]] Status splitCommunicator(const NcclApi& api, ncclComm_t parent, int color, int key,
                                       std::chrono::milliseconds timeout, std::string_view what, ncclComm_t& out);

/// Backend over NCCL. Owns `world` (and the sub-communicators it splits from it). Every
/// communicator is non-blocking (ncclConfig_t::blocking = 0): each NCCL call is followed by
/// awaitNccl, so creation, splits, enqueues, group ends and teardown are all bounded by
/// options.timeout; past it, or on an asynchronous error, every communicator is aborted.
class NcclBackend final : public Backend {
 public:
  NcclBackend(const Mesh& mesh, int rank, int device, ncclComm_t world, const NcclApi& api, NcclBackendOptions options);
  ~NcclBackend() override;
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  std::string_view name() const override { return "nccl"; }
  const Mesh& mesh() const override { return mesh_; }
  int rank() const override { return rank_; }
  /// CUDA device this rank drives.
  int device() const { return device_; }
  /// The NCCL library found at run time.
  const NcclApi& api() const { return api_; }

  // Every call is enqueued on the cudaStream_t its caller passes.
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
  Status exchangeCounts(std::span<const std::int32_t> send, std::span<std::int32_t> recv, AxisSet axes,
                        Stream stream) override;
  Status broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root, AxisSet axes,
                   Stream stream) override;
  Status send(const void* buf, std::size_t count, DataType dtype, int peer, Stream stream) override;
  Status recv(void* buf, std::size_t count, DataType dtype, int peer, Stream stream) override;
  Status groupedP2P(std::span<const P2POp> ops, Stream stream) override;
  Status refuseCollective(AxisSet axes, const Status& local, Stream stream) override;
  Status agreeOnArguments(AxisSet axes, std::int64_t count, int root, const Status& local, Stream stream) override;

  Status allocate(std::size_t bytes, void** out) override;
  void deallocate(void* ptr) override;
  Status allocateHost(std::size_t bytes, void** out) override;
  void deallocateHost(void* ptr) override;
  Status packBox(const void* tensor, std::span<const std::int64_t> shape, const Box& box, void* packed, DataType dtype,
                 Stream stream) override;
  Status unpackBox(const void* packed, void* tensor, std::span<const std::int64_t> shape, const Box& box,
                   DataType dtype, Stream stream) override;
  Status packBoxes(const void* tensor, std::span<const std::int64_t> shape, std::span<const Box> boxes,
                   std::span<void* const> packed, DataType dtype, Stream stream) override;
  Status unpackBoxes(std::span<const void* const> packed, void* tensor, std::span<const std::int64_t> shape,
                     std::span<const Box> boxes, DataType dtype, Stream stream) override;
  bool capturing(Stream stream) const override;
  Status scale(const void* input, void* output, std::size_t count, DataType dtype, double factor,
               Stream stream) override;
  Status copy(void* dst, const void* src, std::size_t bytes, Stream stream) override;
  Status synchronize(Stream stream) override;
  /// Creates the communicators of `groups` (axis sets; the world and groups made before are
  /// skipped), one ncclCommSplit of the world each, in the order given, after draining the
  /// legacy default stream (which waits for every blocking stream). Collective over the
  /// world: every rank passes the same list. A group first used without it is created on
  /// that use (createGroupsOn the call's stream), which fails with InvalidArgument while
  /// that stream is being captured into a CUDA graph.
  Status createGroups(std::span<const AxisSet> groups) override;
  bool hasGroup(AxisSet axes) const override;

 private:
  // The communicator of the group along `axes` containing this rank (created on first use,
  // after draining `stream`).
  Status group(AxisSet axes, Stream stream, ncclComm_t& out);
  // createGroups, draining `stream` first and refusing while it is being captured.
  Status createGroupsOn(std::span<const AxisSet> groups, Stream stream);
  // BackendError once the communicators were aborted.
  Status usable() const;
  // Aborts every communicator (after an asynchronous error or a timeout), in one group
  // where the library allows it, so no abort waits for a peer of another communicator.
  void abortAll();
  // Every communicator of the backend, the world last.
  std::vector<ncclComm_t> communicators() const;
  // After NCCL call `what` returned `result` on `comms`: its error, or awaitNccl on them;
  // an error or timeout there aborts every communicator (and is returned).
  Status settle(ncclResult_t result, std::span<const ncclComm_t> comms, std::string_view what);
  // settle on one communicator.
  Status settle(ncclResult_t result, ncclComm_t comm, std::string_view what) {
    return settle(result, std::span<const ncclComm_t>(&comm, 1), what);
  }
  // `status` itself; when it is an error, every communicator is aborted first (and the job
  // ended where options.abortOnTimeout says so).
  Status failAll(Status status);
  // With checkArgs: agrees with the other members of `comm` on the call (common/agreement.hpp,
  // reduced by one MIN ncclAllReduce on `stream`) and waits for the stream; without: returns `local`.
  Status agree(ncclComm_t comm, AxisSet axes, const CallSignature& signature, const Status& local, Stream stream);
  // Grouped point-to-point exchange of AllToAll (NCCL without ncclAlltoAll).
  Status allToAllGrouped(const void* send, void* recv, std::size_t countPerPeer, DataType dtype, ncclComm_t comm,
                         Stream stream);

  Mesh mesh_;
  int rank_;
  int device_;
  ncclComm_t world_;
  const NcclApi& api_;
  std::map<std::uint32_t, ncclComm_t> groups_;  // AxisSet bits -> split communicator
  NcclBackendOptions options_;
  std::string abortReason_;                  // non-empty once aborted
  std::int64_t* agreementHost_ = nullptr;    // pinned agreement words (created on first check)
  std::int64_t* agreementDevice_ = nullptr;  // device copy of the words
  std::size_t agreementBytes_ = 0;           // size of both
  std::int32_t* countsHost_ = nullptr;       // pinned count-exchange words: send then receive
  std::int32_t* countsDevice_ = nullptr;     // device copy of them
  std::size_t countsBytes_ = 0;              // size of both
};

}  // namespace chimera::detail
