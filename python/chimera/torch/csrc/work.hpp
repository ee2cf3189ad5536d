// SPDX-License-Identifier: Apache-2.0
// The process group's Work objects and the op thread its asynchronous ops run on.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace chimera::torch_ext {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

/// A Work that is complete when created (an op run on the caller's thread), or when the
/// group's op thread has run it (async_op=True), or (a CUDA send/recv queued between
/// startCoalescing and endCoalescing) when endCoalescing runs it. Completion goes through
/// c10d::Work::finish, so isCompleted, wait and exception() see it under the base class's mutex.
class ChimeraWork final : public c10d::Work {
 public:
  ChimeraWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, bool queuedForCoalescing);
  bool isSuccess() const override;
  /// Raises when `timeout` passes first (the op goes on), or the op's error.
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  /// Marks the work complete: successful with `error` null, else failed with it.
  void complete(std::exception_ptr error = nullptr);

 private:
  std::vector<at::Tensor> outputs_;
  const bool queuedForCoalescing_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/// A Work complete from the start.
WorkPtr completedWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);

/// The Work of a batch of CPU send/recv (batch_isend_irecv): complete when every transfer is.
class BatchWork final : public c10d::Work {
 public:
  BatchWork(int rank, std::vector<WorkPtr> works);
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override;

 private:
  std::vector<WorkPtr> works_;
};

/// Runs a group's asynchronous ops one at a time, in the order they were queued.
class OpThread {
 public:
  OpThread();
  /// Runs what is queued, then stops.
  ~OpThread();
  OpThread(const OpThread&) = delete;
  OpThread& operator=(const OpThread&) = delete;
  /// Queues `op`; `work` completes when it has run (failed with its exception, if it throws).
  void push(c10::intrusive_ptr<ChimeraWork> work, std::function<void()> op);
  /// Waits until every op queued so far has run.
  void drain();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> ops_;
  std::size_t pending_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace chimera::torch_ext
