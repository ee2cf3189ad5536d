// SPDX-License-Identifier: Apache-2.0
// The c10d::Backend "chimera" (see process_group.hpp): torch tensors in, chimera Backend calls
// out. Every collective goes through `collective`; each op's body checks its arguments, stages
// its tensors (staging.hpp) and calls the backend of its device.
#include "process_group.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#if defined(CHIMERA_HAS_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "chimera/nccl_backend.hpp"
#endif

#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <typeinfo>
#include <utility>

#include "monitored_barrier.hpp"
#include "staging.hpp"

namespace chimera::torch_ext {
namespace {

using c10d::OpType;

const AxisSet kGroup = wholeGroup();

}  // namespace

ChimeraProcessGroup::Options::Options(std::chrono::milliseconds timeout, bool abortOnTimeout)
    : c10d::Backend::Options("chimera", timeout), abortOnTimeout(abortOnTimeout) {}

ChimeraProcessGroup::ChimeraProcessGroup(int rank, int size, HostTransport host, c10::intrusive_ptr<c10d::Store> store,
                                         bool asyncCpu, c10::intrusive_ptr<Options> options)
    : c10d::Backend(rank, size), options_(std::move(options)), host_(std::move(host)), store_(std::move(store)) {
  TORCH_CHECK(host_.backend != nullptr && host_.p2p != nullptr, "chimera process group: no host transport");
  TORCH_CHECK(options_ && options_->timeout.count() > 0, "chimera process group: no options or a timeout <= 0");
  // Started here rather than on the first asynchronous op, so no two threads ever race to make it.
  if (asyncCpu) opThread_ = std::make_unique<OpThread>();
}

// The op thread finishes what is queued before the backends it uses go.
ChimeraProcessGroup::~ChimeraProcessGroup() { opThread_.reset(); }

WorkPtr ChimeraProcessGroup::collective(const char* name, OpType type, bool asyncOp, const at::Tensor& device,
                                        std::vector<at::Tensor> outputs, Body body) {
  const bool cpu = !device.defined() || device.device().is_cpu();
  if (asyncOp && cpu && opThread_ != nullptr && !coalescing_) {
    ++sequence_;
    auto work = c10::make_intrusive<ChimeraWork>(rank_, type, std::move(outputs), false);
    opThread_->push(work, [this, name, device, body = std::move(body)] { runBody(body, select(device, name), name); });
    return work;
  }
  startInline();
  runBody(body, select(device, name), name);
  return completedWork(rank_, type, std::move(outputs));
}

// An op whose own checks fail before it reaches the backend still takes part in the argument
// agreement its peers' calls start with (Backend::refuseCollective), so that every rank's call
// fails at once instead of the peers waiting in theirs until the timeout; the check's error is
// raised here as the backend's verdict on this rank ("chimera <op>: invalid argument: ..."),
// or as it was where it is not a plain c10::Error (a TypeError, say). The ops made of
// point-to-point transfers (gather, scatter, the all-to-alls) start with that agreement too
// (Backend::agreeOnArguments), before their first transfer.
void ChimeraProcessGroup::runBody(const Body& body, const Target& target, const char* name) {
  const std::uint64_t before = backendResults();
  try {
    body(target);
  } catch (const c10::Error& error) {
    if (backendResults() != before) throw;  // the backend saw the call: its verdict is every rank's
    // The check's message less its "chimera <op>: " (the verdict names the op again).
    std::string message = error.what_without_backtrace();
    if (const std::size_t colon = message.find(": "); message.rfind("chimera ", 0) == 0 && colon != std::string::npos)
      message.erase(0, colon + 2);
    const Status refused = target.backend->refuseCollective(kGroup, Status::invalidArgument(message), target.stream);
    if (typeid(error) != typeid(c10::Error)) throw;
    check(name, refused);
  }
}

void ChimeraProcessGroup::startInline() {
  if (opThread_ != nullptr) opThread_->drain();
  ++sequence_;
}

bool ChimeraProcessGroup::cudaSupported() {
#if defined(CHIMERA_HAS_CUDA)
  return true;
#else
  return false;
#endif
}

ChimeraProcessGroup::Target ChimeraProcessGroup::select(const at::Tensor& t, const char* op) {
  if (!t.defined() || t.device().is_cpu()) return {host_.backend.get(), nullptr, c10::Device(c10::kCPU)};
#if defined(CHIMERA_HAS_CUDA)
  TORCH_CHECK(t.device().is_cuda(), "chimera ", op, ": tensor on ", t.device().str(), " (CPU and CUDA are supported)");
  const int device = t.device().index();
  if (device_ == nullptr) createDeviceBackend(device);
  TORCH_CHECK(device == deviceIndex_, "chimera ", op, ": tensor on cuda:", device,
              " but this process group runs on cuda:", deviceIndex_, " (one device per rank)");
  return {device_.get(), c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream(), t.device()};
#else
  TORCH_CHECK(false, "chimera ", op, ": tensor on ", t.device().str(),
              "; this build runs CPU tensors only (chimera was built without CUDA/NCCL)");
#endif
}

void ChimeraProcessGroup::createDeviceBackend(int device) {
#if defined(CHIMERA_HAS_CUDA)
  // Group rank 0 makes the NCCL unique id and publishes it in the group's store; the others
  // wait for it there (the store's timeout bounds the wait).
  const std::string key = "chimera/nccl_unique_id";
  NcclUniqueId id;
  if (rank_ == 0) {
    check("NCCL unique id", createNcclUniqueId(id));
    store_->set(key, std::vector<uint8_t>(id.bytes.begin(), id.bytes.end()));
  } else {
    const std::vector<uint8_t> bytes = store_->get(key);
    TORCH_CHECK(bytes.size() == id.bytes.size(), "chimera: NCCL unique id of ", bytes.size(), " bytes in the store");
    std::memcpy(id.bytes.data(), bytes.data(), bytes.size());
  }
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  std::unique_ptr<chimera::Backend> backend;
  NcclBackendOptions options;
  check("NCCL backend options", NcclBackendOptions::fromEnvironment(options));
  options.timeoutMs = static_cast<std::uint64_t>(options_->timeout.count());
  options.abortOnTimeout = options_->abortOnTimeout;
  check("NCCL backend", createNcclBackend(Mesh::flat(size_, "group"), rank_, device, id, options, backend));
  device_ = std::move(backend);
  deviceIndex_ = device;
#else
  (void)device;
#endif
}

void ChimeraProcessGroup::allReduceOn(const Target& target, const char* op, const at::Tensor& tensor,
                                      const c10d::ReduceOp& reduceOp) {
  requireDenseOn(op, tensor, target.device);
  const ReduceType type = reduceTypeOf(op, tensor.scalar_type());
  const ReduceOp reduce = reduceOpOf(op, reduceOp, !at::isFloatingType(tensor.scalar_type()));
  Staged t(tensor, type.staged, true);
  check(op, target.backend->allReduce(t.data(), t.data(), static_cast<std::size_t>(t.buffer().numel()), type.dtype,
                                      reduce, kGroup, target.stream));
  t.commit();
}

void ChimeraProcessGroup::allGatherOn(const Target& target, const char* op, const at::Tensor& output,
                                      const at::Tensor& input) {
  requireDenseOn(op, input, target.device);
  requireDenseOn(op, output, target.device);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chimera ", op, ": output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_, "chimera ", op, ": output has ", output.numel(),
              " elements, expected ", size_, " x ", input.numel());
  Staged in(input, true);
  Staged out(output, false);
  check(op, target.backend->allGather(in.data(), out.data(), in.bytes(), DataType::U8, kGroup, target.stream));
  out.commit();
}

void ChimeraProcessGroup::allGatherListOn(const Target& target, std::vector<at::Tensor>& outputs,
                                          const at::Tensor& input) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "chimera all_gather: expects ", size_, " output tensors");
  requireDenseOn("all_gather", input, target.device);
  std::vector<int64_t> shape{size_};
  shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
  at::Tensor flat = at::empty(shape, input.options().memory_format(at::MemoryFormat::Contiguous));
  allGatherOn(target, "all_gather", flat, input);
  for (int i = 0; i < size_; ++i) {
    at::Tensor& out = outputs[static_cast<std::size_t>(i)];
    requireDenseOn("all_gather", out, target.device);
    TORCH_CHECK(out.numel() == input.numel(), "chimera all_gather: output ", i, " has ", out.numel(),
                " elements, input has ", input.numel());
    out.copy_(flat[i].view(out.sizes()));
  }
}

void ChimeraProcessGroup::reduceScatterOn(const Target& target, const char* op, const at::Tensor& output,
                                          const at::Tensor& input, const c10d::ReduceOp& reduceOp) {
  requireDenseOn(op, input, target.device);
  requireDenseOn(op, output, target.device);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chimera ", op, ": output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_, "chimera ", op, ": input has ", input.numel(),
              " elements, expected ", size_, " x ", output.numel());
  const ReduceType type = reduceTypeOf(op, input.scalar_type());
  const ReduceOp reduce = reduceOpOf(op, reduceOp, !at::isFloatingType(input.scalar_type()));
  Staged in(input, type.staged, true);
  Staged out(output, type.staged, false);
  check(op, target.backend->reduceScatter(in.data(), out.data(), static_cast<std::size_t>(output.numel()), type.dtype,
                                          reduce, kGroup, target.stream));
  out.commit();
}

WorkPtr ChimeraProcessGroup::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  return collective("broadcast", OpType::BROADCAST, opts.asyncOp, firstOf(tensors), tensors,
                    [this, tensors, opts](const Target& target) {
                      requireOne("broadcast", tensors);
                      requireDenseOn("broadcast", tensors[0], target.device);
                      TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "chimera broadcast: root ",
                                  opts.rootRank, " is not a rank of this group of ", size_);
                      Staged t(tensors[0], true);
                      check("broadcast",
                            target.backend->broadcast(t.data(), t.data(), t.bytes(), DataType::U8,
                                                      static_cast<int>(opts.rootRank), kGroup, target.stream));
                      t.commit();
                    });
}

WorkPtr ChimeraProcessGroup::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse()) return allreduce_sparse(tensors, opts);
  return collective("allreduce", OpType::ALLREDUCE, opts.asyncOp, firstOf(tensors), tensors,
                    [this, tensors, opts](const Target& target) {
                      requireOne("allreduce", tensors);
                      allReduceOn(target, "allreduce", tensors[0], opts.reduceOp);
                    });
}

WorkPtr ChimeraProcessGroup::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                 const c10d::AllreduceCoalescedOptions& opts) {
  return collective("allreduce_coalesced", OpType::ALLREDUCE_COALESCED, opts.asyncOp, firstOf(tensors), tensors,
                    [this, tensors, opts](const Target& target) {
                      for (const auto& tensor : tensors) allReduceOn(target, "allreduce", tensor, opts.reduceOp);
                    });
}

WorkPtr ChimeraProcessGroup::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  return collective("reduce", OpType::REDUCE, opts.asyncOp, firstOf(tensors), tensors,
                    [this, tensors, opts](const Target& target) {
                      requireOne("reduce", tensors);
                      requireDenseOn("reduce", tensors[0], target.device);
                      TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "chimera reduce: root ", opts.rootRank,
                                  " is not a rank of this group of ", size_);
                      // Non-root tensors stay as they were (as with MPI_Reduce): reduce a copy there.
                      at::Tensor copy = tensors[0].clone(at::MemoryFormat::Contiguous);
                      allReduceOn(target, "reduce", copy, opts.reduceOp);
                      if (rank_ == opts.rootRank) tensors[0].copy_(copy);
                    });
}

WorkPtr ChimeraProcessGroup::all_gather_single(at::Tensor& output, at::Tensor& input,
                                               const c10d::AllgatherOptions& opts) {
  return collective(
      "all_gather_into_tensor", OpType::_ALLGATHER_BASE, opts.asyncOp, input, {output},
      [this, output, input](const Target& target) { allGatherOn(target, "all_gather_into_tensor", output, input); });
}

WorkPtr ChimeraProcessGroup::_allgather_base(at::Tensor& output, at::Tensor& input,
                                             const c10d::AllgatherOptions& opts) {
  return all_gather_single(output, input, opts);
}

WorkPtr ChimeraProcessGroup::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                       const c10d::AllgatherOptions& opts) {
  return collective(
      "all_gather", OpType::ALLGATHER, opts.asyncOp, firstOf(inputs),
      outputs.empty() ? std::vector<at::Tensor>{} : outputs[0], [this, outputs, inputs](const Target& target) mutable {
        requireOne("all_gather", inputs);
        TORCH_CHECK(outputs.size() == 1, "chimera all_gather: expects one list of outputs, got ", outputs.size());
        allGatherListOn(target, outputs[0], inputs[0]);
      });
}

WorkPtr ChimeraProcessGroup::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                 std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> all;
  for (auto& list : outputs) all.insert(all.end(), list.begin(), list.end());
  return collective("allgather_coalesced", OpType::ALLGATHER_COALESCED, opts.asyncOp, firstOf(inputs), all,
                    [this, outputs, inputs](const Target& target) {
                      // outputs[r][i]: rank r's copy of input i (c10d's layout: one list per rank).
                      TORCH_CHECK(static_cast<int>(outputs.size()) == size_,
                                  "chimera allgather_coalesced: ", outputs.size(), " output lists for a group of ",
                                  size_, " (one list per rank)");
                      for (std::size_t r = 0; r < outputs.size(); ++r)
                        TORCH_CHECK(outputs[r].size() == inputs.size(), "chimera allgather_coalesced: output list ", r,
                                    " has ", outputs[r].size(), " tensors for ", inputs.size(), " inputs");
                      for (std::size_t i = 0; i < inputs.size(); ++i) {
                        std::vector<at::Tensor> copies;
                        for (const auto& list : outputs) copies.push_back(list[i]);
                        allGatherListOn(target, copies, inputs[i]);
                      }
                    });
}

WorkPtr ChimeraProcessGroup::all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllgatherOptions& opts) {
  return collective("allgather_into_tensor_coalesced", OpType::COALESCED, opts.asyncOp, firstOf(inputs), outputs,
                    [this, outputs, inputs](const Target& target) {
                      TORCH_CHECK(outputs.size() == inputs.size(),
                                  "chimera allgather_into_tensor_coalesced: ", outputs.size(), " outputs for ",
                                  inputs.size(), " inputs");
                      for (std::size_t i = 0; i < inputs.size(); ++i)
                        allGatherOn(target, "all_gather_into_tensor", outputs[i], inputs[i]);
                    });
}

WorkPtr ChimeraProcessGroup::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) {
  return all_gather_single_coalesced(outputs, inputs, opts);
}

WorkPtr ChimeraProcessGroup::reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::ReduceScatterOptions& opts) {
  return collective("reduce_scatter_tensor", OpType::_REDUCE_SCATTER_BASE, opts.asyncOp, input, {output},
                    [this, output, input, opts](const Target& target) {
                      reduceScatterOn(target, "reduce_scatter_tensor", output, input, opts.reduceOp);
                    });
}

WorkPtr ChimeraProcessGroup::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                  const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_single(output, input, opts);
}

WorkPtr ChimeraProcessGroup::reduce_scatter(std::vector<at::Tensor>& outputs,
                                            std::vector<std::vector<at::Tensor>>& inputs,
                                            const c10d::ReduceScatterOptions& opts) {
  return collective("reduce_scatter", OpType::REDUCE_SCATTER, opts.asyncOp, firstOf(outputs), outputs,
                    [this, outputs, inputs, opts](const Target& target) {
                      requireOne("reduce_scatter", outputs);
                      TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                                  "chimera reduce_scatter: expects ", size_, " input tensors");
                      std::vector<at::Tensor> flat;
                      for (const auto& t : inputs[0]) {
                        requireDenseOn("reduce_scatter", t, target.device);
                        TORCH_CHECK(t.numel() == outputs[0].numel(), "chimera reduce_scatter: an input has ", t.numel(),
                                    " elements, the output ", outputs[0].numel());
                        flat.push_back(t.reshape({-1}));
                      }
                      reduceScatterOn(target, "reduce_scatter", outputs[0], at::cat(flat), opts.reduceOp);
                    });
}

WorkPtr ChimeraProcessGroup::reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  return collective("reduce_scatter_tensor_coalesced", OpType::COALESCED, opts.asyncOp, firstOf(inputs), outputs,
                    [this, outputs, inputs, opts](const Target& target) {
                      TORCH_CHECK(outputs.size() == inputs.size(),
                                  "chimera reduce_scatter_tensor_coalesced: ", outputs.size(), " outputs for ",
                                  inputs.size(), " inputs");
                      for (std::size_t i = 0; i < inputs.size(); ++i)
                        reduceScatterOn(target, "reduce_scatter_tensor", outputs[i], inputs[i], opts.reduceOp);
                    });
}

WorkPtr ChimeraProcessGroup::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_single_coalesced(outputs, inputs, opts);
}

void ChimeraProcessGroup::allToAllSingleOn(const Target& target, const at::Tensor& output, const at::Tensor& input,
                                           const std::vector<int64_t>& outputSplits,
                                           const std::vector<int64_t>& inputSplits) {
  const char* op = "all_to_all_single";
  requireDenseOn(op, input, target.device);
  requireDenseOn(op, output, target.device);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chimera all_to_all_single: output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  Staged in(input, true);
  Staged out(output, false);
  auto* src = static_cast<const std::uint8_t*>(in.data());
  auto* dst = static_cast<std::uint8_t*>(out.data());
  if (inputSplits.empty() && outputSplits.empty()) {
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % size_ == 0,
                "chimera all_to_all_single: ", input.numel(), " input and ", output.numel(),
                " output elements cannot split evenly over ", size_, " ranks");
    if (input.numel() > 0)
      check(op, target.backend->allToAll(src, dst, in.bytes() / static_cast<std::size_t>(size_), DataType::U8, kGroup,
                                         target.stream));
    out.commit();
    return;
  }
  // Uneven splits along dim 0: one grouped exchange of each peer's rows.
  auto rowBytes = [](const at::Tensor& t) -> std::size_t {
    return t.dim() == 0 || t.size(0) == 0 ? 0 : bytesOf(t) / static_cast<std::size_t>(t.size(0));
  };
  auto splitsOf = [&](std::vector<int64_t> splits, const at::Tensor& t, const char* which) {
    if (splits.empty()) {
      TORCH_CHECK(t.dim() > 0 && t.size(0) % size_ == 0, "chimera all_to_all_single: ", which,
                  " dim 0 does not split evenly over ", size_, " ranks");
      splits.assign(static_cast<std::size_t>(size_), t.size(0) / size_);
    }
    TORCH_CHECK(static_cast<int>(splits.size()) == size_, "chimera all_to_all_single: ", splits.size(), " ", which,
                " split sizes for ", size_, " ranks");
    const int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
    TORCH_CHECK(t.dim() > 0 && total == t.size(0), "chimera all_to_all_single: ", which, " split sizes sum to ", total,
                " but dim 0 has ", t.dim() > 0 ? t.size(0) : 0, " rows");
    return splits;
  };
  const std::vector<int64_t> sendRows = splitsOf(inputSplits, input, "input");
  const std::vector<int64_t> recvRows = splitsOf(outputSplits, output, "output");
  const std::size_t inRow = rowBytes(input);
  const std::size_t outRow = rowBytes(output);
  TORCH_CHECK(inRow == outRow || inRow == 0 || outRow == 0, "chimera all_to_all_single: input rows of ", inRow,
              " bytes, output rows of ", outRow);
  std::vector<P2POp> ops;
  std::size_t sendOffset = 0;
  std::size_t recvOffset = 0;
  std::size_t selfBytes = 0, selfFrom = 0, selfTo = 0;
  for (int peer = 0; peer < size_; ++peer) {
    const std::size_t sendBytes = static_cast<std::size_t>(sendRows[static_cast<std::size_t>(peer)]) * inRow;
    const std::size_t recvBytes = static_cast<std::size_t>(recvRows[static_cast<std::size_t>(peer)]) * outRow;
    if (peer == rank_) {
      TORCH_CHECK(sendBytes == recvBytes, "chimera all_to_all_single: this rank sends itself ", sendBytes,
                  " bytes but expects ", recvBytes);
      selfBytes = sendBytes;
      selfFrom = sendOffset;
      selfTo = recvOffset;
    } else {
      if (sendBytes > 0)
        ops.push_back({P2POp::Kind::Send, const_cast<std::uint8_t*>(src + sendOffset), sendBytes, DataType::U8, peer});
      if (recvBytes > 0) ops.push_back({P2POp::Kind::Recv, dst + recvOffset, recvBytes, DataType::U8, peer});
    }
    sendOffset += sendBytes;
    recvOffset += recvBytes;
  }
  // Every check is done: the group agrees on the verdicts before the first transfer (the blocks'
  // sizes differ by design; each pair's are compared by groupedP2P's own agreement).
  check(op, target.backend->agreeOnArguments(kGroup, -1, 0, Status::ok(), target.stream));
  if (selfBytes > 0) check(op, target.backend->copy(dst + selfTo, src + selfFrom, selfBytes, target.stream));
  check(op, target.backend->groupedP2P(ops, target.stream));
  out.commit();
}

WorkPtr ChimeraProcessGroup::all_to_all_single(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits, std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) {
  return collective("all_to_all_single", OpType::ALLTOALL_BASE, opts.asyncOp, input, {output},
                    [this, output, input, outputSplits, inputSplits](const Target& target) {
                      allToAllSingleOn(target, output, input, outputSplits, inputSplits);
                    });
}

WorkPtr ChimeraProcessGroup::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                                           std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) {
  return all_to_all_single(output, input, outputSplits, inputSplits, opts);
}

WorkPtr ChimeraProcessGroup::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                      const c10d::AllToAllOptions& opts) {
  return collective("all_to_all", OpType::ALLTOALL, opts.asyncOp, firstOf(inputs), outputs,
                    [this, outputs, inputs](const Target& target) {
                      TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
                                  "chimera all_to_all: expects ", size_, " input and output tensors");
                      std::vector<at::Tensor> sources;
                      std::vector<Staged> targets;
                      targets.reserve(outputs.size());
                      std::vector<P2POp> ops;
                      for (int peer = 0; peer < size_; ++peer) {
                        const auto p = static_cast<std::size_t>(peer);
                        requireDenseOn("all_to_all", inputs[p], target.device);
                        requireDenseOn("all_to_all", outputs[p], target.device);
                        sources.push_back(inputs[p].contiguous());
                        targets.emplace_back(outputs[p], false);
                        const std::size_t sendBytes = bytesOf(sources.back());
                        const std::size_t recvBytes = bytesOf(outputs[p]);
                        if (peer == rank_) {
                          TORCH_CHECK(sendBytes == recvBytes, "chimera all_to_all: this rank's input and output ",
                                      "tensors for itself differ in size");
                          continue;
                        }
                        if (sendBytes > 0)
                          ops.push_back({P2POp::Kind::Send, sources.back().data_ptr(), sendBytes, DataType::U8, peer});
                        if (recvBytes > 0)
                          ops.push_back({P2POp::Kind::Recv, targets.back().data(), recvBytes, DataType::U8, peer});
                      }
                      // Every check is done: the group agrees on the verdicts before the first transfer.
                      check("all_to_all", target.backend->agreeOnArguments(kGroup, -1, 0, Status::ok(), target.stream));
                      const auto self = static_cast<std::size_t>(rank_);
                      check("all_to_all", target.backend->copy(targets[self].data(), sources[self].data_ptr(),
                                                               bytesOf(sources[self]), target.stream));
                      check("all_to_all", target.backend->groupedP2P(ops, target.stream));
                      for (auto& t : targets) t.commit();
                    });
}

WorkPtr ChimeraProcessGroup::barrier(const c10d::BarrierOptions& opts) {
  return collective("barrier", OpType::BARRIER, opts.asyncOp, at::Tensor(), {}, [](const Target& target) {
    std::int32_t token = 0;
    check("barrier", target.backend->allReduce(&token, &token, 1, DataType::I32, ReduceOp::Sum, kGroup, target.stream));
  });
}

at::Tensor ChimeraProcessGroup::allReduceSparseOn(const Target& target, const at::Tensor& tensor) {
  TORCH_CHECK(tensor.is_sparse() && tensor.device().is_cpu(),
              "chimera allreduce_sparse: needs a sparse COO CPU tensor");
  // Every rank's entries, padded to the largest count so that one even all-gather moves them.
  const at::Tensor input = tensor.coalesce();
  const at::Tensor indices = input._indices().contiguous();
  const at::Tensor values = input._values().contiguous();
  const int64_t nnz = indices.size(1);
  at::Tensor counts = at::empty({size_}, at::kLong);
  allGatherOn(target, "allreduce_sparse", counts, at::full({1}, nnz, at::kLong));
  const int64_t most = counts.max().item<int64_t>();
  std::vector<int64_t> valueShape = values.sizes().vec();
  valueShape[0] = most;
  at::Tensor paddedIndices = at::zeros({indices.size(0), most}, indices.options());
  at::Tensor paddedValues = at::zeros(valueShape, values.options());
  paddedIndices.narrow(1, 0, nnz).copy_(indices);
  paddedValues.narrow(0, 0, nnz).copy_(values);
  std::vector<int64_t> allValueShape{size_};
  allValueShape.insert(allValueShape.end(), valueShape.begin(), valueShape.end());
  at::Tensor allIndices = at::empty({size_, indices.size(0), most}, indices.options());
  at::Tensor allValues = at::empty(allValueShape, values.options());
  if (most > 0) {
    allGatherOn(target, "allreduce_sparse", allIndices, paddedIndices);
    allGatherOn(target, "allreduce_sparse", allValues, paddedValues);
  }
  std::vector<at::Tensor> indexParts;
  std::vector<at::Tensor> valueParts;
  for (int r = 0; r < size_; ++r) {
    const int64_t n = counts[r].item<int64_t>();
    indexParts.push_back(allIndices[r].narrow(1, 0, n));
    valueParts.push_back(allValues[r].narrow(0, 0, n));
  }
  return at::sparse_coo_tensor(at::cat(indexParts, 1), at::cat(valueParts, 0), input.sizes(), input.options())
      .coalesce();
}

WorkPtr ChimeraProcessGroup::allreduce_sparse(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  return collective("allreduce_sparse", OpType::ALLREDUCE, opts.asyncOp, firstOf(tensors), tensors,
                    [this, tensors, opts](const Target& target) {
                      requireOne("allreduce_sparse", tensors);
                      TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM,
                                  "chimera allreduce_sparse: only ReduceOp.SUM is supported");
                      at::Tensor sum = allReduceSparseOn(target, tensors[0]);
                      tensors[0].copy_(sum);
                    });
}

void ChimeraProcessGroup::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  startInline();
  const std::chrono::milliseconds timeout = opts.timeout == c10d::kUnsetTimeout ? options_->timeout : opts.timeout;
  torch_ext::monitoredBarrier(*host_.p2p, rank_, size_, timeout, options_->timeout, waitAllRanks);
}

}  // namespace chimera::torch_ext
