// SPDX-License-Identifier: Apache-2.0
// The torch.distributed backend "chimera": a c10d::Backend whose collectives run on chimera's
// Backend interface (MPI over host memory for CPU tensors, NCCL for CUDA tensors in CUDA builds).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chimera/backend.hpp"
#include "host_transport.hpp"
#include "staging.hpp"
#include "work.hpp"

namespace chimera::torch_ext {

/// One process group's backend. CPU tensors run on its host transport (chimera's MPI backend
/// under an MPI launch, else gloo bootstrapped from the group's Store; host_transport.hpp),
/// made when the group is created; CUDA tensors (CUDA builds) on chimera's NCCL backend,
/// created on the first CUDA op from a unique id that group rank 0 publishes in the group's
/// store, ordered on the tensor's current CUDA stream.
///
/// A CPU collective issued with `async_op=True` (the options' `asyncOp`) is queued on the
/// group's op thread, which runs the group's ops one at a time in issue order, and returns a
/// Work that completes when it has run (`wait(timeout)` raises when the timeout passes first;
/// an error of the op is raised by `wait()` and set on the future). Any other collective
/// (synchronous, CUDA, inside a coalescing block) first waits for the ops queued before it,
/// then runs on the caller's thread and returns a completed Work; a CUDA op is complete once
/// it is enqueued on its stream. The op thread needs MPI_THREAD_MULTIPLE (`asyncCpu`); without
/// it every collective runs on the caller's thread. CPU send/recv return at once and complete
/// in issue order per peer and tag (the host transport's point-to-point channel); between
/// startCoalescing/endCoalescing they are posted the same way and endCoalescing returns one
/// Work for the batch (what batch_isend_irecv issues); CUDA send/recv in a batch are queued and
/// run as one grouped call at endCoalescing. Errors (bad arguments, unsupported dtype or op, a
/// transport failure) raise c10::Error, which Python sees as RuntimeError, naming the op and
/// the problem. Every op goes through one helper, `collective` (as ProcessGroupNCCL's ops go
/// through its `collective`): it counts the op, picks the backend of the op's device, and
/// either queues the op's body or runs it at once, making the Work.
class ChimeraProcessGroup final : public c10d::Backend {
 public:
  /// The group's options, as PyTorch's backends take theirs (`Options : Backend::Options`):
  /// torch's `timeout` bounds every wait of the group (its creation, its host transport's
  /// collectives and transfers, its NCCL communicator; monitoredBarrier's default), and
  /// `abortOnTimeout` says whether a Timeout on the MPI transport or NCCL ends the job.
  /// chimera.torch.Options (options.py) resolves both from the user's options, the
  /// environment and torch's timeout, and passes them here; nothing here has a default.
  struct Options : c10d::Backend::Options {
    Options(std::chrono::milliseconds timeout, bool abortOnTimeout);
    static c10::intrusive_ptr<Options> create(std::chrono::milliseconds timeout, bool abortOnTimeout) {
      return c10::make_intrusive<Options>(timeout, abortOnTimeout);
    }
    c10::intrusive_ptr<c10d::Backend::Options> clone() const override { return c10::make_intrusive<Options>(*this); }
    bool abortOnTimeout;
  };

  /// `host`: the group's host transport (both members set). `store`: the group's store, for
  /// the NCCL rendezvous. `asyncCpu`: asynchronous CPU collectives may run on the op thread
  /// (MPI_THREAD_MULTIPLE, or a transport that is thread-safe).
  ChimeraProcessGroup(int rank, int size, HostTransport host, c10::intrusive_ptr<c10d::Store> store, bool asyncCpu,
                      c10::intrusive_ptr<Options> options);
  ~ChimeraProcessGroup() override;

  const std::string getBackendName() const override { return "chimera"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }
  bool supportsCoalescing() const override { return true; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                       const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& outputSplits,
                                                   std::vector<int64_t>& inputSplits,
                                                   const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits, std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  /// CPU and CUDA: `tag` in [0, the host transport's userTagLimit()); InvalidArgument naming
  /// the tag and the range otherwise (the tags above are chimera's own).
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  /// torch's monitored barrier (monitored_barrier.hpp) with the options' timeout (the group's
  /// when none is given): the late ranks are named in rank 0's error, each rank raises on its
  /// own, and the group goes on.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  /// The number of operations issued on the group so far (equal on every rank of a group
  /// whose ranks issue the same operations).
  uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }
  /// Sparse COO all-reduce (sum): every rank's indices and values gathered, summed and
  /// coalesced; the result replaces the tensor.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  /// Whether this build runs CUDA tensors (chimera built with CUDA/NCCL).
  static bool cudaSupported();

 private:
  // Where an op runs: the backend and stream of its device.
  struct Target {
    chimera::Backend* backend;
    chimera::Stream stream;
    c10::Device device;
  };
  // A CUDA send/recv queued between startCoalescing and endCoalescing.
  struct Queued {
    Target target;
    at::Tensor tensor;  // kept alive until the grouped call
    std::optional<Staged> staged;
    P2POp op;
    c10::intrusive_ptr<ChimeraWork> work;
  };
  using Body = std::function<void(const Target&)>;

  c10::intrusive_ptr<Options> options_;
  HostTransport host_;
  std::atomic<std::uint64_t> sequence_{0};
  std::unique_ptr<chimera::Backend> device_;
  int deviceIndex_ = -1;
  c10::intrusive_ptr<c10d::Store> store_;
  bool coalescing_ = false;
  std::vector<Queued> queued_;                          // CUDA send/recv of a batch
  std::vector<c10::intrusive_ptr<c10d::Work>> posted_;  // CPU send/recv of a batch
  std::unique_ptr<OpThread> opThread_;                  // null without asyncCpu

  // Every collective: counts it, then either queues `body` on the op thread (`asyncOp` on a
  // CPU `device` tensor, or none, outside a coalescing block, with an op thread) and returns
  // its Work, or runs it at once after the ops queued before and returns a completed Work.
  // `body` gets the backend of `device`'s device (select, run where the body runs, so its
  // errors reach the Work as the body's do) and does the op's checks, staging and calls.
  c10::intrusive_ptr<c10d::Work> collective(const char* name, c10d::OpType type, bool asyncOp, const at::Tensor& device,
                                            std::vector<at::Tensor> outputs, Body body);
  // Runs `body` of op `name` on `target`; a body that fails before any backend call refuses
  // the call (Backend::refuseCollective) before raising.
  void runBody(const Body& body, const Target& target, const char* name);
  // Waits for the ops queued before and counts this one (the ops that run on the caller's thread).
  void startInline();
  // The backend for `t`'s device (undefined: the host's), creating the NCCL one on first use.
  Target select(const at::Tensor& t, const char* op);
  void createDeviceBackend(int device);

  // Op bodies that composite ops share.
  void allReduceOn(const Target& target, const char* op, const at::Tensor& tensor, const c10d::ReduceOp& reduceOp);
  void allGatherOn(const Target& target, const char* op, const at::Tensor& output, const at::Tensor& input);
  void allGatherListOn(const Target& target, std::vector<at::Tensor>& outputs, const at::Tensor& input);
  const std::vector<at::Tensor>& rootBlocks(const char* op, const char* what,
                                            const std::vector<std::vector<at::Tensor>>& lists,
                                            const at::Tensor& own) const;
  void rootedTransfers(const Target& target, const char* op, bool gathering, int root, const at::Tensor& own,
                       void* mine, const std::vector<void*>& blocks);
  void reduceScatterOn(const Target& target, const char* op, const at::Tensor& output, const at::Tensor& input,
                       const c10d::ReduceOp& reduceOp);
  at::Tensor allReduceSparseOn(const Target& target, const at::Tensor& tensor);
  void allToAllSingleOn(const Target& target, const at::Tensor& output, const at::Tensor& input,
                        const std::vector<int64_t>& outputSplits, const std::vector<int64_t>& inputSplits);
  // peer -1: a receive from any source. A send that fails on a CPU tensor refuses its peer
  // (HostPointToPoint::refuse) before it raises.
  c10::intrusive_ptr<c10d::Work> pointToPoint(std::vector<at::Tensor>& tensors, int peer, int tag, bool isSend);
  // pointToPoint's checks and transfer, once the peer is known to be another rank of the group.
  c10::intrusive_ptr<c10d::Work> transfer(std::vector<at::Tensor>& tensors, int peer, int tag, bool isSend);
};

}  // namespace chimera::torch_ext
