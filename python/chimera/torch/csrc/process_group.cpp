// SPDX-License-Identifier: Apache-2.0
// The c10d::Backend "chimera" (see process_group.hpp): torch tensors in, chimera Backend calls out.
#include "process_group.hpp"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#if defined(CHIMERA_HAS_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "chimera/nccl_backend.hpp"
#endif

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace chimera::torch_ext {
namespace {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// The whole group: the backend's mesh is one axis over exactly the group's ranks.
const AxisSet kGroup = AxisSet::single(0);

// A Work that is complete when created (an op run on the caller's thread), or when the group's
// op thread has run it (async_op=True), or (a send/recv queued by startCoalescing) when
// endCoalescing runs it. Completion goes through c10d::Work::finish, so isCompleted, wait and
// exception() see it under the base class's mutex.
class ChimeraWork final : public c10d::Work {
 public:
  ChimeraWork(int rank, OpType type, std::vector<at::Tensor> outputs, bool queuedForCoalescing)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        queuedForCoalescing_(queuedForCoalescing),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ && !exception_;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    TORCH_CHECK(completed_ || !queuedForCoalescing_,
                "chimera: this send/recv is queued until endCoalescing runs "
                "it; wait on the Work that endCoalescing (batch_isend_irecv) returns");
    if (timeout == ::kNoTimeout) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      TORCH_CHECK(false, "chimera ", c10d::opTypeToString(opType_), ": not completed within the wait's timeout of ",
                  timeout.count(), " ms (it is still running; the process group's later ops complete after it)");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // Marks the work complete: successful with `error` null, else failed with it.
  void complete(std::exception_ptr error = nullptr) {
    finish(error);
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

 private:
  std::vector<at::Tensor> outputs_;
  const bool queuedForCoalescing_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The Work of a batch of CPU send/recv (batch_isend_irecv): complete when every transfer is.
class BatchWork final : public c10d::Work {
 public:
  BatchWork(int rank, std::vector<WorkPtr> works) : c10d::Work(rank, OpType::COALESCED), works_(std::move(works)) {}
  bool isCompleted() override {
    for (auto& work : works_)
      if (!work->isCompleted()) return false;
    return true;
  }
  bool isSuccess() const override {
    for (const auto& work : works_)
      if (!work->isSuccess()) return false;
    return true;
  }
  std::exception_ptr exception() const override {
    for (const auto& work : works_)
      if (auto error = work->exception()) return error;
    return nullptr;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    for (auto& work : works_) work->wait(timeout);
    return true;
  }
  std::vector<at::Tensor> result() override {
    std::vector<at::Tensor> all;
    for (auto& work : works_) {
      std::vector<at::Tensor> one = work->result();
      all.insert(all.end(), one.begin(), one.end());
    }
    return all;
  }

 private:
  std::vector<WorkPtr> works_;
};

WorkPtr completed(int rank, OpType type, std::vector<at::Tensor> outputs) {
  auto work = c10::make_intrusive<ChimeraWork>(rank, type, std::move(outputs), false);
  work->complete();
  return work;
}

at::Tensor first(const std::vector<at::Tensor>& tensors) { return tensors.empty() ? at::Tensor() : tensors[0]; }

void check(const char* op, const Status& status) {
  TORCH_CHECK(status.isOk(), "chimera ", op, ": ", status.toString());
}

void requireHost(const char* op, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "chimera ", op, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu() || (t.device().is_cuda() && ChimeraProcessGroup::cudaSupported()), "chimera ", op,
              ": tensor on ", t.device().str(),
              "; this build runs CPU tensors only (chimera was built without CUDA/NCCL)");
  TORCH_CHECK(t.layout() == at::kStrided, "chimera ", op, ": only dense (strided) tensors are supported");
}

void requireOne(const char* op, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 1, "chimera ", op, ": expects one tensor per call, got ", tensors.size());
  requireHost(op, tensors[0]);
}

std::size_t bytesOf(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()) * t.element_size(); }

// How a reduction runs: chimera's element type, and the torch type the data is staged in
// (int8/int16 are widened to int32: sum, product, min and max commute with the wrap back).
struct ReduceType {
  DataType dtype;
  at::ScalarType staged;
};

ReduceType reduceTypeOf(const char* op, at::ScalarType type) {
  switch (type) {
    case at::kFloat: return {DataType::F32, type};
    case at::kDouble: return {DataType::F64, type};
    case at::kHalf: return {DataType::F16, type};
    case at::kBFloat16: return {DataType::BF16, type};
    case at::kInt: return {DataType::I32, type};
    case at::kLong: return {DataType::I64, type};
    case at::kByte: return {DataType::U8, type};
    case at::kChar:
    case at::kShort: return {DataType::I32, at::kInt};
    default: break;
  }
  TORCH_CHECK(false, "chimera ", op, ": reductions of dtype ", c10::toString(type),
              " are not supported (float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8 are)");
}

ReduceOp reduceOpOf(const char* op, const c10d::ReduceOp& reduceOp, bool integral) {
  switch (reduceOp.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::Sum;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::Prod;
    case c10d::ReduceOp::MIN: return ReduceOp::Min;
    case c10d::ReduceOp::MAX: return ReduceOp::Max;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!integral, "chimera ", op, ": ReduceOp.AVG needs a floating-point tensor");
      return ReduceOp::Avg;
    default: break;
  }
  TORCH_CHECK(false, "chimera ", op, ": reduce op ", static_cast<int>(reduceOp.op_),
              " is not supported (SUM, AVG, PRODUCT, MIN, MAX are)");
}

// A contiguous buffer of `type` standing for `t`: `t` itself when it already is one, else a
// staging copy (holding t's values when `readIn`), written back by commit().
class Staged {
 public:
  Staged(const at::Tensor& t, at::ScalarType type, bool readIn) : original_(t) {
    if (t.is_contiguous() && t.scalar_type() == type) {
      buffer_ = t;
    } else if (readIn) {
      buffer_ = t.to(type).contiguous();
      if (buffer_.is_same(t)) buffer_ = t.clone(at::MemoryFormat::Contiguous);
    } else {
      buffer_ = at::empty(t.sizes(), t.options().dtype(type));
    }
  }
  Staged(const at::Tensor& t, bool readIn) : Staged(t, t.scalar_type(), readIn) {}
  void* data() { return buffer_.data_ptr(); }
  const at::Tensor& buffer() const { return buffer_; }
  void commit() {
    if (!buffer_.is_same(original_)) original_.copy_(buffer_);
  }

 private:
  at::Tensor original_;
  at::Tensor buffer_;
};

}  // namespace

struct ChimeraProcessGroup::Queued {
  chimera::Backend* backend = nullptr;
  chimera::Stream stream = nullptr;  // the stream select() chose for it
  at::Tensor tensor;                 // kept alive until the grouped call
  std::optional<Staged> staged;
  P2POp op;
  c10::intrusive_ptr<ChimeraWork> work;
};

// Runs a group's asynchronous ops one at a time, in the order they were queued.
class ChimeraProcessGroup::OpThread {
 public:
  OpThread() : thread_([this] { loop(); }) {}
  // Runs what is queued, then stops.
  ~OpThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    thread_.join();
  }
  void push(std::function<void()> op) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ops_.push_back(std::move(op));
      ++pending_;
    }
    ready_.notify_all();
  }
  // Waits until every op queued so far has run.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return pending_ == 0; });
  }
  bool onThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void loop() {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return stop_ || !ops_.empty(); });
        if (ops_.empty()) return;
        op = std::move(ops_.front());
        ops_.pop_front();
      }
      op();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --pending_;
      }
      idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> ops_;
  std::size_t pending_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

ChimeraProcessGroup::ChimeraProcessGroup(int rank, int size, HostTransport host, c10::intrusive_ptr<c10d::Store> store,
                                         bool asyncCpu, std::int64_t timeoutMs)
    : c10d::Backend(rank, size), host_(std::move(host)), timeoutMs_(timeoutMs), store_(std::move(store)) {
  TORCH_CHECK(host_.backend != nullptr && host_.p2p != nullptr, "chimera process group: no host transport");
  // Started here rather than on the first asynchronous op, so no two threads ever race to make it.
  if (asyncCpu) opThread_ = std::make_unique<OpThread>();
}

// The op thread finishes what is queued before the backends it uses go.
ChimeraProcessGroup::~ChimeraProcessGroup() { opThread_.reset(); }

WorkPtr ChimeraProcessGroup::defer(bool asyncOp, const at::Tensor& t, OpType type, std::vector<at::Tensor> outputs,
                                   std::function<void()> run) {
  if (opThread_ != nullptr && opThread_->onThread()) return nullptr;  // the op thread runs it now
  ++sequence_;
  const bool cpu = !t.defined() || t.device().is_cpu();
  if (!asyncOp || !cpu || opThread_ == nullptr || coalescing_) {
    if (opThread_ != nullptr) opThread_->drain();
    return nullptr;
  }
  auto work = c10::make_intrusive<ChimeraWork>(rank_, type, std::move(outputs), false);
  opThread_->push([work, run = std::move(run)] {
    try {
      run();
      work->complete();
    } catch (...) {
      work->complete(std::current_exception());
    }
  });
  return work;
}

bool ChimeraProcessGroup::cudaSupported() {
#if defined(CHIMERA_HAS_CUDA)
  return true;
#else
  return false;
#endif
}

void ChimeraProcessGroup::select(const at::Tensor& t, const char* op) {
  if (!t.defined() || t.device().is_cpu()) {
    backend_ = host_.backend.get();
    stream_ = nullptr;
    return;
  }
#if defined(CHIMERA_HAS_CUDA)
  TORCH_CHECK(t.device().is_cuda(), "chimera ", op, ": tensor on ", t.device().str(), " (CPU and CUDA are supported)");
  const int device = t.device().index();
  if (device_ == nullptr) createDeviceBackend(device);
  TORCH_CHECK(device == deviceIndex_, "chimera ", op, ": tensor on cuda:", device,
              " but this process group runs on cuda:", deviceIndex_, " (one device per rank)");
  stream_ = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  backend_ = device_.get();
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
  // As TORCH_NCCL_ASYNC_ERROR_HANDLING: a Timeout ends the job unless CHIMERA_ABORT_ON_TIMEOUT=0.
  if (std::getenv("CHIMERA_ABORT_ON_TIMEOUT") == nullptr) options.abortOnTimeout = true;
  check("NCCL backend", createNcclBackend(Mesh::flat(size_, "group"), rank_, device, id, options, backend));
  device_ = std::move(backend);
  deviceIndex_ = device;
#else
  (void)device;
#endif
}

WorkPtr ChimeraProcessGroup::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, first(tensors), OpType::BROADCAST, tensors,
                           [this, tensors, opts]() mutable { broadcast(tensors, opts); }))
    return work;
  requireOne("broadcast", tensors);
  select(tensors[0], "broadcast");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "chimera broadcast: root ", opts.rootRank,
              " is not a rank of this group of ", size_);
  Staged t(tensors[0], true);
  check("broadcast", backend_->broadcast(t.data(), t.data(), bytesOf(t.buffer()), DataType::U8,
                                         static_cast<int>(opts.rootRank), kGroup, stream_));
  t.commit();
  return completed(rank_, OpType::BROADCAST, tensors);
}

WorkPtr ChimeraProcessGroup::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse()) return allreduce_sparse(tensors, opts);
  if (WorkPtr work = defer(opts.asyncOp, first(tensors), OpType::ALLREDUCE, tensors,
                           [this, tensors, opts]() mutable { allreduce(tensors, opts); }))
    return work;
  requireOne("allreduce", tensors);
  select(tensors[0], "allreduce");
  const ReduceType type = reduceTypeOf("allreduce", tensors[0].scalar_type());
  const ReduceOp op = reduceOpOf("allreduce", opts.reduceOp, !at::isFloatingType(tensors[0].scalar_type()));
  Staged t(tensors[0], type.staged, true);
  check("allreduce", backend_->allReduce(t.data(), t.data(), static_cast<std::size_t>(t.buffer().numel()), type.dtype,
                                         op, kGroup, stream_));
  t.commit();
  return completed(rank_, OpType::ALLREDUCE, tensors);
}

WorkPtr ChimeraProcessGroup::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                 const c10d::AllreduceCoalescedOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, first(tensors), OpType::ALLREDUCE_COALESCED, tensors,
                           [this, tensors, opts]() mutable { allreduce_coalesced(tensors, opts); }))
    return work;
  for (auto& tensor : tensors) {
    std::vector<at::Tensor> one{tensor};
    allreduce(one, opts);
  }
  return completed(rank_, OpType::ALLREDUCE_COALESCED, tensors);
}

WorkPtr ChimeraProcessGroup::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, first(tensors), OpType::REDUCE, tensors,
                           [this, tensors, opts]() mutable { reduce(tensors, opts); }))
    return work;
  requireOne("reduce", tensors);
  select(tensors[0], "reduce");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "chimera reduce: root ", opts.rootRank,
              " is not a rank of this group of ", size_);
  const ReduceType type = reduceTypeOf("reduce", tensors[0].scalar_type());
  const ReduceOp op = reduceOpOf("reduce", opts.reduceOp, !at::isFloatingType(tensors[0].scalar_type()));
  // Non-root tensors stay as they were (as with MPI_Reduce): reduce a copy there.
  at::Tensor work = tensors[0].to(type.staged).contiguous().clone();
  check("reduce", backend_->allReduce(work.data_ptr(), work.data_ptr(), static_cast<std::size_t>(work.numel()),
                                      type.dtype, op, kGroup, stream_));
  if (rank_ == opts.rootRank) tensors[0].copy_(work);
  return completed(rank_, OpType::REDUCE, tensors);
}

WorkPtr ChimeraProcessGroup::all_gather_single(at::Tensor& output, at::Tensor& input,
                                               const c10d::AllgatherOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, input, OpType::_ALLGATHER_BASE, {output},
                           [this, output, input, opts]() mutable { all_gather_single(output, input, opts); }))
    return work;
  requireHost("all_gather_into_tensor", input);
  requireHost("all_gather_into_tensor", output);
  select(input, "all_gather_into_tensor");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chimera all_gather_into_tensor: output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_, "chimera all_gather_into_tensor: output has ", output.numel(),
              " elements, expected ", size_, " x ", input.numel());
  Staged in(input, true);
  Staged out(output, false);
  check("all_gather_into_tensor",
        backend_->allGather(in.data(), out.data(), bytesOf(in.buffer()), DataType::U8, kGroup, stream_));
  out.commit();
  return completed(rank_, OpType::_ALLGATHER_BASE, {output});
}

WorkPtr ChimeraProcessGroup::_allgather_base(at::Tensor& output, at::Tensor& input,
                                             const c10d::AllgatherOptions& opts) {
  return all_gather_single(output, input, opts);
}

WorkPtr ChimeraProcessGroup::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                       const c10d::AllgatherOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, first(inputs), OpType::ALLGATHER,
                           outputs.empty() ? std::vector<at::Tensor>{} : outputs[0],
                           [this, outputs, inputs, opts]() mutable { allgather(outputs, inputs, opts); }))
    return work;
  requireOne("all_gather", inputs);
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_, "chimera all_gather: expects ",
              size_, " output tensors");
  const at::Tensor& input = inputs[0];
  std::vector<int64_t> shape{size_};
  shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
  at::Tensor flat = at::empty(shape, input.options().memory_format(at::MemoryFormat::Contiguous));
  at::Tensor in = input;
  all_gather_single(flat, in, opts);
  for (int i = 0; i < size_; ++i) {
    at::Tensor& out = outputs[0][static_cast<std::size_t>(i)];
    requireHost("all_gather", out);
    TORCH_CHECK(out.numel() == input.numel(), "chimera all_gather: output ", i, " has ", out.numel(),
                " elements, input has ", input.numel());
    out.copy_(flat[i].view(out.sizes()));
  }
  return completed(rank_, OpType::ALLGATHER, outputs[0]);
}

WorkPtr ChimeraProcessGroup::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                 std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, first(inputs), OpType::ALLGATHER_COALESCED, inputs,
                           [this, outputs, inputs, opts]() mutable { allgather_coalesced(outputs, inputs, opts); }))
    return work;
  // outputs[r][i]: rank r's copy of input i (c10d's layout: one list per rank).
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "chimera allgather_coalesced: ", outputs.size(),
              " output lists for a group of ", size_, " (one list per rank)");
  for (std::size_t r = 0; r < outputs.size(); ++r)
    TORCH_CHECK(outputs[r].size() == inputs.size(), "chimera allgather_coalesced: output list ", r, " has ",
                outputs[r].size(), " tensors for ", inputs.size(), " inputs");
  std::vector<at::Tensor> all;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::vector<at::Tensor>> out(1);
    for (auto& list : outputs) out[0].push_back(list[i]);
    std::vector<at::Tensor> in{inputs[i]};
    allgather(out, in, opts);
  }
  for (auto& list : outputs) all.insert(all.end(), list.begin(), list.end());
  return completed(rank_, OpType::ALLGATHER_COALESCED, all);
}

WorkPtr ChimeraProcessGroup::all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllgatherOptions& opts) {
  if (WorkPtr work =
          defer(opts.asyncOp, first(inputs), OpType::COALESCED, outputs,
                [this, outputs, inputs, opts]() mutable { all_gather_single_coalesced(outputs, inputs, opts); }))
    return work;
  TORCH_CHECK(outputs.size() == inputs.size(), "chimera allgather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i) all_gather_single(outputs[i], inputs[i], opts);
  return completed(rank_, OpType::COALESCED, outputs);
}

WorkPtr ChimeraProcessGroup::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllgatherOptions& opts) {
  return all_gather_single_coalesced(outputs, inputs, opts);
}

WorkPtr ChimeraProcessGroup::reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::ReduceScatterOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, input, OpType::_REDUCE_SCATTER_BASE, {output},
                           [this, output, input, opts]() mutable { reduce_scatter_single(output, input, opts); }))
    return work;
  requireHost("reduce_scatter_tensor", input);
  requireHost("reduce_scatter_tensor", output);
  select(input, "reduce_scatter_tensor");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chimera reduce_scatter_tensor: output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_, "chimera reduce_scatter_tensor: input has ", input.numel(),
              " elements, expected ", size_, " x ", output.numel());
  const ReduceType type = reduceTypeOf("reduce_scatter_tensor", input.scalar_type());
  const ReduceOp op = reduceOpOf("reduce_scatter_tensor", opts.reduceOp, !at::isFloatingType(input.scalar_type()));
  Staged in(input, type.staged, true);
  Staged out(output, type.staged, false);
  check("reduce_scatter_tensor",
        backend_->reduceScatter(in.data(), out.data(), static_cast<std::size_t>(output.numel()), type.dtype, op, kGroup,
                                stream_));
  out.commit();
  return completed(rank_, OpType::_REDUCE_SCATTER_BASE, {output});
}

WorkPtr ChimeraProcessGroup::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                  const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_single(output, input, opts);
}

WorkPtr ChimeraProcessGroup::reduce_scatter(std::vector<at::Tensor>& outputs,
                                            std::vector<std::vector<at::Tensor>>& inputs,
                                            const c10d::ReduceScatterOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, first(outputs), OpType::REDUCE_SCATTER, outputs,
                           [this, outputs, inputs, opts]() mutable { reduce_scatter(outputs, inputs, opts); }))
    return work;
  requireOne("reduce_scatter", outputs);
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "chimera reduce_scatter: expects ",
              size_, " input tensors");
  std::vector<at::Tensor> flat;
  for (const auto& t : inputs[0]) {
    requireHost("reduce_scatter", t);
    TORCH_CHECK(t.numel() == outputs[0].numel(), "chimera reduce_scatter: an input has ", t.numel(),
                " elements, the output ", outputs[0].numel());
    flat.push_back(t.reshape({-1}));
  }
  at::Tensor input = at::cat(flat);
  return reduce_scatter_single(outputs[0], input, opts);
}

WorkPtr ChimeraProcessGroup::reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  if (WorkPtr work =
          defer(opts.asyncOp, first(inputs), OpType::COALESCED, outputs,
                [this, outputs, inputs, opts]() mutable { reduce_scatter_single_coalesced(outputs, inputs, opts); }))
    return work;
  TORCH_CHECK(outputs.size() == inputs.size(), "chimera reduce_scatter_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i) reduce_scatter_single(outputs[i], inputs[i], opts);
  return completed(rank_, OpType::COALESCED, outputs);
}

WorkPtr ChimeraProcessGroup::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  return reduce_scatter_single_coalesced(outputs, inputs, opts);
}

WorkPtr ChimeraProcessGroup::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                    const c10d::GatherOptions& opts) {
  if (WorkPtr work =
          defer(opts.asyncOp, first(inputs), OpType::GATHER, outputs.empty() ? std::vector<at::Tensor>{} : outputs[0],
                [this, outputs, inputs, opts]() mutable { gather(outputs, inputs, opts); }))
    return work;
  requireOne("gather", inputs);
  select(inputs[0], "gather");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "chimera gather: root ", opts.rootRank,
              " is not a rank of this group of ", size_);
  const int root = static_cast<int>(opts.rootRank);
  Staged in(inputs[0], true);
  const std::size_t bytes = bytesOf(in.buffer());
  std::vector<P2POp> ops;
  std::vector<Staged> staged;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                "chimera gather: the root expects ", size_, " output tensors");
    staged.reserve(static_cast<std::size_t>(size_));
    for (int i = 0; i < size_; ++i) {
      at::Tensor& out = outputs[0][static_cast<std::size_t>(i)];
      requireHost("gather", out);
      TORCH_CHECK(bytesOf(out) == bytes && out.scalar_type() == inputs[0].scalar_type(), "chimera gather: output ", i,
                  " does not match the input's size and dtype");
      staged.emplace_back(out, false);
      if (i == root) {
        check("gather", backend_->copy(staged.back().data(), in.data(), bytes, stream_));
      } else if (bytes > 0) {
        ops.push_back({P2POp::Kind::Recv, staged.back().data(), bytes, DataType::U8, i});
      }
    }
  } else if (bytes > 0) {
    ops.push_back({P2POp::Kind::Send, in.data(), bytes, DataType::U8, root});
  }
  check("gather", backend_->groupedP2P(ops, stream_));
  for (auto& s : staged) s.commit();
  return completed(rank_, OpType::GATHER, rank_ == root ? outputs[0] : std::vector<at::Tensor>{});
}

WorkPtr ChimeraProcessGroup::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                     const c10d::ScatterOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, first(outputs), OpType::SCATTER, outputs,
                           [this, outputs, inputs, opts]() mutable { scatter(outputs, inputs, opts); }))
    return work;
  requireOne("scatter", outputs);
  select(outputs[0], "scatter");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "chimera scatter: root ", opts.rootRank,
              " is not a rank of this group of ", size_);
  const int root = static_cast<int>(opts.rootRank);
  Staged out(outputs[0], false);
  const std::size_t bytes = bytesOf(out.buffer());
  std::vector<P2POp> ops;
  std::vector<at::Tensor> sources;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "chimera scatter: the root expects ",
                size_, " input tensors");
    for (int i = 0; i < size_; ++i) {
      const at::Tensor& in = inputs[0][static_cast<std::size_t>(i)];
      requireHost("scatter", in);
      TORCH_CHECK(bytesOf(in) == bytes && in.scalar_type() == outputs[0].scalar_type(), "chimera scatter: input ", i,
                  " does not match the output's size and dtype");
      sources.push_back(in.contiguous());
      if (i == root) {
        check("scatter", backend_->copy(out.data(), sources.back().data_ptr(), bytes, stream_));
      } else if (bytes > 0) {
        ops.push_back({P2POp::Kind::Send, sources.back().data_ptr(), bytes, DataType::U8, i});
      }
    }
  } else if (bytes > 0) {
    ops.push_back({P2POp::Kind::Recv, out.data(), bytes, DataType::U8, root});
  }
  check("scatter", backend_->groupedP2P(ops, stream_));
  out.commit();
  return completed(rank_, OpType::SCATTER, outputs);
}

WorkPtr ChimeraProcessGroup::all_to_all_single(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits, std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, input, OpType::ALLTOALL_BASE, {output},
                           [this, output, input, outputSplits, inputSplits, opts]() mutable {
                             all_to_all_single(output, input, outputSplits, inputSplits, opts);
                           }))
    return work;
  requireHost("all_to_all_single", input);
  requireHost("all_to_all_single", output);
  select(input, "all_to_all_single");
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
      check("all_to_all_single", backend_->allToAll(src, dst, bytesOf(in.buffer()) / static_cast<std::size_t>(size_),
                                                    DataType::U8, kGroup, stream_));
  } else {
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
      TORCH_CHECK(t.dim() > 0 && total == t.size(0), "chimera all_to_all_single: ", which, " split sizes sum to ",
                  total, " but dim 0 has ", t.dim() > 0 ? t.size(0) : 0, " rows");
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
    for (int peer = 0; peer < size_; ++peer) {
      const std::size_t sendBytes = static_cast<std::size_t>(sendRows[static_cast<std::size_t>(peer)]) * inRow;
      const std::size_t recvBytes = static_cast<std::size_t>(recvRows[static_cast<std::size_t>(peer)]) * outRow;
      if (peer == rank_) {
        TORCH_CHECK(sendBytes == recvBytes, "chimera all_to_all_single: this rank sends itself ", sendBytes,
                    " bytes but expects ", recvBytes);
        if (sendBytes > 0)
          check("all_to_all_single", backend_->copy(dst + recvOffset, src + sendOffset, sendBytes, stream_));
      } else {
        if (sendBytes > 0)
          ops.push_back(
              {P2POp::Kind::Send, const_cast<std::uint8_t*>(src + sendOffset), sendBytes, DataType::U8, peer});
        if (recvBytes > 0) ops.push_back({P2POp::Kind::Recv, dst + recvOffset, recvBytes, DataType::U8, peer});
      }
      sendOffset += sendBytes;
      recvOffset += recvBytes;
    }
    check("all_to_all_single", backend_->groupedP2P(ops, stream_));
  }
  out.commit();
  return completed(rank_, OpType::ALLTOALL_BASE, {output});
}

WorkPtr ChimeraProcessGroup::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                                           std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) {
  return all_to_all_single(output, input, outputSplits, inputSplits, opts);
}

WorkPtr ChimeraProcessGroup::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                      const c10d::AllToAllOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, first(inputs), OpType::ALLTOALL, outputs,
                           [this, outputs, inputs, opts]() mutable { alltoall(outputs, inputs, opts); }))
    return work;
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "chimera all_to_all: expects ", size_, " input and output tensors");
  select(inputs[0], "all_to_all");
  std::vector<at::Tensor> sources;
  std::vector<Staged> targets;
  targets.reserve(outputs.size());
  std::vector<P2POp> ops;
  for (int peer = 0; peer < size_; ++peer) {
    const auto p = static_cast<std::size_t>(peer);
    requireHost("all_to_all", inputs[p]);
    requireHost("all_to_all", outputs[p]);
    sources.push_back(inputs[p].contiguous());
    targets.emplace_back(outputs[p], false);
    if (peer == rank_) {
      TORCH_CHECK(bytesOf(sources.back()) == bytesOf(outputs[p]), "chimera all_to_all: this rank's input and output ",
                  "tensors for itself differ in size");
      check("all_to_all",
            backend_->copy(targets.back().data(), sources.back().data_ptr(), bytesOf(outputs[p]), stream_));
      continue;
    }
    if (bytesOf(sources.back()) > 0)
      ops.push_back({P2POp::Kind::Send, sources.back().data_ptr(), bytesOf(sources.back()), DataType::U8, peer});
    if (bytesOf(outputs[p]) > 0)
      ops.push_back({P2POp::Kind::Recv, targets.back().data(), bytesOf(outputs[p]), DataType::U8, peer});
  }
  check("all_to_all", backend_->groupedP2P(ops, stream_));
  for (auto& t : targets) t.commit();
  return completed(rank_, OpType::ALLTOALL, outputs);
}

WorkPtr ChimeraProcessGroup::pointToPoint(std::vector<at::Tensor>& tensors, int peer, int tag, bool isSend) {
  const char* name = isSend ? "send" : "recv";
  requireOne(name, tensors);
  TORCH_CHECK((peer >= 0 || (!isSend && peer == -1)) && peer < size_ && peer != rank_, "chimera ", name, ": peer ",
              peer, " is not another rank of this group of ", size_);
  TORCH_CHECK(tag >= 0, "chimera ", name, ": tag ", tag, " is negative");
  if (opThread_ != nullptr) opThread_->drain();  // after the group's queued asynchronous ops
  ++sequence_;
  select(tensors[0], name);
  if (tensors[0].device().is_cpu()) {
    WorkPtr work = isSend ? host_.p2p->send(tensors[0], peer, tag) : host_.p2p->recv(tensors[0], peer, tag);
    if (coalescing_) posted_.push_back(work);
    return work;
  }
  TORCH_CHECK(peer >= 0, "chimera recv: a receive from any source needs a CPU tensor");
  if (coalescing_) {
    Queued q;
    q.backend = backend_;
    q.stream = stream_;
    q.tensor = tensors[0];
    q.staged.emplace(tensors[0], isSend);
    q.op = {isSend ? P2POp::Kind::Send : P2POp::Kind::Recv, q.staged->data(), bytesOf(q.staged->buffer()), DataType::U8,
            peer};
    q.work = c10::make_intrusive<ChimeraWork>(rank_, isSend ? OpType::SEND : OpType::RECV, tensors, true);
    auto work = q.work;
    queued_.push_back(std::move(q));
    return work;
  }
  Staged t(tensors[0], isSend);
  const std::size_t bytes = bytesOf(t.buffer());
  check(name, isSend ? backend_->send(t.data(), bytes, DataType::U8, peer, stream_)
                     : backend_->recv(t.data(), bytes, DataType::U8, peer, stream_));
  if (!isSend) t.commit();
  return completed(rank_, isSend ? OpType::SEND : OpType::RECV, tensors);
}

WorkPtr ChimeraProcessGroup::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  return pointToPoint(tensors, dstRank, tag, true);
}

WorkPtr ChimeraProcessGroup::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return pointToPoint(tensors, srcRank, tag, false);
}

WorkPtr ChimeraProcessGroup::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return pointToPoint(tensors, -1, tag, false);
}

WorkPtr ChimeraProcessGroup::barrier(const c10d::BarrierOptions& opts) {
  if (WorkPtr work = defer(opts.asyncOp, at::Tensor(), OpType::BARRIER, {}, [this, opts]() mutable { barrier(opts); }))
    return work;
  select(at::Tensor(), "barrier");
  std::int32_t token = 0;
  check("barrier", backend_->allReduce(&token, &token, 1, DataType::I32, ReduceOp::Sum, kGroup, stream_));
  return completed(rank_, OpType::BARRIER, {});
}

WorkPtr ChimeraProcessGroup::allreduce_sparse(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "chimera allreduce_sparse: expects one tensor per call, got ", tensors.size());
  const at::Tensor& tensor = tensors[0];
  TORCH_CHECK(tensor.is_sparse() && tensor.device().is_cpu(),
              "chimera allreduce_sparse: needs a sparse COO CPU tensor");
  TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM, "chimera allreduce_sparse: only ReduceOp.SUM is supported");
  if (opThread_ != nullptr) opThread_->drain();
  ++sequence_;
  // Every rank's entries, padded to the largest count so that one even all-gather moves them.
  const at::Tensor input = tensor.coalesce();
  const at::Tensor indices = input._indices().contiguous();
  const at::Tensor values = input._values().contiguous();
  const int64_t nnz = indices.size(1);
  at::Tensor counts = at::empty({size_}, at::kLong);
  at::Tensor mine = at::full({1}, nnz, at::kLong);
  c10d::AllgatherOptions gather;
  gather.asyncOp = false;  // the counts are read right away
  all_gather_single(counts, mine, gather);
  const int64_t most = counts.max().item<int64_t>();
  std::vector<int64_t> valueShape = values.sizes().vec();
  valueShape[0] = most;
  at::Tensor paddedIndices = at::zeros({indices.size(0), most}, indices.options());
  at::Tensor paddedValues = at::zeros(valueShape, values.options());
  paddedIndices.narrow(1, 0, nnz).copy_(indices);
  paddedValues.narrow(0, 0, nnz).copy_(values);
  std::vector<int64_t> allIndexShape{size_, indices.size(0), most};
  std::vector<int64_t> allValueShape{size_};
  allValueShape.insert(allValueShape.end(), valueShape.begin(), valueShape.end());
  at::Tensor allIndices = at::empty(allIndexShape, indices.options());
  at::Tensor allValues = at::empty(allValueShape, values.options());
  if (most > 0) {
    all_gather_single(allIndices, paddedIndices, gather);
    all_gather_single(allValues, paddedValues, gather);
  }
  std::vector<at::Tensor> indexParts;
  std::vector<at::Tensor> valueParts;
  for (int r = 0; r < size_; ++r) {
    const int64_t n = counts[r].item<int64_t>();
    indexParts.push_back(allIndices[r].narrow(1, 0, n));
    valueParts.push_back(allValues[r].narrow(0, 0, n));
  }
  const at::Tensor sum =
      at::sparse_coo_tensor(at::cat(indexParts, 1), at::cat(valueParts, 0), input.sizes(), input.options()).coalesce();
  tensors[0].copy_(sum);
  return completed(rank_, OpType::ALLREDUCE, {sum});
}

void ChimeraProcessGroup::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  if (opThread_ != nullptr) opThread_->drain();
  ++sequence_;
  const auto timeout =
      opts.timeout == ::kNoTimeout || opts.timeout.count() <= 0 ? std::chrono::milliseconds(timeoutMs_) : opts.timeout;
  const int tag = host_.p2p->reservedTag();
  at::Tensor token = at::zeros({1}, at::kInt);
  if (rank_ != 0) {
    host_.p2p->send(token, 0, tag)->wait(timeout);
    at::Tensor release = at::zeros({1}, at::kInt);
    host_.p2p->recv(release, 0, tag)->wait(timeout);
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  std::vector<at::Tensor> tokens;
  std::vector<WorkPtr> arrivals;
  for (int r = 1; r < size_; ++r) {
    tokens.push_back(at::zeros({1}, at::kInt));
    arrivals.push_back(host_.p2p->recv(tokens.back(), r, tag));
  }
  std::vector<int> late;
  for (int r = 1; r < size_; ++r) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      arrivals[static_cast<std::size_t>(r - 1)]->wait(std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      late.push_back(r);
      if (!waitAllRanks) break;
    }
  }
  if (!late.empty()) {
    std::string ranks;
    for (int r : late) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    TORCH_CHECK(false, late.size() == 1 && !waitAllRanks ? "Rank " : "Ranks ", ranks,
                " failed to pass monitoredBarrier in ", timeout.count(), " ms");
  }
  for (int r = 1; r < size_; ++r) host_.p2p->send(token, r, tag)->wait(timeout);
}

void ChimeraProcessGroup::startCoalescing() {
  TORCH_CHECK(!coalescing_, "chimera startCoalescing: already coalescing");
  coalescing_ = true;
}

WorkPtr ChimeraProcessGroup::endCoalescing() {
  TORCH_CHECK(coalescing_, "chimera endCoalescing: startCoalescing was not called");
  coalescing_ = false;
  if (opThread_ != nullptr) opThread_->drain();
  std::vector<WorkPtr> posted = std::move(posted_);
  posted_.clear();
  std::vector<Queued> queued = std::move(queued_);
  queued_.clear();
  TORCH_CHECK(posted.empty() || queued.empty(), "chimera batch_isend_irecv: CPU and CUDA tensors in one batch");
  if (!posted.empty()) return c10::make_intrusive<BatchWork>(rank_, std::move(posted));
  std::vector<P2POp> ops;
  std::vector<at::Tensor> tensors;
  for (const auto& q : queued) {
    TORCH_CHECK(q.backend == queued.front().backend, "chimera batch_isend_irecv: CPU and CUDA tensors in one batch");
    TORCH_CHECK(q.stream == queued.front().stream, "chimera batch_isend_irecv: tensors queued on different streams");
    if (q.op.count > 0) ops.push_back(q.op);
    tensors.push_back(q.tensor);
  }
  if (!queued.empty()) {
    check("batch_isend_irecv", queued.front().backend->groupedP2P(ops, queued.front().stream));
  }
  for (auto& q : queued) {
    if (q.op.kind == P2POp::Kind::Recv) q.staged->commit();
    q.work->complete();
  }
  return completed(rank_, OpType::COALESCED, tensors);
}

}  // namespace chimera::torch_ext
