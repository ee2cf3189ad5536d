// SPDX-License-Identifier: Apache-2.0
// The MPI host transport (see host_transport.hpp): chimera's MPI backend over the group for
// collectives, MpiPointToPoint for c10d's send/recv, each transfer a Work.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <mutex>
#include <utility>

#include "host_transport.hpp"
#include "mpi_group_backend.hpp"
#include "mpi_point_to_point.hpp"

namespace chimera::torch_ext {
namespace {

// One posted transfer. Completion is found by polling (isCompleted) or waiting; a receive into
// a tensor that is not contiguous lands in a contiguous buffer, copied over on completion.
class MpiTransferWork final : public c10d::Work {
 public:
  MpiTransferWork(int rank, c10d::OpType type, at::Tensor target, at::Tensor buffer,
                  std::unique_ptr<MpiTransfer> transfer, std::int64_t timeoutMs)
      : c10d::Work(rank, type),
        target_(std::move(target)),
        buffer_(std::move(buffer)),
        transfer_(std::move(transfer)),
        timeoutMs_(timeoutMs),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(transferMutex_);
    if (!done_) {
      bool done = false;
      const Status status = transfer_->test(done);
      if (!status.isOk() || done) settle(status);
    }
    return done_;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(transferMutex_);
    return done_ && !error_;
  }
  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> lock(transferMutex_);
    return error_;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(transferMutex_);
    if (!done_) settle(transfer_->wait(timeout == ::kNoTimeout ? timeoutMs_ : timeout.count()));
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  int sourceRank() const override {
    std::lock_guard<std::mutex> lock(transferMutex_);
    TORCH_CHECK(done_, "chimera recv: the source rank is known once the receive has completed");
    return transfer_->source();
  }
  std::vector<at::Tensor> result() override { return {target_}; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  // Called once, under transferMutex_, when the transfer has completed or failed.
  void settle(const Status& status) {
    done_ = true;
    if (status.isOk()) {
      try {
        if (!buffer_.is_same(target_)) target_.copy_(buffer_.view(target_.sizes()));
      } catch (...) {
        error_ = std::current_exception();
      }
    } else {
      const char* op = opType_ == c10d::OpType::SEND ? "send" : "recv";
      try {
        TORCH_CHECK(false, "chimera ", op, ": ", status.toString());
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    finish(error_);
    if (error_) {
      future_->setError(error_);
    } else {
      future_->markCompleted(c10::IValue(std::vector<at::Tensor>{target_}));
    }
  }

  at::Tensor target_;
  at::Tensor buffer_;
  std::unique_ptr<MpiTransfer> transfer_;
  const std::int64_t timeoutMs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable std::mutex transferMutex_;
  bool done_ = false;
  std::exception_ptr error_;
};

class MpiHostPointToPoint final : public HostPointToPoint {
 public:
  explicit MpiHostPointToPoint(std::unique_ptr<MpiPointToPoint> channel) : channel_(std::move(channel)) {}

  c10::intrusive_ptr<c10d::Work> send(const at::Tensor& tensor, int peer, int tag) override {
    return post(tensor, peer, tag, true);
  }
  c10::intrusive_ptr<c10d::Work> recv(const at::Tensor& tensor, int peer, int tag) override {
    return post(tensor, peer, tag, false);
  }
  void refuse(int peer, int tag, const std::string& reason) override { channel_->refuse(peer, tag, reason); }
  int userTagLimit() const override { return channel_->userTagLimit(); }
  int reservedTag() const override { return channel_->barrierTag(); }

 private:
  c10::intrusive_ptr<c10d::Work> post(const at::Tensor& tensor, int peer, int tag, bool isSend) {
    at::Tensor buffer =
        tensor.is_contiguous() ? tensor : (isSend ? tensor.contiguous() : at::empty_like(tensor).contiguous());
    std::unique_ptr<MpiTransfer> transfer;
    const std::size_t bytes = static_cast<std::size_t>(buffer.numel()) * buffer.element_size();
    const Status status = isSend ? channel_->send(buffer.data_ptr(), bytes, peer, tag, transfer)
                                 : channel_->recv(buffer.data_ptr(), bytes, peer, tag, transfer);
    TORCH_CHECK(status.isOk(), "chimera ", isSend ? "send" : "recv", ": ", status.toString());
    const c10d::OpType type =
        isSend ? c10d::OpType::SEND : (peer < 0 ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV);
    return c10::make_intrusive<MpiTransferWork>(channel_->rank(), type, tensor, buffer, std::move(transfer),
                                                channel_->timeoutMs());
  }

  std::unique_ptr<MpiPointToPoint> channel_;
};

}  // namespace

Status createMpiTransport(std::span<const int> worldRanks, int tag, std::int64_t timeoutMs, bool abortOnTimeout,
                          HostTransport& out) {
  std::unique_ptr<MpiPointToPoint> channel;
  if (Status status = createGroupBackend(worldRanks, tag, timeoutMs, abortOnTimeout, out.backend, channel);
      !status.isOk())
    return status;
  out.p2p = std::make_unique<MpiHostPointToPoint>(std::move(channel));
  return Status::ok();
}

}  // namespace chimera::torch_ext
