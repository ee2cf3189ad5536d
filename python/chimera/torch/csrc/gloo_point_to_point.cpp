// SPDX-License-Identifier: Apache-2.0
// The gloo transport's point-to-point channel (see gloo_point_to_point.hpp): headers before
// payloads, a continuation per waiting receive, and the Works of sends and receives.
#include "gloo_point_to_point.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace chimera::torch_ext {
namespace {

using Clock = std::chrono::steady_clock;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// A header: three int64 words, its kind, the payload's byte count (a refusal: its reason's) and
// the message's number among those its sender sent to this rank (which names the payload tag).
enum class Kind : std::int64_t { Data = 1, Refusal = 2 };
constexpr std::int64_t kHeaderWords = 3;
// A refusal's reason is cut to this many bytes.
constexpr std::size_t kReasonBytes = 1024;

bool hasChannel(int tag) { return tag >= 0 && tag <= kGlooBarrierTag; }
int headerTag(int tag) { return kGlooHeaderTagBase + tag; }
int payloadTag(std::int64_t number) { return kGlooPayloadTagBase + static_cast<int>(number % kGlooPayloadTags); }

// The bytes of contiguous `tensor`, as a flat uint8 tensor sharing its storage.
at::Tensor bytesOf(const at::Tensor& tensor) { return tensor.reshape({-1}).view(at::kByte); }

// The exception a failed Work rethrows: `op` ("send", "recv") and the status.
std::exception_ptr errorOf(const char* op, const Status& status) {
  try {
    TORCH_CHECK(false, "chimera ", op, ": ", status.toString());
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

std::string fromText(int peer) { return peer < 0 ? "any source" : "rank " + std::to_string(peer); }

// A thread per task that waits: a task never waits for another to finish. Threads are kept for
// later tasks; the destructor runs what is queued and joins them.
class ContinuationPool {
 public:
  ~ContinuationPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void submit(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    if (tasks_.size() > idle_) {
      threads_.emplace_back([this] { loop(); });
    } else {
      ready_.notify_one();
    }
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      ready_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      --idle_;
      if (tasks_.empty()) return;  // stopping, nothing left
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  std::size_t idle_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// What the channel, its continuations and its Works share.
struct State {
  c10::intrusive_ptr<c10d::Backend> gloo;
  std::chrono::milliseconds timeout{0};
  int rank = 0;
  int size = 0;
  // Guards what follows, the posting of gloo transfers and every Receive.
  std::mutex mutex;
  std::condition_variable settled;   // a Receive settled
  std::vector<std::int64_t> sentTo;  // per group rank: the messages this rank sent it
  std::vector<WorkPtr> inFlight;     // gloo transfers a continuation waits for (aborted when closing)
  bool closing = false;

  void track(const WorkPtr& work) {
    if (!work) return;
    if (closing) work->abort();
    inFlight.push_back(work);
  }
  void untrack(const WorkPtr& work) {
    if (work) std::erase(inFlight, work);
  }

  // Waits for gloo's `work` at most the timeout: ok; Timeout when it is not done by then (gloo
  // then closes the connection to the peer, as after any gloo wait that reaches its bound);
  // BackendError on a failure, or when the channel closed first (it aborts what is in flight).
  Status waitFor(const WorkPtr& work, const std::string& what, std::chrono::milliseconds bound) const {
    if (!work) return Status::ok();
    const auto start = Clock::now();
    try {
      if (work->wait(bound)) return Status::ok();
      return Status::backendError(what + ": abandoned, the process group is being destroyed");
    } catch (const c10::Error& error) {
      if (Clock::now() - start >= bound)
        return Status::timeout(what + ": not done within " + std::to_string(bound.count()) +
                               " ms (gloo: " + error.what_without_backtrace() + ")");
      return Status::backendError(what + ": " + error.what_without_backtrace());
    } catch (const std::exception& error) {
      if (Clock::now() - start >= bound)
        return Status::timeout(what + ": not done within " + std::to_string(bound.count()) +
                               " ms (gloo: " + error.what() + ")");
      return Status::backendError(what + ": " + error.what());
    }
  }
};

// One posted receive; its continuation settles it (under the State's mutex).
struct Receive {
  at::Tensor tensor;  // the caller's (contiguous)
  at::Tensor bytes;   // its bytes
  std::int64_t size = 0;
  int peer = -1;  // -1: any source
  int tag = 0;
  int source = -1;
  bool done = false;
  std::exception_ptr error;

  void settle(State& state, const Status& status) {
    done = true;
    if (!status.isOk()) error = errorOf("recv", status);
    state.settled.notify_all();
  }
};

// The verdict on a message of `kind` and `bytes` from `source` for receive `r`, before its payload.
Status verdictOf(const Receive& r, int source, Kind kind, std::int64_t bytes) {
  if (kind != Kind::Data || bytes == r.size) return Status::ok();
  const std::int64_t delta = bytes > r.size ? bytes - r.size : r.size - bytes;
  return Status::mismatch("recv from rank " + std::to_string(source) + " (tag " + std::to_string(r.tag) + "): rank " +
                          std::to_string(source) + " sends " + std::to_string(bytes) +
                          " bytes but this receive expects " + std::to_string(r.size) + " (" + std::to_string(delta) +
                          " bytes " + (bytes > r.size ? "more" : "fewer") + "): the tensors differ in size or dtype");
}

// Mismatch naming `source`, whose send to this rank with `tag` failed there with `reason`.
Status refusalOf(int source, int tag, const std::string& reason) {
  return Status::mismatch("recv from rank " + std::to_string(source) + " (tag " + std::to_string(tag) + "): rank " +
                          std::to_string(source) + "'s send to this rank failed there, so nothing was sent: " + reason);
}

// The continuation of receive `r`: takes its header (`header`, received by `headerWork`), posts
// and waits for its payload, and settles it. Every wait is bounded by the timeout.
void continueReceive(const std::shared_ptr<State>& state, const std::shared_ptr<Receive>& r, at::Tensor header,
                     WorkPtr headerWork) {
  State& s = *state;
  const std::string what = "recv from " + fromText(r->peer) + " (tag " + std::to_string(r->tag) + ")";
  const Status got = s.waitFor(headerWork, what + ", its header", s.timeout);
  std::unique_lock<std::mutex> lock(s.mutex);
  s.untrack(headerWork);
  if (!got.isOk()) return r->settle(s, got);
  const int source = r->peer >= 0 ? r->peer : headerWork->sourceRank();
  r->source = source;
  std::int64_t words[kHeaderWords];
  std::memcpy(words, header.data_ptr(), sizeof words);
  const auto kind = static_cast<Kind>(words[0]);
  const std::int64_t bytes = words[1];
  if ((kind != Kind::Data && kind != Kind::Refusal) || bytes < 0 || words[2] < 0)
    return r->settle(s, Status::backendError(what + ": a header of kind " + std::to_string(words[0]) + ", " +
                                             std::to_string(bytes) + " bytes, from rank " + std::to_string(source)));
  const Status verdict = verdictOf(*r, source, kind, bytes);
  if (bytes == 0) return r->settle(s, kind == Kind::Refusal ? refusalOf(source, r->tag, "") : verdict);
  // The payload lands in the caller's tensor when it is what the receive expects; anything else
  // (another count, a refusal's reason) in a buffer of the size announced.
  at::Tensor into = verdict.isOk() && kind == Kind::Data ? r->bytes : at::empty({bytes}, at::kByte);
  std::vector<at::Tensor> tensors{into};
  WorkPtr payloadWork;
  try {
    payloadWork = s.gloo->recv(tensors, source, payloadTag(words[2]));
  } catch (const std::exception& error) {
    return r->settle(s, Status::backendError(what + ", posting its payload: " + error.what()));
  }
  s.track(payloadWork);
  lock.unlock();
  const Status landed = s.waitFor(payloadWork, what + ", its payload from rank " + std::to_string(source), s.timeout);
  lock.lock();
  s.untrack(payloadWork);
  if (!landed.isOk()) return r->settle(s, landed);
  if (kind == Kind::Refusal)
    return r->settle(
        s, refusalOf(source, r->tag,
                     std::string(static_cast<const char*>(into.data_ptr()), static_cast<std::size_t>(bytes))));
  r->settle(s, verdict);
}

// A receive's Work: complete once its continuation settled it.
class GlooRecvWork final : public c10d::Work {
 public:
  GlooRecvWork(std::shared_ptr<State> state, std::shared_ptr<Receive> receive, c10d::OpType type)
      : c10d::Work(state->rank, type), state_(std::move(state)), receive_(std::move(receive)) {}
  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return receive_->done;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return receive_->done && !receive_->error;
  }
  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return receive_->error;
  }
  // Without a timeout, bounded by the group's: the continuation's two waits are, each.
  bool wait(std::chrono::milliseconds timeout) override {
    const auto bound = timeout == ::kNoTimeout ? 2 * state_->timeout : timeout;
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (!state_->settled.wait_for(lock, bound, [&] { return receive_->done; }))
      TORCH_CHECK(false, "chimera recv: ",
                  Status::timeout("recv from " + fromText(receive_->peer) + " (tag " + std::to_string(receive_->tag) +
                                  "): not complete within " + std::to_string(bound.count()) + " ms")
                      .toString());
    if (receive_->error) std::rethrow_exception(receive_->error);
    return true;
  }
  int sourceRank() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    TORCH_CHECK(receive_->done && receive_->source >= 0,
                "chimera recv: the source rank is known once the receive has completed");
    return receive_->source;
  }
  std::vector<at::Tensor> result() override { return {receive_->tensor}; }

 private:
  std::shared_ptr<State> state_;
  std::shared_ptr<Receive> receive_;
};

// A send's Work (a data send or a refusal): complete once both of its gloo sends are, which
// only a wait() finds out (gloo's sends complete when their receiver took them).
class GlooSendWork final : public c10d::Work {
 public:
  GlooSendWork(std::shared_ptr<State> state, int peer, int tag, at::Tensor tensor, WorkPtr header, WorkPtr payload)
      : c10d::Work(state->rank, c10d::OpType::SEND),
        state_(std::move(state)),
        peer_(peer),
        tag_(tag),
        tensor_(std::move(tensor)),
        header_(std::move(header)),
        payload_(std::move(payload)) {}
  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_ && !error_;
  }
  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_) {
      const auto bound = timeout == ::kNoTimeout ? state_->timeout : timeout;
      const auto deadline = Clock::now() + bound;
      const std::string what = "send to rank " + std::to_string(peer_) + " (tag " + std::to_string(tag_) + ")";
      Status status = state_->waitFor(header_, what + ", its header", bound);
      if (status.isOk() && payload_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        status = state_->waitFor(payload_, what + ", its payload", std::max(left, std::chrono::milliseconds(1)));
      }
      done_ = true;
      if (!status.isOk()) error_ = errorOf("send", status);
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  std::vector<at::Tensor> result() override { return {tensor_}; }

 private:
  std::shared_ptr<State> state_;
  const int peer_;
  const int tag_;
  at::Tensor tensor_;
  WorkPtr header_;
  WorkPtr payload_;  // none for an empty payload
  mutable std::mutex mutex_;
  bool done_ = false;
  std::exception_ptr error_;
};

class GlooPointToPoint final : public HostPointToPoint {
 public:
  GlooPointToPoint(c10::intrusive_ptr<c10d::Backend> gloo, std::int64_t timeoutMs) : state_(std::make_shared<State>()) {
    state_->rank = gloo->getRank();
    state_->size = gloo->getSize();
    state_->gloo = std::move(gloo);
    state_->timeout = std::chrono::milliseconds(timeoutMs);
    state_->sentTo.assign(static_cast<std::size_t>(state_->size), 0);
  }
  // Aborts what the continuations wait for (their waits return at once), then joins them.
  ~GlooPointToPoint() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->closing = true;
      for (const WorkPtr& work : state_->inFlight) work->abort();
    }
    pool_.reset();
  }

  WorkPtr send(const at::Tensor& tensor, int peer, int tag) override {
    TORCH_CHECK(hasChannel(tag), "chimera send: tag ", tag, " has no channel on the gloo transport");
    Posted sent = post(peer, tag, Kind::Data, bytesOf(tensor.contiguous()));
    return c10::make_intrusive<GlooSendWork>(state_, peer, tag, tensor, std::move(sent.header),
                                             std::move(sent.payload));
  }

  WorkPtr recv(const at::Tensor& tensor, int peer, int tag) override {
    TORCH_CHECK(tensor.is_contiguous(), "chimera recv: the tensor must be contiguous over gloo");
    TORCH_CHECK(hasChannel(tag), "chimera recv: tag ", tag, " has no channel on the gloo transport");
    auto r = std::make_shared<Receive>();
    r->tensor = tensor;
    r->bytes = bytesOf(tensor);
    r->size = r->bytes.numel();
    r->peer = peer;
    r->tag = tag;
    at::Tensor header = at::empty({kHeaderWords}, at::kLong);
    std::vector<at::Tensor> tensors{header};
    WorkPtr headerWork;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      TORCH_CHECK(!state_->closing, "chimera recv: the process group is being destroyed");
      headerWork = peer < 0 ? state_->gloo->recvAnysource(tensors, headerTag(tag))
                            : state_->gloo->recv(tensors, peer, headerTag(tag));
      state_->track(headerWork);
    }
    pool_->submit([state = state_, r, header, headerWork] { continueReceive(state, r, header, headerWork); });
    return c10::make_intrusive<GlooRecvWork>(state_, r, peer < 0 ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV);
  }

  // A refusal: a header of kind Refusal and the reason as its payload, on the tag's channel;
  // a background wait (bounded) lets it complete. Nothing for a tag without a channel (see the
  // header) or a peer that is no other rank.
  void refuse(int peer, int tag, const std::string& reason) override {
    if (peer < 0 || peer >= state_->size || peer == state_->rank || !hasChannel(tag)) return;
    const std::string cut = (reason.empty() ? std::string("no reason given") : reason).substr(0, kReasonBytes);
    at::Tensor text = at::empty({static_cast<std::int64_t>(cut.size())}, at::kByte);
    std::memcpy(text.data_ptr(), cut.data(), cut.size());
    Posted sent;
    try {
      sent = post(peer, tag, Kind::Refusal, text);
    } catch (const std::exception&) {
      return;  // the receiver then waits for its timeout, as without a refusal
    }
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->track(sent.header);
      state_->track(sent.payload);
    }
    pool_->submit([state = state_, sent] {
      const std::string what = "refusal to rank " + std::to_string(sent.peer);
      if (state->waitFor(sent.header, what, state->timeout).isOk())
        (void)state->waitFor(sent.payload, what, state->timeout);  // its receiver reports its own side
      std::lock_guard<std::mutex> lock(state->mutex);
      state->untrack(sent.header);
      state->untrack(sent.payload);
    });
  }

  int userTagLimit() const override { return kGlooUserTagLimit; }
  int reservedTag() const override { return kGlooBarrierTag; }

 private:
  // The two gloo sends of one message.
  struct Posted {
    int peer = 0;
    WorkPtr header;
    WorkPtr payload;  // none for an empty payload
  };
  // Posts the header of a message of `kind`, then `payload` (bytes), to `peer` on `tag`'s channel.
  Posted post(int peer, int tag, Kind kind, const at::Tensor& payload) {
    TORCH_CHECK(peer >= 0 && peer < state_->size && peer != state_->rank, "chimera send: peer ", peer,
                " is not another rank of this group of ", state_->size);
    at::Tensor header = at::empty({kHeaderWords}, at::kLong);
    std::vector<at::Tensor> headers{header};
    std::vector<at::Tensor> payloads{payload};
    std::lock_guard<std::mutex> lock(state_->mutex);
    TORCH_CHECK(!state_->closing, "chimera send: the process group is being destroyed");
    const std::int64_t number = state_->sentTo[static_cast<std::size_t>(peer)]++;
    const std::int64_t words[kHeaderWords] = {static_cast<std::int64_t>(kind), payload.numel(), number};
    std::memcpy(header.data_ptr(), words, sizeof words);
    Posted posted{peer, state_->gloo->send(headers, peer, headerTag(tag)), nullptr};
    if (payload.numel() > 0) posted.payload = state_->gloo->send(payloads, peer, payloadTag(number));
    return posted;
  }

  std::shared_ptr<State> state_;
  std::unique_ptr<ContinuationPool> pool_ = std::make_unique<ContinuationPool>();
};

}  // namespace

std::unique_ptr<HostPointToPoint> makeGlooPointToPoint(c10::intrusive_ptr<c10d::Backend> gloo, std::int64_t timeoutMs) {
  return std::make_unique<GlooPointToPoint>(std::move(gloo), timeoutMs);
}

}  // namespace chimera::torch_ext
