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

#include "backend/nccl/nccl_agreement.hpp"
#include "chimera/backend.hpp"
#include "chimera/mesh.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// Settings of an NCCL backend.
struct NcclBackendOptions {
  /// How long synchronize() waits for a stream that stops progressing before it aborts.
  std::chrono::milliseconds timeout{600000};
  /// AllToAll as grouped ncclSend/ncclRecv even where NCCL has ncclAlltoAll.
  bool groupedAllToAll = false;
  /// Cross-rank argument agreement before every collective (one small extra allreduce and a
  /// wait for the stream): Mismatch on every rank instead of a hang.
  bool checkArgs = false;
};

/// Reads CHIMERA_TIMEOUT_MS (a positive integer of milliseconds), CHIMERA_NCCL_ALLTOALL
/// (native | grouped) and CHIMERA_CHECK_ARGS (0/1/on/off/true/false; default on in debug
/// builds) into `out`. InvalidArgument quoting the text when one is malformed.
[[nodiscard]] Status ncclBackendOptionsFromEnv(NcclBackendOptions& out);

/// Backend over NCCL. Owns `world` (and the sub-communicators it splits from it).
class NcclBackend final : public Backend {
 public:
  NcclBackend(const Mesh& mesh, int rank, int device, ncclComm_t world, NcclBackendOptions options);
  ~NcclBackend() override;
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  std::string_view name() const override { return "nccl"; }
  const Mesh& mesh() const override { return mesh_; }
  int rank() const override { return rank_; }
  /// CUDA device this rank drives.
  int device() const { return device_; }

  Status allReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                   AxisSet axes) override;
  Status reduceScatter(const void* send, void* recv, std::size_t recvCount, DataType dtype, ReduceOp op,
                       AxisSet axes) override;
  Status allGather(const void* send, void* recv, std::size_t sendCount, DataType dtype, AxisSet axes) override;
  Status allToAll(const void* send, void* recv, std::size_t countPerPeer, DataType dtype, AxisSet axes) override;
  Status broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                   AxisSet axes) override;
  Status send(const void* buf, std::size_t count, DataType dtype, int peer) override;
  Status recv(void* buf, std::size_t count, DataType dtype, int peer) override;
  Status groupedP2P(std::span<const P2POp> ops) override;

  Status allocate(std::size_t bytes, void** out) override;
  void deallocate(void* ptr) override;
  Status allocateHost(std::size_t bytes, void** out) override;
  void deallocateHost(void* ptr) override;
  Status packBox(const void* tensor, std::span<const std::int64_t> shape, const Box& box, void* packed,
                 DataType dtype) override;
  Status unpackBox(const void* packed, void* tensor, std::span<const std::int64_t> shape, const Box& box,
                   DataType dtype) override;
  Status scale(const void* input, void* output, std::size_t count, DataType dtype, double factor) override;
  Status copy(void* dst, const void* src, std::size_t bytes) override;
  Status synchronize() override;
  Status createGroups(std::span<const AxisSet> groups) override;
  bool hasGroup(AxisSet axes) const override;

 private:
  // The communicator of the group along `axes` containing this rank (created on first use).
  Status group(AxisSet axes, ncclComm_t& out);
  // BackendError once the communicators were aborted.
  Status usable() const;
  // Aborts every communicator (after an asynchronous error or a timeout).
  void abortAll();
  // With checkArgs: agrees with the other members of `comm` on the call (see
  // nccl_agreement.hpp) and waits for the stream; without: returns `local`.
  Status agree(ncclComm_t comm, AxisSet axes, const NcclCallSignature& signature, const Status& local);
  // Grouped point-to-point exchange of AllToAll (NCCL without ncclAlltoAll).
  Status allToAllGrouped(const void* send, void* recv, std::size_t countPerPeer, DataType dtype, ncclComm_t comm);

  Mesh mesh_;
  int rank_;
  int device_;
  ncclComm_t world_;
  std::map<std::uint32_t, ncclComm_t> groups_;  // AxisSet bits -> split communicator
  NcclBackendOptions options_;
  std::string abortReason_;  // non-empty once aborted
  std::int64_t* agreementHost_ = nullptr;    // pinned, kAgreementValues (created on first check)
  std::int64_t* agreementDevice_ = nullptr;  // device, kAgreementValues
};

}  // namespace chimera::detail
