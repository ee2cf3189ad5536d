// SPDX-License-Identifier: Apache-2.0
// MpiPointToPoint (see mpi_point_to_point.hpp): the channel, its communicators, and the posting
// of sends, receives and refusals (the transfers themselves: mpi_transfer.cpp).
#include "mpi_point_to_point.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>
#include <utility>

#include "core/check.hpp"
#include "mpi/abandoned_memory.hpp"
#include "mpi_channel_state.hpp"

namespace chimera::torch_ext {

Status mpiError(int code, const char* what) {
  if (code == MPI_SUCCESS) return Status::ok();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Status::backendError(fmt::format("{} failed: {}", what, std::string(text, static_cast<std::size_t>(length))));
}

namespace {

std::shared_ptr<Buffer> controlMessage(Control kind, std::int64_t value, std::int64_t number, std::string_view reason) {
  auto message = std::make_shared<Buffer>(kControlHead + std::min(reason.size(), kControlBytes - kControlHead));
  const std::int64_t head[3] = {static_cast<std::int64_t>(kind), value, number};
  std::memcpy(message->data(), head, kControlHead);
  std::memcpy(message->data() + kControlHead, reason.data(), message->size() - kControlHead);
  return message;
}

// Duplicates `comm` into `out` (MPI_Comm_idup, errors returned), waiting at most `timeoutMs`.
Status duplicate(MPI_Comm comm, std::int64_t timeoutMs, MPI_Comm& out) {
  // Bounded like every wait: a member that never creates its channel is a Timeout, not a hang.
  // MPI writes the handle when the duplication completes, which a late member may make happen
  // after the Timeout: the handle's memory is then kept until the process exits.
  auto handle = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(mpiError(MPI_Comm_idup(comm, handle.get(), &request), "MPI_Comm_idup"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    int done = 0;
    CHIMERA_RETURN_IF_ERROR(mpiError(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Comm_idup"));
    if (done != 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      detail::keepUntilExit(handle);
      return Status::timeout(fmt::format(
          "creating the point-to-point channel (MPI_Comm_idup) made no progress for {} ms: a member of the group "
          "did not create it",
          timeoutMs));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  out = *handle;
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  return Status::ok();
}

}  // namespace

Status MpiPointToPoint::create(const void* comm, std::int64_t timeoutMs, std::unique_ptr<MpiPointToPoint>& out) {
  CHIMERA_CHECK_ARG(comm != nullptr && timeoutMs > 0, "point-to-point channel: null communicator or timeout {} ms",
                    timeoutMs);
  auto impl = std::make_shared<Impl>();
  const MPI_Comm group = *static_cast<const MPI_Comm*>(comm);
  CHIMERA_RETURN_IF_ERROR(duplicate(group, timeoutMs, impl->control));
  if (Status s = duplicate(group, timeoutMs, impl->data); !s.isOk()) {
    MPI_Comm_free(&impl->control);
    return s;
  }
  MPI_Comm_rank(impl->data, &impl->rank);
  MPI_Comm_size(impl->data, &impl->size);
  impl->sentTo.assign(static_cast<std::size_t>(impl->size), 0);
  void* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
  if (found != 0 && value != nullptr) impl->tagUpperBound = *static_cast<int*>(value);
  impl->timeoutMs = timeoutMs;
  out = std::make_unique<MpiPointToPoint>(std::move(impl));
  return Status::ok();
}

MpiPointToPoint::MpiPointToPoint(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

MpiPointToPoint::~MpiPointToPoint() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  // A refusal still on its way is left to MPI, its message kept.
  for (auto& [request, message] : impl_->refusals) {
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    if (message) detail::keepUntilExit(message);
  }
  impl_->refusals.clear();
  for (MPI_Comm* comm : {&impl_->control, &impl_->data}) {
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
  }
}

int MpiPointToPoint::userTagLimit() const { return impl_->barrierTag(); }
int MpiPointToPoint::barrierTag() const { return impl_->barrierTag(); }
int MpiPointToPoint::rank() const { return impl_->rank; }
int MpiPointToPoint::size() const { return impl_->size; }
std::int64_t MpiPointToPoint::timeoutMs() const { return impl_->timeoutMs; }

namespace {

std::unique_ptr<Transfer> newTransfer(const std::shared_ptr<MpiPointToPoint::Impl>& channel, bool isSend, void* buffer,
                                      std::size_t bytes, int peer, int tag) {
  const char* what = isSend ? "send" : "recv";
  auto t = std::make_unique<Transfer>();
  t->channel = channel;
  t->rank = channel->rank;
  t->isSend = isSend;
  t->buffer = buffer;
  t->peer = peer;
  t->tag = tag;
  t->bytes = bytes;
  t->timeoutMs = channel->timeoutMs;
  if (!((peer >= 0 || (!isSend && peer == -1)) && peer < channel->size)) {
    t->verdict = Status::invalidArgument(
        fmt::format("{}: peer {} is not a rank of this group of {}", what, peer, channel->size));
  } else if (!channel->sendable(tag)) {
    t->verdict = Status::invalidArgument(fmt::format("{}: tag {} outside [0, {}]", what, tag, channel->barrierTag()));
  } else if (bytes > static_cast<std::size_t>(INT_MAX)) {
    t->verdict = Status::invalidArgument(fmt::format("{}: {} bytes exceed one MPI message", what, bytes));
  }
  return t;
}

}  // namespace

Status MpiPointToPoint::send(const void* buffer, std::size_t bytes, int peer, int tag,
                             std::unique_ptr<MpiTransfer>& out) {
  std::unique_ptr<Transfer> t = newTransfer(impl_, true, const_cast<void*>(buffer), bytes, peer, tag);
  CHIMERA_RETURN_IF_ERROR(t->verdict);
  Impl& ch = *impl_;
  std::lock_guard<std::mutex> lock(ch.mutex);
  t->message = controlMessage(Control::Data, static_cast<std::int64_t>(bytes), ch.sentTo[peer]++, {});
  CHIMERA_RETURN_IF_ERROR(mpiError(
      MPI_Isend(t->message->data(), static_cast<int>(t->message->size()), MPI_BYTE, peer, tag, ch.control, &t->control),
      "MPI_Isend (control)"));
  if (Status s =
          mpiError(MPI_Isend(buffer, static_cast<int>(bytes), MPI_BYTE, peer, tag, ch.data, &t->data), "MPI_Isend");
      !s.isOk()) {
    if (ch.broken.empty())
      ch.broken = fmt::format("a send to rank {} (tag {}) posted its control message but not its payload ({})", peer,
                              tag, s.toString());
    return s;
  }
  out = std::make_unique<MpiTransfer>(std::move(t));
  return Status::ok();
}

Status MpiPointToPoint::recv(void* buffer, std::size_t bytes, int peer, int tag, std::unique_ptr<MpiTransfer>& out) {
  std::unique_ptr<Transfer> t = newTransfer(impl_, false, buffer, bytes, peer, tag);
  CHIMERA_RETURN_IF_ERROR(t->verdict);
  Impl& ch = *impl_;
  t->message = std::make_shared<Buffer>(kControlBytes);
  std::lock_guard<std::mutex> lock(ch.mutex);
  // A kept message of its source and tag is this receive's when no earlier receive of the tag
  // waits (that one would take it first).
  const auto kept = std::find_if(ch.kept.begin(), ch.kept.end(),
                                 [&](const KeptMessage& k) { return k.tag == tag && (peer < 0 || k.source == peer); });
  const bool earlier =
      std::any_of(ch.pending.begin(), ch.pending.end(), [&](const Transfer* p) { return p->tag == tag; });
  if (kept != ch.kept.end() && !earlier) {
    t->controlIn = t->dataIn = t->done = true;
    deliver(*t, *kept);
    ch.kept.erase(kept);
    out = std::make_unique<MpiTransfer>(std::move(t));
    return Status::ok();
  }
  CHIMERA_RETURN_IF_ERROR(mpiError(MPI_Irecv(t->message->data(), static_cast<int>(kControlBytes), MPI_BYTE,
                                             peer < 0 ? MPI_ANY_SOURCE : peer, tag, ch.control, &t->control),
                                   "MPI_Irecv (control)"));
  const bool behind =
      std::any_of(ch.unposted.begin(), ch.unposted.end(), [&](const Transfer* u) { return u->tag == tag; });
  if (peer < 0 || behind) {
    ch.unposted.push_back(t.get());
  } else {
    postPayload(*t, peer);
  }
  ch.pending.push_back(t.get());
  out = std::make_unique<MpiTransfer>(std::move(t));
  return Status::ok();
}

void MpiPointToPoint::refuse(int peer, int tag, std::string_view reason) {
  Impl& ch = *impl_;
  if (peer < 0 || peer >= ch.size || peer == ch.rank) return;
  std::lock_guard<std::mutex> lock(ch.mutex);
  // Refusals already out are forgotten.
  std::erase_if(ch.refusals, [](auto& refusal) {
    int done = 0;
    return MPI_Test(&refusal.first, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done != 0;
  });
  const bool tagged = ch.sendable(tag);
  auto message = controlMessage(Control::Refusal, tag, ch.sentTo[peer]++, reason);
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Isend(message->data(), static_cast<int>(message->size()), MPI_BYTE, peer, tagged ? tag : ch.outOfRangeTag(),
                ch.control, &request) != MPI_SUCCESS)
    return;  // the receiver then waits for its timeout, as without a refusal
  ch.refusals.emplace_back(request, message);
  // The empty payload that keeps the refusal's tag paired (its receiver takes one per message).
  if (tagged && MPI_Isend(nullptr, 0, MPI_BYTE, peer, tag, ch.data, &request) == MPI_SUCCESS)
    ch.refusals.emplace_back(request, nullptr);
}

}  // namespace chimera::torch_ext
