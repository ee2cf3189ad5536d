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
#include <set>
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
// A refusal of a tag without a channel, kGlooRefusalBytes in all: six words (Refusal, the
// reason's bytes, its number among the messages to this rank, the tag, how many unconfirmed
// messages follow, 0), then up to kUnconfirmedKept pairs of words (the number and tag of an
// earlier message to this rank whose send its sender had not yet seen complete), then the reason.
constexpr std::int64_t kRefusalWords = 6;
constexpr std::size_t kUnconfirmedKept = 16;
constexpr std::size_t kRefusalReasonAt = (kRefusalWords + 2 * kUnconfirmedKept) * sizeof(std::int64_t);
static_assert(kRefusalReasonAt < kGlooRefusalBytes);
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

// A refusal whose tag had no channel, as its receiver holds it.
struct Refusal {
  int source = 0;
  std::int64_t number = 0;
  std::string reason;
  // (number, tag) of messages its sender sent this rank before it without seeing their send
  // complete: they may still come after it.
  std::vector<std::pair<std::int64_t, int>> unconfirmed;
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
  std::condition_variable changed;       // a receive settled, a header was handed on, or closing
  std::condition_variable stopping;      // closing (the ticker)
  std::vector<std::int64_t> sentTo;      // per group rank: the messages (and refusals) this rank sent it
  std::vector<std::int64_t> refusalsTo;  // per group rank: refusals of a tag without a channel sent it
  // Per group rank: (number, tag) of the messages sent it whose send was not yet seen complete
  // (the latest kUnconfirmedKept).
  std::vector<std::deque<std::pair<std::int64_t, int>>> unconfirmedTo;
  // Per group rank, for the messages from it: every one numbered below handedBelow, and those in
  // handedAbove, was handed on (to a receive, kept, or, a refusal of a tag without a channel, put
  // in order); refusalsFrom counts those refusals.
  std::vector<std::int64_t> handedBelow;
  std::vector<std::set<std::int64_t>> handedAbove;
  std::vector<std::int64_t> refusalsFrom;
  std::map<ChannelKey, Channel> channels;
  std::deque<Refusal> held;      // taken by the listener; messages their sender sent before them still to come
  std::deque<Refusal> refusals;  // put in order; no receive for them to fail yet
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

// The order of one sender's messages at its receiver (see gloo_point_to_point.hpp). Every
// function below runs under the State's mutex.

bool wasHanded(const State& s, int source, std::int64_t number) {
  const auto i = static_cast<std::size_t>(source);
  return number < s.handedBelow[i] || s.handedAbove[i].contains(number);
}

void markHanded(State& s, int source, std::int64_t number) {
  const auto i = static_cast<std::size_t>(source);
  if (number < s.handedBelow[i]) return;
  auto& above = s.handedAbove[i];
  if (number == s.handedBelow[i]) {
    ++s.handedBelow[i];  // the usual case: in order
  } else {
    above.insert(number);
  }
  while (!above.empty() && *above.begin() == s.handedBelow[i]) {
    above.erase(above.begin());
    ++s.handedBelow[i];
  }
}

// The receive refusal `f` fails: the earliest posted receive from its sender or from any source
// (`posting`, when given, is being posted, the latest) that no message its sender sent before it
// will go to. Such a message still to come (one of f's unconfirmed, not handed on yet) or kept
// (handed on while no receive of its tag waited) goes to the earliest receive of its tag, so one
// receive of that tag is passed over for each. None: the refusal waits for the next receive.
std::shared_ptr<Receive> targetOf(State& s, const Refusal& f, const std::shared_ptr<Receive>& posting) {
  std::map<int, std::int64_t> before;  // per tag: the receives passed over
  for (const auto& [number, tag] : f.unconfirmed)
    if (!wasHanded(s, f.source, number)) ++before[tag];
  std::vector<std::shared_ptr<Receive>> candidates;
  for (auto& [key, c] : s.channels) {
    if (key.first >= 0 && key.first != f.source) continue;
    for (const auto& a : c.kept)
      if (a->source == f.source && a->number < f.number) ++before[key.second];
    candidates.insert(candidates.end(), c.waiting.begin(), c.waiting.end());
  }
  if (posting) candidates.push_back(posting);
  std::sort(candidates.begin(), candidates.end(), [](const auto& x, const auto& y) { return x->order < y->order; });
  for (auto& r : candidates) {
    auto passed = before.find(r->tag);
    if (passed == before.end() || passed->second == 0) return r;
    --passed->second;
  }
  return nullptr;
}

// Fails receive `r` (waiting, or being posted) with refusal `f`.
void failWith(State& s, const std::shared_ptr<Receive>& r, const Refusal& f) {
  if (auto c = s.channels.find({r->peer, r->tag}); c != s.channels.end()) std::erase(c->second.waiting, r);
  r->source = f.source;
  s.settle(*r, refusalOf(f.source, *r, f.reason));
}

// Fails the receives the refusals of `source` put in order find now, in their order; the first
// that finds none stops it (a later one must not overtake it).
void applyRefusals(State& s, int source) {
  for (auto it = s.refusals.begin(); it != s.refusals.end();) {
    if (it->source != source) {
      ++it;
      continue;
    }
    auto r = targetOf(s, *it, nullptr);
    if (!r) return;
    failWith(s, r, *it);
    it = s.refusals.erase(it);
  }
}

// Puts in order the refusals of `source` the listener holds, in their sender's order: each, once
// every message numbered below it from `source` was handed on or is among its unconfirmed, is
// handed on itself (so messages sent after it may go on) and fails the receive targetOf finds.
void orderRefusals(State& s, int source) {
  const auto i = static_cast<std::size_t>(source);
  for (;;) {
    auto it = std::find_if(s.held.begin(), s.held.end(), [&](const Refusal& f) { return f.source == source; });
    if (it == s.held.end()) return;
    for (std::int64_t q = s.handedBelow[i]; q < it->number; ++q)
      if (!s.handedAbove[i].contains(q) &&
          std::none_of(it->unconfirmed.begin(), it->unconfirmed.end(), [&](const auto& u) { return u.first == q; }))
        return;  // a message sent before it is on its way
    markHanded(s, source, it->number);
    ++s.refusalsFrom[i];
    s.refusals.push_back(std::move(*it));
    s.held.erase(it);
    s.changed.notify_all();
    applyRefusals(s, source);
  }
}

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
  const bool valid = got.isOk() && !a->landed;  // a header, well formed
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
  // The refusals of a tag without a channel its sender sent before it go first: the listener
  // takes them and puts them in order (words[3] of them), each failing its receive if one waits.
  if (valid) {
    auto& from = s.refusalsFrom[static_cast<std::size_t>(a->source)];
    s.changed.wait_for(lock, s.timeout, [&] { return from >= words[3] || s.closing; });
    if (s.closing) return;
    applyRefusals(s, a->source);
  }
  ++c.arrived;
  s.changed.notify_all();
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
  // Handed on: a refusal its sender sent after it may now be put in order.
  if (valid) {
    markHanded(s, a->source, a->number);
    orderRefusals(s, a->source);
    applyRefusals(s, a->source);
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
// refusal tag, always posted. Each is held until it can be put in order (orderRefusals).
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
    const auto* data = static_cast<const char*>(message.data_ptr());
    std::int64_t words[kRefusalWords];
    std::memcpy(words, data, sizeof words);
    Refusal f;
    f.source = work->sourceRank();
    f.number = words[2];
    const auto listed = static_cast<std::size_t>(std::clamp<std::int64_t>(words[4], 0, kUnconfirmedKept));
    for (std::size_t k = 0; k < listed; ++k) {
      std::int64_t pair[2];
      std::memcpy(pair, data + sizeof words + k * sizeof pair, sizeof pair);
      f.unconfirmed.emplace_back(pair[0], static_cast<int>(pair[1]));
    }
    const std::size_t room = kGlooRefusalBytes - kRefusalReasonAt;
    f.reason.assign(data + kRefusalReasonAt,
                    std::min(room, static_cast<std::size_t>(std::max<std::int64_t>(words[1], 0))));
    std::lock_guard<std::mutex> lock(s.mutex);
    if (f.source < 0 || f.source >= s.size || f.number < 0) continue;
    const int source = f.source;
    s.held.push_back(std::move(f));
    orderRefusals(s, source);
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
  std::int64_t number = -1;  // among the messages to `peer`
  WorkPtr header;
  WorkPtr payload;  // none for an empty payload
};

// Waits for both sends of `sent` until `deadline`; on a failure or at the deadline they stay
// posted, kept among the abandoned (gloo may still read their buffers).
Status waitForSends(State& s, const Posted& sent, Clock::time_point deadline) {
  const std::string what = "send to rank " + std::to_string(sent.peer) + " (tag " + std::to_string(sent.tag) + ")";
  Status status = s.waitFor(sent.header, what + ", its header", deadline);
  if (status.isOk()) status = s.waitFor(sent.payload, what + ", its payload", deadline);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (status.isOk()) {
    // Its receiver took it: nothing sent after it can reach the receiver first.
    std::erase(s.unconfirmedTo[static_cast<std::size_t>(sent.peer)], std::make_pair(sent.number, sent.tag));
  } else {
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
    state_->unconfirmedTo.resize(static_cast<std::size_t>(state_->size));
    state_->handedBelow.assign(static_cast<std::size_t>(state_->size), 0);
    state_->handedAbove.resize(static_cast<std::size_t>(state_->size));
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
    // A refusal put in order fails it when this is the receive the refusal finds (targetOf):
    // the first refusal of each source (any, for a receive from any source) is asked.
    std::set<int> asked;
    for (auto it = s.refusals.begin(); it != s.refusals.end() && !r->done;) {
      if ((peer >= 0 && it->source != peer) || !asked.insert(it->source).second) {
        ++it;
        continue;
      }
      if (targetOf(s, *it, r) == r) {
        failWith(s, r, *it);
        s.refusals.erase(it);
      } else {
        ++it;
      }
    }
    if (!r->done) {
      if (auto a = takeKept(key); a) {
        a->owner = r;
        if (a->landed) settleFrom(s, *r, *a);
      } else {
        c.waiting.push_back(r);
        if (c.posted - c.arrived < c.waiting.size()) postHeader(key, c);
      }
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
    Posted posted{peer, tag, number, state_->gloo->send(headers, peer, headerTag(tag)), nullptr};
    if (!inlined) posted.payload = state_->gloo->send(payloads, peer, payloadTag(number));
    auto& unconfirmed = state_->unconfirmedTo[static_cast<std::size_t>(peer)];
    unconfirmed.emplace_back(number, tag);
    if (unconfirmed.size() > kUnconfirmedKept) unconfirmed.pop_front();
    return posted;
  }
  // Posts a refusal of `tag`, which has no channel, to `peer` on the refusal tag, with the
  // messages to `peer` not yet seen taken.
  Posted postRefusal(int peer, int tag, const std::string& reason) {
    checkPeer(peer);
    at::Tensor message = at::zeros({static_cast<std::int64_t>(kGlooRefusalBytes)}, at::kByte);
    std::vector<at::Tensor> messages{message};
    const std::string cut = reason.substr(0, kGlooRefusalBytes - kRefusalReasonAt);
    std::lock_guard<std::mutex> lock(state_->mutex);
    TORCH_CHECK(!state_->closing, "chimera send: the process group is being destroyed");
    const std::int64_t number = state_->sentTo[static_cast<std::size_t>(peer)]++;
    ++state_->refusalsTo[static_cast<std::size_t>(peer)];
    const auto& unconfirmed = state_->unconfirmedTo[static_cast<std::size_t>(peer)];
    const std::int64_t words[kRefusalWords] = {static_cast<std::int64_t>(Kind::Refusal),
                                               static_cast<std::int64_t>(cut.size()),
                                               number,
                                               tag,
                                               static_cast<std::int64_t>(unconfirmed.size()),
                                               0};
    auto* data = static_cast<char*>(message.data_ptr());
    std::memcpy(data, words, sizeof words);
    std::size_t at = sizeof words;
    for (const auto& [earlier, earlierTag] : unconfirmed) {
      const std::int64_t pair[2] = {earlier, earlierTag};
      std::memcpy(data + at, pair, sizeof pair);
      at += sizeof pair;
    }
    std::memcpy(data + kRefusalReasonAt, cut.data(), cut.size());
    return Posted{peer, tag, number, state_->gloo->send(messages, peer, kGlooRefusalTag), nullptr};
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
