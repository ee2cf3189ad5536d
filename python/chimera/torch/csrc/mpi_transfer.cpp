// SPDX-License-Identifier: Apache-2.0
// MpiTransfer (see mpi_point_to_point.hpp): a send's two messages, a receive's control message
// and payload, refusals, and the messages a refused receive keeps for the next.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/check.hpp"
#include "job/job_end.hpp"
#include "mpi/abandoned_memory.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi_channel_state.hpp"
#include "mpi_point_to_point.hpp"
#include "transfer_verdicts.hpp"

namespace chimera::torch_ext {
namespace {

// Cancels `request` and lets it settle for detail::kSettleWindowMs: a cancelled receive completes
// at once, one already matched when its data is in. Whether it settled; `matched` says whether
// it had matched a message (and so received it) rather than being cancelled.
bool cancelSettle(MPI_Request& request, bool& matched, MPI_Status* matchedStatus = nullptr) {
  matched = false;
  if (request == MPI_REQUEST_NULL) return true;
  MPI_Cancel(&request);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(detail::kSettleWindowMs);
  for (;;) {
    int done = 0;
    MPI_Status status;
    if (MPI_Test(&request, &done, &status) != MPI_SUCCESS) {  // completed, with an error: it had matched
      matched = true;
      return true;
    }
    if (done != 0) {
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      matched = cancelled == 0;
      if (matchedStatus != nullptr) *matchedStatus = status;
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// Mismatch naming the rank `source` whose send failed, with the reason in its refusal `message`
// (`count` bytes), as a receive of `tag` reports it.
Status refusalOf(int source, int tag, const Buffer& message, int count) {
  return refusedSend(
      source, tag,
      std::string_view(reinterpret_cast<const char*>(message.data() + kControlHead),
                       static_cast<std::size_t>(std::max(count, static_cast<int>(kControlHead))) - kControlHead));
}

// Takes `t`'s control message, of `count` bytes from group rank `source`.
void readControl(Transfer& t, int source, int count) {
  t.controlIn = true;
  t.controlBytes = count;
  t.source = source;
  const Buffer& m = *t.message;
  if (count < static_cast<int>(kControlHead)) {
    t.verdict = Status::backendError(
        fmt::format("recv: a control message of {} bytes from rank {} (tag {})", count, source, t.tag));
    return;
  }
  std::int64_t head[3] = {0, 0, 0};
  std::memcpy(head, m.data(), kControlHead);
  t.number = head[2];
  if (head[0] == static_cast<std::int64_t>(Control::Refusal)) {
    t.verdict = refusalOf(source, t.tag, m, count);
  } else if (head[1] != static_cast<std::int64_t>(t.bytes)) {
    t.verdict = otherByteCount(source, t.tag, head[1], static_cast<std::int64_t>(t.bytes));
  }
}

// Posts the payload receives that can be: those of receives from any source whose control
// message is in, and those behind them. Under the channel's lock.
Status progress(MpiPointToPoint::Impl& ch) {
  std::vector<int> waiting;  // tags of a receive from any source whose sender is not known yet
  for (auto it = ch.unposted.begin(); it != ch.unposted.end();) {
    Transfer& t = **it;
    if (std::find(waiting.begin(), waiting.end(), t.tag) != waiting.end()) {
      ++it;
      continue;
    }
    if (t.peer < 0 && !t.controlIn) {
      int done = 0;
      MPI_Status status;
      CHIMERA_RETURN_IF_ERROR(mpiError(MPI_Test(&t.control, &done, &status), "MPI_Irecv (control)"));
      if (done == 0) {
        waiting.push_back(t.tag);
        ++it;
        continue;
      }
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      readControl(t, status.MPI_SOURCE, count);
    }
    postPayload(t, t.peer < 0 ? t.source : t.peer);
    it = ch.unposted.erase(it);
  }
  return Status::ok();
}

void withdraw(MpiPointToPoint::Impl& ch, const Transfer& t) {
  ch.unposted.erase(std::remove(ch.unposted.begin(), ch.unposted.end(), &t), ch.unposted.end());
}

// Receives every refusal whose tag was out of range that has come from `source` (-1: any
// rank) into the channel's list, in the order they came.
Status takeRefusals(MpiPointToPoint::Impl& ch, int source) {
  for (;;) {
    int found = 0;
    MPI_Status probed;
    CHIMERA_RETURN_IF_ERROR(
        mpiError(MPI_Iprobe(source < 0 ? MPI_ANY_SOURCE : source, ch.outOfRangeTag(), ch.control, &found, &probed),
                 "MPI_Iprobe (refusals)"));
    if (found == 0) return Status::ok();
    int count = 0;
    MPI_Get_count(&probed, MPI_BYTE, &count);
    Buffer message(static_cast<std::size_t>(std::max(count, 0)));
    CHIMERA_RETURN_IF_ERROR(mpiError(
        MPI_Recv(message.data(), count, MPI_BYTE, probed.MPI_SOURCE, ch.outOfRangeTag(), ch.control, MPI_STATUS_IGNORE),
        "MPI_Recv (refusal)"));
    std::int64_t head[3] = {0, 0, 0};
    if (message.size() >= kControlHead) std::memcpy(head, message.data(), kControlHead);
    ch.refusalsIn.push_back(KeptRefusal{probed.MPI_SOURCE, head[2], std::move(message)});
  }
}

// Marks a receive done.
void settle(MpiPointToPoint::Impl& ch, Transfer& t) {
  t.done = true;
  ch.pending.erase(std::remove(ch.pending.begin(), ch.pending.end(), &t), ch.pending.end());
}

// A receive that completed while messages of its source and tag are kept takes the oldest of
// them and leaves its own in its place (kept messages were sent before it).
void takeKept(MpiPointToPoint::Impl& ch, Transfer& t) {
  const auto it = std::find_if(ch.kept.begin(), ch.kept.end(),
                               [&](const KeptMessage& k) { return k.source == t.source && k.tag == t.tag; });
  if (it == ch.kept.end()) return;
  const auto* payload = static_cast<const std::byte*>(t.buffer);
  KeptMessage own{t.source, t.tag, Buffer(t.message->begin(), t.message->begin() + std::max(t.controlBytes, 0)),
                  Buffer(payload, payload + t.received)};
  const KeptMessage oldest = std::move(*it);
  ch.kept.erase(it);
  ch.kept.push_back(std::move(own));
  deliver(t, oldest);
}

// A send completes when both of its messages are out.
Status testSend(Transfer& t) {
  for (MPI_Request* request : {&t.control, &t.data}) {
    if (*request == MPI_REQUEST_NULL) continue;
    int done = 0;
    CHIMERA_RETURN_IF_ERROR(mpiError(MPI_Test(request, &done, MPI_STATUS_IGNORE), "MPI_Isend"));
  }
  t.done = t.control == MPI_REQUEST_NULL && t.data == MPI_REQUEST_NULL;
  return Status::ok();
}

}  // namespace

// Posts `t`'s payload receive from `source`: into the caller's buffer, also when the control
// message told another count (a longer payload is truncated by MPI, and the receive fails).
void postPayload(Transfer& t, int source) {
  t.dataPosted = true;
  const Status posted = mpiError(
      MPI_Irecv(t.buffer, static_cast<int>(t.bytes), MPI_BYTE, source, t.tag, t.channel->data, &t.data), "MPI_Irecv");
  if (posted.isOk()) return;
  t.dataIn = true;
  if (t.verdict.isOk()) t.verdict = posted;
}

// Gives `t` the message `kept`: its control message's verdict and its payload (a payload cut
// short by the receive that kept it fails `t` unless `t` expected that much).
void deliver(Transfer& t, const KeptMessage& kept) {
  std::copy(kept.control.begin(), kept.control.end(), t.message->begin());
  t.verdict = Status::ok();
  readControl(t, kept.source, static_cast<int>(kept.control.size()));
  t.received = std::min(kept.payload.size(), t.bytes);
  if (t.received > 0) std::memcpy(t.buffer, kept.payload.data(), t.received);
  if (t.verdict.isOk() && t.received != t.bytes) {
    t.verdict = Status::backendError(
        fmt::format("recv from rank {} (tag {}): {} of the message's {} bytes were kept when an earlier receive failed",
                    kept.source, kept.tag, kept.payload.size(), t.bytes));
  }
}

MpiTransfer::MpiTransfer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MpiTransfer::~MpiTransfer() {
  if (impl_ == nullptr || impl_->done) return;
  if (!impl_->isSend) {
    std::lock_guard<std::mutex> lock(impl_->channel->mutex);
    cancelReceive("an unfinished receive was dropped");
    return;
  }
  (void)wait(impl_->timeoutMs);
}

void MpiTransfer::endWithBufferLent(const std::string& why) const {
  const std::string peer = impl_->peer < 0 ? std::string("any rank") : fmt::format("rank {}", impl_->peer);
  detail::endJob("torch", impl_->rank,
                 Status::timeout(fmt::format(
                     "{}: the receive of {} bytes (tag {}) from {} was already matched and did not finish within {} "
                     "ms of its cancellation, so MPI may still write into a tensor torch has back",
                     why, impl_->bytes, impl_->tag, peer, detail::kSettleWindowMs)),
                 std::chrono::milliseconds(impl_->timeoutMs));
}

void MpiTransfer::cancelReceive(const std::string& why) {
  Impl& t = *impl_;
  MpiPointToPoint::Impl& ch = *t.channel;
  withdraw(ch, t);
  bool controlTaken = t.controlIn;
  if (!t.controlIn && !cancelSettle(t.control, controlTaken)) {
    detail::keepUntilExit(t.message);  // chimera's own buffer: MPI may still write into it
    controlTaken = true;
  }
  bool dataTaken = t.dataIn;
  if (t.dataPosted && !t.dataIn && !cancelSettle(t.data, dataTaken)) endWithBufferLent(why);
  // A message is a control message and a payload: one taken without the other leaves the other
  // to the next receive of that tag.
  if (controlTaken != dataTaken && ch.broken.empty()) {
    ch.broken = fmt::format(
        "the point-to-point channel lost a message's {} when a receive from {} (tag {}) was cancelled ({}); later "
        "receives could take the wrong data",
        controlTaken ? "payload" : "control message",
        t.peer < 0 ? std::string("any rank") : fmt::format("rank {}", t.peer), t.tag, why);
  }
  t.control = MPI_REQUEST_NULL;
  t.data = MPI_REQUEST_NULL;
  settle(ch, t);
}

void MpiTransfer::keepOwnMessage() {
  Impl& t = *impl_;
  MpiPointToPoint::Impl& ch = *t.channel;
  withdraw(ch, t);
  if (!t.controlIn) {
    // The payload receive goes first: a sender's control message arrives before its payload,
    // so a payload taken meanwhile means its control message was taken too, and a control
    // message taken meanwhile only needs its payload received again.
    bool payloadTaken = false;
    MPI_Status status;
    if (t.dataPosted && !cancelSettle(t.data, payloadTaken, &status)) endWithBufferLent("its sender refused");
    if (payloadTaken) {
      int received = 0;
      MPI_Get_count(&status, MPI_BYTE, &received);
      t.received = static_cast<std::size_t>(std::max(received, 0));
      t.dataIn = true;
    }
    t.data = MPI_REQUEST_NULL;
    t.dataPosted = payloadTaken;
    bool matched = false;
    if (!cancelSettle(t.control, matched, &status) || (payloadTaken && !matched)) {
      cancelReceive("its sender refused");  // marks the channel broken: half a message was taken
      return;
    }
    if (!matched) {  // nothing from the sender yet
      settle(ch, t);
      return;
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    readControl(t, status.MPI_SOURCE, count);
  }
  // It had the sender's next message: its payload lands here, then is kept for the next receive.
  if (!t.dataPosted) postPayload(t, t.source);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(t.timeoutMs);
  while (!t.dataIn) {
    int in = 0;
    MPI_Status dataStatus;
    const int code = MPI_Test(&t.data, &in, &dataStatus);
    if (code == MPI_SUCCESS && in != 0) {
      int received = 0;
      MPI_Get_count(&dataStatus, MPI_BYTE, &received);
      t.received = static_cast<std::size_t>(std::max(received, 0));
    }
    if (code != MPI_SUCCESS || in != 0) {
      t.dataIn = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      cancelReceive("the payload of a kept message did not arrive");
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const auto* payload = static_cast<const std::byte*>(t.buffer);
  ch.kept.push_back(KeptMessage{t.source, t.tag,
                                Buffer(t.message->begin(), t.message->begin() + std::max(t.controlBytes, 0)),
                                Buffer(payload, payload + t.received)});
  settle(ch, t);
}

Status MpiTransfer::test(bool& done) {
  Impl& t = *impl_;
  MpiPointToPoint::Impl& ch = *t.channel;
  std::lock_guard<std::mutex> lock(ch.mutex);
  // Every test progresses the channel: a rank that waits for its send may hold a receive
  // whose payload its peer's send waits for.
  if (!t.done && t.isSend) {
    CHIMERA_RETURN_IF_ERROR(progress(ch));
    CHIMERA_RETURN_IF_ERROR(testSend(t));
  }
  if (!t.done && !t.isSend) {
    if (!ch.broken.empty()) return Status::backendError(ch.broken);
    // Whether this receive's message may still be a refusal's: it had no control message
    // before this test.
    const bool open = !t.controlIn;
    CHIMERA_RETURN_IF_ERROR(progress(ch));
    if (!t.controlIn && t.peer >= 0) {
      int in = 0;
      MPI_Status status;
      CHIMERA_RETURN_IF_ERROR(mpiError(MPI_Test(&t.control, &in, &status), "MPI_Irecv (control)"));
      int count = 0;
      if (in != 0) MPI_Get_count(&status, MPI_BYTE, &count);
      if (in != 0) readControl(t, t.peer, count);
    }
    // A refusal of a send whose tag was out of range fails the first receive from its sender
    // whose message came after it (by the sender's numbering) or has not come yet.
    if (open) {
      CHIMERA_RETURN_IF_ERROR(takeRefusals(ch, t.controlIn ? t.source : t.peer));
      const auto refusal = std::find_if(ch.refusalsIn.begin(), ch.refusalsIn.end(), [&](const KeptRefusal& r) {
        if (t.controlIn) return r.source == t.source && r.number < t.number;
        return t.peer < 0 || r.source == t.peer;
      });
      if (refusal != ch.refusalsIn.end()) {
        const KeptRefusal taken = std::move(*refusal);
        ch.refusalsIn.erase(refusal);
        keepOwnMessage();
        t.verdict = refusalOf(taken.source, t.tag, taken.message, static_cast<int>(taken.message.size()));
        t.source = taken.source;
        done = true;
        return t.verdict;
      }
    }
    if (t.controlIn && t.dataPosted && !t.dataIn) {
      int in = 0;
      MPI_Status status;
      const int code = MPI_Test(&t.data, &in, &status);
      // A payload longer than this receive expects is truncated: the verdict says why.
      if (code != MPI_SUCCESS && t.verdict.isOk()) t.verdict = mpiError(code, "MPI_Irecv");
      if (code == MPI_SUCCESS && in != 0) {
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        t.received = static_cast<std::size_t>(std::max(count, 0));
      }
      if (code != MPI_SUCCESS || in != 0) t.dataIn = true;
    }
    if (t.controlIn && t.dataIn) {
      if (!ch.kept.empty()) takeKept(ch, t);
      settle(ch, t);
    }
  }
  done = t.done;
  return t.done ? t.verdict : Status::ok();
}

Status MpiTransfer::wait(std::int64_t timeoutMs) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    bool done = false;
    CHIMERA_RETURN_IF_ERROR(test(done));
    if (done) return Status::ok();
    if (Clock::now() >= deadline) break;
    // Spin briefly, then back off to at most 1 ms: an oversubscribed host needs the core.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  Impl& t = *impl_;
  const std::string peer = t.peer < 0 ? std::string("any rank") : fmt::format("rank {}", t.peer);
  {
    std::lock_guard<std::mutex> lock(t.channel->mutex);
    if (!t.isSend) {
      cancelReceive(fmt::format("a receive timed out after {} ms", timeoutMs));
    } else {
      if (t.control != MPI_REQUEST_NULL) MPI_Request_free(&t.control);
      if (t.data != MPI_REQUEST_NULL) MPI_Request_free(&t.data);
      detail::keepUntilExit(t.message);
      t.done = true;
    }
  }
  t.verdict = Status::timeout(fmt::format("{} of {} bytes (tag {}) {} {} did not complete within {} ms",
                                          t.isSend ? "send" : "recv", t.bytes, t.tag, t.isSend ? "to" : "from", peer,
                                          timeoutMs));
  return t.verdict;
}

int MpiTransfer::source() const { return impl_->isSend || impl_->source < 0 ? impl_->peer : impl_->source; }

}  // namespace chimera::torch_ext
