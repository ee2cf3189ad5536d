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
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "transfer_verdicts.hpp"

namespace chimera::torch_ext {
namespace {

using Clock = std::chrono::steady_clock;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// A header: four int64 words, its kind, the payload's byte count (a refusal: its reason's), the
// message's number among those its sender sent to this rank (which names the payload tag) and
// how many refusals of a tag without a channel its sender had sent this rank before it; then
// room for a payload of up to kInlineBytes, which travels in the header (one gloo message
// instead of two). Every header has the same size: gloo receives only what was sent.
enum class Kind : std::int64_t { Data = 1, Refusal = 2 };
constexpr std::int64_t kHeaderWords = 4;
constexpr std::int64_t kInlineBytes = 96;
constexpr std::int64_t kHeaderBytes = kHeaderWords * 8 + kInlineBytes;
bool isInline(Kind kind, std::int64_t bytes) { return kind == Kind::Data && bytes <= kInlineBytes; }
// A refusal on its tag's channel: its reason is cut to this many bytes.
constexpr std::size_t kReasonBytes = 1024;
// A refusal of a tag without a channel: four words (Refusal, the reason's bytes, its number
// among the messages to this rank, the tag), then the reason, kGlooRefusalBytes in all.
constexpr std::int64_t kRefusalWords = 4;
constexpr Clock::time_point kNever = Clock::time_point::max();

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

// One posted receive; settled (under the State's mutex) by the message it is given.
struct Receive {
  at::Tensor tensor;  // the caller's (contiguous)
  at::Tensor bytes;   // its bytes
  std::int64_t size = 0;
  int peer = -1;  // -1: any source
  int tag = 0;
  std::uint64_t order = 0;  // among the channel's receives, in post order
  int source = -1;
  bool done = false;
  std::exception_ptr error;
};

// A message whose header came in. Its payload lands in the receive it was given to, when that
// receive expects exactly its bytes, else in `scratch` (a refusal's reason, another byte count,
// or a message no receive waited for: kept for the next receive of its source and tag).
struct Arrival {
  int source = -1;
  Kind kind = Kind::Data;
  std::int64_t bytes = 0;
  std::int64_t number = 0;
  at::Tensor scratch;
  std::shared_ptr<Receive> owner;  // none yet: kept
  bool landed = false;             // the payload is in (or failed: `status`)
  Status status;
};

// The receives of one source (or any source, -1) and tag. Each posted header receive takes the
// next message of that source and tag (gloo matches them in order); its continuation hands it
// to the earliest waiting receive, in the order the header receives were posted. A receive
// failed by a refusal whose tag had no channel leaves its header receive posted (gloo cannot
// cancel one): the message it takes then goes to the next receive, or is kept until one comes.
struct Channel {
  std::deque<std::shared_ptr<Receive>> waiting;  // posted, no message yet, in post order
  std::deque<std::shared_ptr<Arrival>> kept;     // messages that came while no receive waited
  std::uint64_t posted = 0;                      // header receives posted
  std::uint64_t arrived = 0;                     // header receives handed on (in post order)
};
using ChannelKey = std::pair<int, int>;  // (source or -1, tag)

// A refusal whose tag had no channel, which came while no receive from its sender waited.
struct KeptRefusal {
  int source = 0;
  std::int64_t number = 0;
  std::string reason;
};

// What the channel, its continuations and its Works share.
struct State {
  c10::intrusive_ptr<c10d::Backend> gloo;
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds tick{0};  // how often a wait on gloo is interrupted (well below gloo's bound)
  int rank = 0;
  int size = 0;
  // Guards what follows, the posting of gloo transfers and every Receive and Arrival.
  std::mutex mutex;
  std::condition_variable changed;         // a receive settled, a header was handed on, or closing
  std::condition_variable stopping;        // closing (the ticker)
  std::vector<std::int64_t> sentTo;        // per group rank: the messages (and refusals) this rank sent it
  std::vector<std::int64_t> refusalsTo;    // per group rank: refusals of a tag without a channel sent it
  std::vector<std::int64_t> refusalsFrom;  // per group rank: such refusals from it the listener took
  std::map<ChannelKey, Channel> channels;
  std::deque<KeptRefusal> refusals;
  std::uint64_t receives = 0;
  std::vector<WorkPtr> waited;     // gloo transfers in a wait of waitFor (the ticker interrupts them)
  std::vector<WorkPtr> abandoned;  // gloo transfers given up on, still posted: gloo may use their buffers
  bool closing = false;

  // Waits for gloo's `work` until `deadline` (kNever: until it completes or the channel closes).
  // gloo's own bound is never reached: its expiry would close gloo's connections, and a receive
  // cannot be cancelled. So the wait is interrupted every tick (Work::abort) and resumed. ok;
  // Timeout at the deadline (the transfer stays posted); BackendError on a failure or when the
  // channel closes.
  Status waitFor(const WorkPtr& work, const std::string& what, Clock::time_point deadline) {
    if (!work) return Status::ok();
    const Status abandonedNow = Status::backendError(what + ": abandoned, the process group is being destroyed");
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (closing) return abandonedNow;
      waited.push_back(work);
    }
    Status result = Status::ok();
    for (;;) {
      bool done = false;
      try {
        done = work->wait(::kNoTimeout);
      } catch (const c10::Error& error) {
        result = Status::backendError(what + ": " + error.what_without_backtrace());
        break;
      } catch (const std::exception& error) {
        result = Status::backendError(what + ": " + error.what());
        break;
      }
      if (done) break;
      std::lock_guard<std::mutex> lock(mutex);
      if (closing) {
        result = abandonedNow;
        break;
      }
      if (Clock::now() >= deadline) {
        result = Status::timeout(what + ": not done within the timeout of " + std::to_string(timeout.count()) + " ms");
        break;
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    std::erase(waited, work);
    return result;
  }

  void settle(Receive& r, const Status& status) {
    r.done = true;
    if (!status.isOk()) r.error = errorOf("recv", status);
    changed.notify_all();
  }
};

// The verdict on a message of `kind` and `bytes` from `source` for receive `r`, before its payload.
Status verdictOf(const Receive& r, int source, Kind kind, std::int64_t bytes) {
  if (kind != Kind::Data || bytes == r.size) return Status::ok();
  return otherByteCount(source, r.tag, bytes, r.size);
}

// Mismatch naming `source`, whose send to this rank failed there with `reason`, as receive `r` reports it.
Status refusalOf(int source, const Receive& r, const std::string& reason) { return refusedSend(source, r.tag, reason); }

// Settles receive `r` with arrival `a`, whose payload landed. Under the State's mutex.
void settleFrom(State& s, Receive& r, const Arrival& a) {
  r.source = a.source;
  if (!a.status.isOk()) return s.settle(r, a.status);
  if (a.kind == Kind::Refusal)
    return s.settle(
        r, refusalOf(a.source, r,
                     std::string(static_cast<const char*>(a.scratch.data_ptr()), static_cast<std::size_t>(a.bytes))));
  const Status verdict = verdictOf(r, a.source, a.kind, a.bytes);
  if (verdict.isOk() && a.scratch.defined() && a.bytes > 0)
    std::memcpy(r.bytes.data_ptr(), a.scratch.data_ptr(), static_cast<std::size_t>(a.bytes));
  s.settle(r, verdict);
}

// The continuation of header receive number `index` of channel `key`: takes the header, hands
// the message to the channel's earliest waiting receive (or keeps it), receives its payload and
// settles that receive. While no message comes, the receive it would go to fails with Timeout
// after the timeout, and the header receive stays posted for the message that comes next.
void takeHeader(const std::shared_ptr<State>& state, ChannelKey key, std::uint64_t index, at::Tensor header,
                WorkPtr headerWork) {
  State& s = *state;
  const std::string what = "recv from " + fromText(key.first) + " (tag " + std::to_string(key.second) + ")";
  Status got = s.waitFor(headerWork, what + ", its header", Clock::now() + s.timeout);
  if (got.code() == StatusCode::Timeout) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      Channel& c = s.channels[key];
      const std::uint64_t ahead = index - c.arrived;  // header receives before this one, each for one receive
      if (ahead < c.waiting.size()) {
        auto r = c.waiting[ahead];
        c.waiting.erase(c.waiting.begin() + static_cast<std::ptrdiff_t>(ahead));
        s.settle(*r, got);
      }
    }
    got = s.waitFor(headerWork, what + ", its header", kNever);
  }
  auto a = std::make_shared<Arrival>();
  std::int64_t words[kHeaderWords] = {0, 0, 0, 0};
  if (got.isOk()) {
    a->source = key.first >= 0 ? key.first : headerWork->sourceRank();
    std::memcpy(words, header.data_ptr(), sizeof words);
    a->kind = static_cast<Kind>(words[0]);
    a->bytes = words[1];
    a->number = words[2];
    if ((a->kind != Kind::Data && a->kind != Kind::Refusal) || a->bytes < 0 || a->number < 0 || words[3] < 0 ||
        a->source < 0 || a->source >= s.size) {
      a->landed = true;
      a->status = Status::backendError(what + ": a header of kind " + std::to_string(words[0]) + ", " +
                                       std::to_string(a->bytes) + " bytes, from rank " + std::to_string(a->source));
      a->bytes = 0;
    }
  }
  std::unique_lock<std::mutex> lock(s.mutex);
  Channel& c = s.channels[key];
  s.changed.wait(lock, [&] { return c.arrived == index || s.closing; });
  if (s.closing) return;  // the destructor settles every receive
  if (!got.isOk()) {
    ++c.arrived;
    s.changed.notify_all();
    if (!c.waiting.empty()) {
      auto r = c.waiting.front();
      c.waiting.pop_front();
      s.settle(*r, got);
    }
    return;
  }
  // The refusals its sender sent before it (already on their way to the listener) go first.
  if (!a->landed) {
    auto& from = s.refusalsFrom[static_cast<std::size_t>(a->source)];
    s.changed.wait_for(lock, s.timeout, [&] { return from >= words[3] || s.closing; });
    if (s.closing) return;
  }
  ++c.arrived;
  s.changed.notify_all();
  // A kept refusal from the sender that it sent before this message fails the receive this
  // message would go to; the message goes to the next.
  for (;;) {
    auto refusal = std::find_if(s.refusals.begin(), s.refusals.end(),
                                [&](const KeptRefusal& k) { return k.source == a->source && k.number < a->number; });
    if (refusal == s.refusals.end() || c.waiting.empty()) break;
    auto r = c.waiting.front();
    c.waiting.pop_front();
    r->source = a->source;
    s.settle(*r, refusalOf(a->source, *r, refusal->reason));
    s.refusals.erase(refusal);
  }
  // With no receive of its channel waiting (a refusal failed the one its header receive was
  // posted for), a message goes to a receive of the other channel it may match: from any source
  // for one from its source, and the reverse. That one's own header receive then takes the next.
  std::deque<std::shared_ptr<Receive>>* to = &c.waiting;
  if (to->empty())
    if (auto it = s.channels.find({key.first < 0 ? a->source : -1, key.second}); it != s.channels.end())
      to = &it->second.waiting;
  if (!to->empty()) {
    a->owner = to->front();
    to->pop_front();
  } else {
    c.kept.push_back(a);
  }
  const bool direct = a->owner && a->kind == Kind::Data && a->bytes == a->owner->size;
  if (!a->landed && a->bytes > 0 && !direct) a->scratch = at::empty({a->bytes}, at::kByte);
  if (!a->landed && a->bytes > 0 && isInline(a->kind, a->bytes))
    std::memcpy(direct ? a->owner->bytes.data_ptr() : a->scratch.data_ptr(),
                static_cast<const char*>(header.data_ptr()) + kHeaderWords * 8, static_cast<std::size_t>(a->bytes));
  if (a->landed || a->bytes == 0 || isInline(a->kind, a->bytes)) {
    a->landed = true;
    if (a->owner) settleFrom(s, *a->owner, *a);
    return;
  }
  std::vector<at::Tensor> tensors{direct ? a->owner->bytes : a->scratch};
  WorkPtr payloadWork;
  Status landed = Status::ok();
  try {
    payloadWork = s.gloo->recv(tensors, a->source, payloadTag(a->number));
  } catch (const std::exception& error) {
    landed = Status::backendError(what + ", posting its payload: " + error.what());
  }
  if (payloadWork) {
    lock.unlock();
    landed =
        s.waitFor(payloadWork, what + ", its payload from rank " + std::to_string(a->source), Clock::now() + s.timeout);
    lock.lock();
    if (!landed.isOk()) s.abandoned.push_back(payloadWork);
  }
  a->landed = true;
  a->status = landed;
  if (a->owner) settleFrom(s, *a->owner, *a);
}

// The listener of refusals whose tag had no channel: one receive from any source on the
// refusal tag, always posted. A refusal fails the earliest posted receive from its sender (or
// from any source) that has no message yet; with none, it is kept for the next one posted.
void listenForRefusals(const std::shared_ptr<State>& state) {
  State& s = *state;
  for (;;) {
    at::Tensor message = at::zeros({static_cast<std::int64_t>(kGlooRefusalBytes)}, at::kByte);
    std::vector<at::Tensor> tensors{message};
    WorkPtr work;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (s.closing) return;
      try {
        work = s.gloo->recvAnysource(tensors, kGlooRefusalTag);
      } catch (const std::exception&) {
        return;  // such refusals then reach no receive: receivers wait for their timeout
      }
    }
    if (!s.waitFor(work, "refusals", kNever).isOk()) {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (!s.closing) s.abandoned.push_back(work);
      return;
    }
    std::int64_t words[kRefusalWords];
    std::memcpy(words, message.data_ptr(), sizeof words);
    const std::size_t room = kGlooRefusalBytes - sizeof words;
    const std::string reason(static_cast<const char*>(message.data_ptr()) + sizeof words,
                             std::min(room, static_cast<std::size_t>(std::max<std::int64_t>(words[1], 0))));
    const int source = work->sourceRank();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (source < 0 || source >= s.size) continue;
    ++s.refusalsFrom[static_cast<std::size_t>(source)];
    s.changed.notify_all();
    std::deque<std::shared_ptr<Receive>>* from = nullptr;
    for (auto& [key, c] : s.channels)
      if ((key.first == source || key.first < 0) && !c.waiting.empty() &&
          (from == nullptr || c.waiting.front()->order < from->front()->order))
        from = &c.waiting;
    if (from == nullptr) {
      s.refusals.push_back({source, words[2], reason});
      continue;
    }
    auto r = from->front();
    from->pop_front();
    r->source = source;
    s.settle(*r, refusalOf(source, *r, reason));
  }
}

// A receive's Work: complete once the message it was given settled it.
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
  // Without a timeout, bounded by twice the group's: a receive without a message fails with
  // Timeout after one, and its payload's wait is bounded by another.
  bool wait(std::chrono::milliseconds timeout) override {
    const auto bound = timeout == ::kNoTimeout ? 2 * state_->timeout : timeout;
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (!state_->changed.wait_for(lock, bound, [&] { return receive_->done; }))
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

// The two gloo sends of one message (or of a refusal).
struct Posted {
  int peer = 0;
  int tag = 0;
  WorkPtr header;
  WorkPtr payload;  // none for an empty payload
};

// Waits for both sends of `sent` until `deadline`; on a failure or at the deadline they stay
// posted, kept among the abandoned (gloo may still read their buffers).
Status waitForSends(State& s, const Posted& sent, Clock::time_point deadline) {
  const std::string what = "send to rank " + std::to_string(sent.peer) + " (tag " + std::to_string(sent.tag) + ")";
  Status status = s.waitFor(sent.header, what + ", its header", deadline);
  if (status.isOk()) status = s.waitFor(sent.payload, what + ", its payload", deadline);
  if (!status.isOk()) {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.abandoned.push_back(sent.header);
    if (sent.payload) s.abandoned.push_back(sent.payload);
  }
  return status;
}

// A send's Work: complete once both of its gloo sends are, which only a wait() finds out
// (gloo's sends complete when their receiver took them).
class GlooSendWork final : public c10d::Work {
 public:
  GlooSendWork(std::shared_ptr<State> state, at::Tensor tensor, Posted sent)
      : c10d::Work(state->rank, c10d::OpType::SEND),
        state_(std::move(state)),
        tensor_(std::move(tensor)),
        sent_(std::move(sent)) {}
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
      const Status status =
          waitForSends(*state_, sent_, Clock::now() + (timeout == ::kNoTimeout ? state_->timeout : timeout));
      done_ = true;
      if (!status.isOk()) error_ = errorOf("send", status);
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  std::vector<at::Tensor> result() override { return {tensor_}; }

 private:
  std::shared_ptr<State> state_;
  at::Tensor tensor_;
  Posted sent_;
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
    state_->tick = std::clamp(state_->timeout / 4, std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
    state_->sentTo.assign(static_cast<std::size_t>(state_->size), 0);
    state_->refusalsTo.assign(static_cast<std::size_t>(state_->size), 0);
    state_->refusalsFrom.assign(static_cast<std::size_t>(state_->size), 0);
    ticker_ = std::thread([s = state_] {
      std::unique_lock<std::mutex> lock(s->mutex);
      while (!s->closing) {
        s->stopping.wait_for(lock, s->tick);
        for (const WorkPtr& work : s->waited) work->abort();
      }
    });
    listener_ = std::thread([s = state_] { listenForRefusals(s); });
  }
  // Interrupts every wait on gloo (each returns at once, abandoned), fails every receive that
  // has no message, then joins the threads.
  ~GlooPointToPoint() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->closing = true;
      for (const WorkPtr& work : state_->waited) work->abort();
      const Status closed = Status::backendError("the process group is being destroyed");
      for (auto& [key, c] : state_->channels)
        for (auto& r : c.waiting) state_->settle(*r, closed);
      state_->stopping.notify_all();
      state_->changed.notify_all();
    }
    ticker_.join();
    listener_.join();
    pool_.reset();
  }

  WorkPtr send(const at::Tensor& tensor, int peer, int tag) override {
    TORCH_CHECK(hasChannel(tag), "chimera send: tag ", tag, " has no channel on the gloo transport");
    return c10::make_intrusive<GlooSendWork>(state_, tensor, post(peer, tag, Kind::Data, bytesOf(tensor.contiguous())));
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
    const auto type = peer < 0 ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV;
    State& s = *state_;
    std::lock_guard<std::mutex> lock(s.mutex);
    TORCH_CHECK(!s.closing, "chimera recv: the process group is being destroyed");
    r->order = s.receives++;
    const ChannelKey key{peer, tag};
    Channel& c = s.channels[key];
    // A kept refusal from its source (from any rank, for a receive from any source) fails it,
    // unless a message kept for it was sent before that refusal.
    auto refusal = std::find_if(s.refusals.begin(), s.refusals.end(),
                                [&](const KeptRefusal& k) { return peer < 0 || k.source == peer; });
    if (refusal != s.refusals.end() &&
        !(!c.kept.empty() && c.kept.front()->source == refusal->source && c.kept.front()->number < refusal->number)) {
      r->source = refusal->source;
      s.settle(*r, refusalOf(refusal->source, *r, refusal->reason));
      s.refusals.erase(refusal);
    } else if (auto a = takeKept(key); a) {
      a->owner = r;
      if (a->landed) settleFrom(s, *r, *a);
    } else {
      c.waiting.push_back(r);
      if (c.posted - c.arrived < c.waiting.size()) postHeader(key, c);
    }
    return c10::make_intrusive<GlooRecvWork>(state_, r, type);
  }

  // A refusal: on the tag's channel, a header of kind Refusal and the reason as its payload; for
  // a tag without one, a message of kGlooRefusalBytes on the refusal tag. Waited for in the
  // background (bounded). Nothing for a peer that is no other rank.
  void refuse(int peer, int tag, const std::string& reason) override {
    if (peer < 0 || peer >= state_->size || peer == state_->rank) return;
    const std::string given = reason.empty() ? std::string("no reason given") : reason;
    Posted sent;
    try {
      if (hasChannel(tag)) {
        const std::string cut = given.substr(0, kReasonBytes);
        at::Tensor text = at::empty({static_cast<std::int64_t>(cut.size())}, at::kByte);
        std::memcpy(text.data_ptr(), cut.data(), cut.size());
        sent = post(peer, tag, Kind::Refusal, text);
      } else {
        sent = postRefusal(peer, tag, given);
      }
    } catch (const std::exception&) {
      return;  // the receiver then waits for its timeout, as without a refusal
    }
    pool_->submit([s = state_, sent] { (void)waitForSends(*s, sent, Clock::now() + s->timeout); });
  }

  int userTagLimit() const override { return kGlooUserTagLimit; }
  int reservedTag() const override { return kGlooBarrierTag; }

 private:
  void checkPeer(int peer) const {
    TORCH_CHECK(peer >= 0 && peer < state_->size && peer != state_->rank, "chimera send: peer ", peer,
                " is not another rank of this group of ", state_->size);
  }
  // Posts the header of a message of `kind`, then `payload` (bytes), to `peer` on `tag`'s channel.
  // A payload of up to kInlineBytes travels in the header.
  Posted post(int peer, int tag, Kind kind, const at::Tensor& payload) {
    checkPeer(peer);
    at::Tensor header = at::empty({kHeaderBytes}, at::kByte);
    std::vector<at::Tensor> headers{header};
    std::vector<at::Tensor> payloads{payload};
    const bool inlined = isInline(kind, payload.numel());
    if (inlined && payload.numel() > 0)
      std::memcpy(static_cast<char*>(header.data_ptr()) + kHeaderWords * 8, payload.data_ptr(),
                  static_cast<std::size_t>(payload.numel()));
    std::lock_guard<std::mutex> lock(state_->mutex);
    TORCH_CHECK(!state_->closing, "chimera send: the process group is being destroyed");
    const std::int64_t number = state_->sentTo[static_cast<std::size_t>(peer)]++;
    const std::int64_t words[kHeaderWords] = {static_cast<std::int64_t>(kind), payload.numel(), number,
                                              state_->refusalsTo[static_cast<std::size_t>(peer)]};
    std::memcpy(header.data_ptr(), words, sizeof words);
    Posted posted{peer, tag, state_->gloo->send(headers, peer, headerTag(tag)), nullptr};
    if (!inlined) posted.payload = state_->gloo->send(payloads, peer, payloadTag(number));
    return posted;
  }
  // Posts a refusal of `tag`, which has no channel, to `peer` on the refusal tag.
  Posted postRefusal(int peer, int tag, const std::string& reason) {
    checkPeer(peer);
    at::Tensor message = at::zeros({static_cast<std::int64_t>(kGlooRefusalBytes)}, at::kByte);
    std::vector<at::Tensor> messages{message};
    const std::size_t room = kGlooRefusalBytes - kRefusalWords * sizeof(std::int64_t);
    const std::string cut = reason.substr(0, room);
    std::lock_guard<std::mutex> lock(state_->mutex);
    TORCH_CHECK(!state_->closing, "chimera send: the process group is being destroyed");
    const std::int64_t number = state_->sentTo[static_cast<std::size_t>(peer)]++;
    ++state_->refusalsTo[static_cast<std::size_t>(peer)];
    const std::int64_t words[kRefusalWords] = {static_cast<std::int64_t>(Kind::Refusal),
                                               static_cast<std::int64_t>(cut.size()), number, tag};
    auto* data = static_cast<char*>(message.data_ptr());
    std::memcpy(data, words, sizeof words);
    std::memcpy(data + sizeof words, cut.data(), cut.size());
    return Posted{peer, tag, state_->gloo->send(messages, peer, kGlooRefusalTag), nullptr};
  }
  // The first message kept for a receive of channel `key`: its own channel's, else one of the
  // other channels it may take (see takeHeader) of its tag. Under the mutex.
  std::shared_ptr<Arrival> takeKept(ChannelKey key) {
    State& s = *state_;
    auto take = [](std::deque<std::shared_ptr<Arrival>>& kept, int source) -> std::shared_ptr<Arrival> {
      auto it =
          std::find_if(kept.begin(), kept.end(), [&](const auto& a) { return source < 0 || a->source == source; });
      if (it == kept.end()) return nullptr;
      auto a = *it;
      kept.erase(it);
      return a;
    };
    if (auto a = take(s.channels[key].kept, -1)) return a;
    for (auto& [other, c] : s.channels)
      if (other.second == key.second && other.first != key.first && (key.first < 0 || other.first < 0))
        if (auto a = take(c.kept, key.first)) return a;
    return nullptr;
  }
  // Posts the next header receive of channel `key` and its continuation. Under the mutex.
  void postHeader(ChannelKey key, Channel& c) {
    at::Tensor header = at::empty({kHeaderBytes}, at::kByte);
    std::vector<at::Tensor> tensors{header};
    WorkPtr work = key.first < 0 ? state_->gloo->recvAnysource(tensors, headerTag(key.second))
                                 : state_->gloo->recv(tensors, key.first, headerTag(key.second));
    const std::uint64_t index = c.posted++;
    pool_->submit([s = state_, key, index, header, work] { takeHeader(s, key, index, header, work); });
  }

  std::shared_ptr<State> state_;
  std::unique_ptr<ContinuationPool> pool_ = std::make_unique<ContinuationPool>();
  std::thread ticker_;
  std::thread listener_;
};

}  // namespace

std::unique_ptr<HostPointToPoint> makeGlooPointToPoint(c10::intrusive_ptr<c10d::Backend> gloo, std::int64_t timeoutMs) {
  return std::make_unique<GlooPointToPoint>(std::move(gloo), timeoutMs);
}

}  // namespace chimera::torch_ext
