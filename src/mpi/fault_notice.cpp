// SPDX-License-Identifier: Apache-2.0
// Implements the MPI backend's fault notices: one small message to every other rank per
// failure, and one posted receive per backend, taken in by the bounded waits.
#include "mpi/fault_notice.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "mpi/abandoned_memory.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_group.hpp"

namespace chimera::detail {
namespace {

constexpr int kNoticeTag = 0x4E4F;  // 'NO'
// A notice: its kind and serial (two int32), then its text, NUL-terminated (cut to fit).
constexpr std::size_t kHeaderBytes = 2 * sizeof(std::int32_t);
constexpr std::size_t kNoticeBytes = 512;
// How long the destructor lets a cancelled receive complete before leaving it to process exit.
constexpr std::chrono::milliseconds kCancelWindow{100};

}  // namespace

FaultNotices::FaultNotices(MPI_Comm comm, int rank, int size, bool announcing)
    : comm_(comm),
      rank_(rank),
      size_(size),
      announcing_(announcing),
      heard_(static_cast<std::size_t>(size)),
      inbox_(std::make_shared<std::vector<char>>(kNoticeBytes)) {
  post();
}

FaultNotices::~FaultNotices() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;
  bool pending = false;
  if (receive_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&receive_);
    const auto deadline = std::chrono::steady_clock::now() + kCancelWindow;
    int done = 0;
    while (MPI_Test(&receive_, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    pending = done == 0;
  }
  if (pending || abandoned_) {
    keepUntilExit(inbox_);
    return;
  }
  MPI_Comm_free(&comm_);
}

void FaultNotices::post() {
  if (MPI_Irecv(inbox_->data(), static_cast<int>(kNoticeBytes), MPI_BYTE, MPI_ANY_SOURCE, kNoticeTag, comm_,
                &receive_) != MPI_SUCCESS)
    receive_ = MPI_REQUEST_NULL;  // no notices then: waits run to their timeout, as without them
}

void FaultNotices::takeIn() {
  while (receive_ != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_Status status;
    if (MPI_Test(&receive_, &done, &status) != MPI_SUCCESS || done == 0) return;
    std::int32_t header[2] = {0, 0};
    std::memcpy(header, inbox_->data(), kHeaderBytes);
    const std::string text(inbox_->data() + kHeaderBytes,
                           strnlen(inbox_->data() + kHeaderBytes, kNoticeBytes - kHeaderBytes));
    if (status.MPI_SOURCE >= 0 && status.MPI_SOURCE < size_) {
      Heard& from = heard_[static_cast<std::size_t>(status.MPI_SOURCE)];
      if (header[0] == static_cast<std::int32_t>(Kind::Fault)) {
        from.faults = std::max(from.faults, static_cast<int>(header[1]));
        from.at = Clock::now();
        from.fault = text;
      } else if (header[0] == static_cast<std::int32_t>(Kind::GaveUp)) {
        from.gaveUp = true;
        from.why = text;
      }
    }
    post();
    recount();
  }
}

void FaultNotices::recount() {
  holding_ = 0;
  for (const Heard& from : heard_) holding_ += unexplained(from) ? 1 : 0;
}

void FaultNotices::settle(int world, Clock::time_point now) {
  if (world < 0 || world >= size_) return;
  Heard& from = heard_[static_cast<std::size_t>(world)];
  if (unexplained(from) && now - from.at >= std::chrono::milliseconds(kNoticeGraceMs)) {
    from.settled = from.faults;
    recount();
  }
}

void FaultNotices::progressFrom(const MpiGroup& group, int member) {
  const Clock::time_point now = Clock::now();
  if (member != kWholeGroup) {
    if (member >= 0 && member < group.size) settle(group.members[static_cast<std::size_t>(member)], now);
    return;
  }
  for (const int world : group.members) settle(world, now);
}

void FaultNotices::tellAll(Kind kind, int serial, const std::string& text) {
  // MPI reads the message after the call returns: it lives until the process exits (one per
  // failure, 512 bytes), and the sends are freed, never waited on.
  auto message = std::make_shared<std::vector<char>>(kNoticeBytes, '\0');
  const std::int32_t header[2] = {static_cast<std::int32_t>(kind), serial};
  std::memcpy(message->data(), header, kHeaderBytes);
  std::memcpy(message->data() + kHeaderBytes, text.data(), std::min(text.size(), kNoticeBytes - kHeaderBytes - 1));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(message->data(), static_cast<int>(kNoticeBytes), MPI_BYTE, r, kNoticeTag, comm_, &request) ==
        MPI_SUCCESS)
      MPI_Request_free(&request);
  }
  keepUntilExit(std::move(message));
}

void FaultNotices::announce(const Status& error) {
  if (!announcing_) return;
  ++announced_;
  recount();
  tellAll(Kind::Fault, announced_, error.toString());
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(kAnnounceWindowMs);
  const auto allFailedAlike = [&] {
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && heard_[static_cast<std::size_t>(r)].faults < announced_) return false;
    }
    return true;
  };
  while (Clock::now() < deadline && !allFailedAlike()) {
    std::this_thread::yield();
    takeIn();
  }
}

std::string FaultNotices::reasonFor(int world) const {
  if (world < 0 || world >= size_ || world == rank_) return {};
  const Heard& from = heard_[static_cast<std::size_t>(world)];
  if (from.gaveUp)
    return fmt::format("rank {} gave up on a call after a fault notice and is unusable ({})", world, from.why);
  if (unexplained(from))
    return fmt::format("rank {} failed a call before it knew the call's group, so it will not take part in it ({})",
                       world, from.fault);
  return {};
}

Status FaultNotices::giveUp(const MpiGroup& group, int world, const std::string& reason, std::string_view what,
                            std::string_view when) {
  Status status = Status::mismatch(
      fmt::format("{} on {} gives up {}: {}; the backend is unusable now, since the group's calls with rank {} are "
                  "out of step",
                  what, group.label, when, reason, world));
  if (!gaveUp_) {
    gaveUp_ = true;
    tellAll(Kind::GaveUp, 0, fmt::format("rank {}: {}", rank_, status.message()));
  }
  return status;
}

std::optional<Status> FaultNotices::verdict(const MpiGroup& group, std::span<const int> waitingOn,
                                            std::chrono::steady_clock::time_point lastProgress, std::string_view what) {
  takeIn();
  const auto idle = Clock::now() - lastProgress;
  if (idle < std::chrono::milliseconds(kNoticeGraceMs)) return std::nullopt;
  for (const int peer : waitingOn) {
    for (int m = 0; m < group.size; ++m) {
      if (m == group.index || (peer != kWholeGroup && peer != m)) continue;
      const int world = group.members[static_cast<std::size_t>(m)];
      const std::string reason = reasonFor(world);
      if (reason.empty()) continue;
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(idle).count();
      return giveUp(group, world, reason, what, fmt::format("after {} ms without progress", ms));
    }
  }
  return std::nullopt;
}

std::optional<Status> FaultNotices::gaveUpAmong(const MpiGroup& group, std::string_view what) {
  takeIn();
  for (int m = 0; m < group.size; ++m) {
    const int world = group.members[static_cast<std::size_t>(m)];
    if (m == group.index || world < 0 || world >= size_ || !heard_[static_cast<std::size_t>(world)].gaveUp) continue;
    return giveUp(group, world, reasonFor(world), what, "before a call that waits for every member without a bound");
  }
  return std::nullopt;
}

}  // namespace chimera::detail
