// SPDX-License-Identifier: Apache-2.0
// The torch.distributed backend "chimera": a c10d::Backend whose collectives run on chimera's
// Backend interface (MPI over host memory for CPU tensors, NCCL for CUDA tensors in CUDA builds).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chimera/backend.hpp"

namespace chimera::torch_ext {

/// One process group's backend. CPU tensors run on chimera's MPI backend over the group's
/// ranks; CUDA tensors (CUDA builds) on chimera's NCCL backend, created on the first CUDA op
/// from a unique id that group rank 0 publishes in the group's store, ordered on the tensor's
/// current CUDA stream.
///
/// A CPU collective issued with `async_op=True` (the options' `asyncOp`) is queued on the
/// group's op thread, which runs the group's ops one at a time in issue order, and returns a
/// Work that completes when it has run (`wait(timeout)` raises when the timeout passes first;
/// an error of the op is raised by `wait()` and set on the future). Any other op (synchronous,
/// CUDA, send/recv, inside a coalescing block) first waits for the ops queued before it, then
/// runs on the caller's thread and returns a completed Work; a CUDA op is complete once it is
/// enqueued on its stream. The op thread needs MPI_THREAD_MULTIPLE (`asyncCpu`); without it
/// every op runs on the caller's thread. Between startCoalescing/endCoalescing, send and recv
/// are queued and run together as one grouped point-to-point call at endCoalescing (what
/// batch_isend_irecv issues). Errors (bad arguments, unsupported dtype or op, a transport
/// failure) raise c10::Error, which Python sees as RuntimeError, naming the op and the problem.
class ChimeraProcessGroup final : public c10d::Backend {
 public:
  /// Makes the MPI backend (a one-axis mesh over exactly this group's ranks; collective over
  /// them).
  using HostFactory = std::function<Status(std::unique_ptr<chimera::Backend>&)>;
  /// `makeHost` runs on the first CPU op (torch creates one backend per device type, and a
  /// group used for CUDA tensors only needs no MPI communicator); when `hostError` is not
  /// empty, CPU ops raise it instead. `store`: the group's store, for the NCCL rendezvous.
  /// `asyncCpu`: asynchronous CPU ops may run on the op thread (MPI_THREAD_MULTIPLE).
  ChimeraProcessGroup(int rank, int size, HostFactory makeHost, std::string hostError,
                      c10::intrusive_ptr<c10d::Store> store, bool asyncCpu);
  ~ChimeraProcessGroup() override;

  const std::string getBackendName() const override { return "chimera"; }
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
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  /// Whether this build runs CUDA tensors (chimera built with CUDA/NCCL).
  static bool cudaSupported();

 private:
  struct Queued;
  class OpThread;
  HostFactory makeHost_;
  std::unique_ptr<chimera::Backend> host_;
  std::string hostError_;
  std::unique_ptr<chimera::Backend> device_;
  int deviceIndex_ = -1;
  c10::intrusive_ptr<c10d::Store> store_;
  chimera::Backend* backend_ = nullptr;  // the one the current op runs on (select)
  chimera::Stream stream_ = nullptr;     // the stream it runs on: the tensor device's current stream (select)
  bool coalescing_ = false;
  std::vector<Queued> queued_;
  std::unique_ptr<OpThread> opThread_;  // null without asyncCpu

  // An op asked for asynchronously (`asyncOp`) on a CPU tensor `t` (undefined: no tensor) is
  // queued on the op thread as `run` and its Work returned; otherwise returns null after the
  // ops queued before have completed, and the caller runs the op itself.
  c10::intrusive_ptr<c10d::Work> defer(bool asyncOp, const at::Tensor& t, c10d::OpType type,
                                       std::vector<at::Tensor> outputs, std::function<void()> run);

  c10::intrusive_ptr<c10d::Work> pointToPoint(std::vector<at::Tensor>& tensors, int peer, bool isSend);
  // Picks the backend for `t`'s device (creating the NCCL one on first use) as backend_.
  void select(const at::Tensor& t, const char* op);
  void createDeviceBackend(int device);
};

}  // namespace chimera::torch_ext
