// SPDX-License-Identifier: Apache-2.0
// ChimeraWork, BatchWork and OpThread (see work.hpp).
#include "work.hpp"

#include <c10/util/Exception.h>

#include <utility>

namespace chimera::torch_ext {

ChimeraWork::ChimeraWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, bool queuedForCoalescing)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      queuedForCoalescing_(queuedForCoalescing),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

bool ChimeraWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

bool ChimeraWork::wait(std::chrono::milliseconds timeout) {
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

void ChimeraWork::complete(std::exception_ptr error) {
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

WorkPtr completedWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs) {
  auto work = c10::make_intrusive<ChimeraWork>(rank, type, std::move(outputs), false);
  work->complete();
  return work;
}

BatchWork::BatchWork(int rank, std::vector<WorkPtr> works)
    : c10d::Work(rank, c10d::OpType::COALESCED), works_(std::move(works)) {}

bool BatchWork::isCompleted() {
  for (auto& work : works_)
    if (!work->isCompleted()) return false;
  return true;
}

bool BatchWork::isSuccess() const {
  for (const auto& work : works_)
    if (!work->isSuccess()) return false;
  return true;
}

std::exception_ptr BatchWork::exception() const {
  for (const auto& work : works_)
    if (auto error = work->exception()) return error;
  return nullptr;
}

bool BatchWork::wait(std::chrono::milliseconds timeout) {
  for (auto& work : works_) work->wait(timeout);
  return true;
}

std::vector<at::Tensor> BatchWork::result() {
  std::vector<at::Tensor> all;
  for (auto& work : works_) {
    std::vector<at::Tensor> one = work->result();
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

OpThread::OpThread() : thread_([this] { loop(); }) {}

OpThread::~OpThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  ready_.notify_all();
  thread_.join();
}

void OpThread::push(c10::intrusive_ptr<ChimeraWork> work, std::function<void()> op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ops_.push_back([work = std::move(work), op = std::move(op)] {
      try {
        op();
        work->complete();
      } catch (...) {
        work->complete(std::current_exception());
      }
    });
    ++pending_;
  }
  ready_.notify_all();
}

void OpThread::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return pending_ == 0; });
}

void OpThread::loop() {
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

}  // namespace chimera::torch_ext
