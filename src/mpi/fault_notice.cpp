// SPDX-License-Identifier: Apache-2.0
// Implements the MPI backend's fault notices: one small message to every other rank per
// failure (and one when its call is done), one per stand-in asked for, and one posted receive
// per backend, taken in by the bounded waits.
#include "mpi/fault_notice.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <thread>

#include "mpi/abandoned_memory.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_group.hpp"
#include "mpi/word_agreement.hpp"

namespace chimera::detail {
namespace {

constexpr int kNoticeTag = 0x4E4F;  // 'NO'
// A notice: its kind, serial and four fields (int32; a stand-in's request: the group's key as
// two halves, the round's tag and words), then its text, NUL-terminated (cut to fit).
constexpr std::size_t kFields = 4;
constexpr std::size_t kHeaderBytes = (2 + kFields) * sizeof(std::int32_t);
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
    std::int32_t header[2 + kFields] = {};
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
      } else if (header[0] == static_cast<std::int32_t>(Kind::Done) ||
                 header[0] == static_cast<std::int32_t>(Kind::Declined)) {
        from.done = std::max(from.done, static_cast<int>(header[1]));
        if (header[0] == static_cast<std::int32_t>(Kind::Declined))
          from.declined = std::max(from.declined, static_cast<int>(header[1]));
        from.doneAt = Clock::now();
      } else if (header[0] == static_cast<std::int32_t>(Kind::StandIn) && header[1] == announced_ &&
                 !askedFor(status.MPI_SOURCE, -1)) {
        const std::int64_t key = static_cast<std::int64_t>(static_cast<std::uint32_t>(header[2])) |
                                 (static_cast<std::int64_t>(header[3]) << 32);
        asks_.push_back({status.MPI_SOURCE, key, {header[4], header[5]}});
      }
    }
    post();
    recount();
  }
}

void FaultNotices::recount() {
  holding_ = 0;
  for (const Heard& from : heard_) holding_ += unexplained(from) || from.gaveUp ? 1 : 0;
}

void FaultNotices::settleAfterGrace(int world, Clock::time_point now) {
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
    if (member >= 0 && member < group.size) settleAfterGrace(group.members[static_cast<std::size_t>(member)], now);
    return;
  }
  for (const int world : group.members) settleAfterGrace(world, now);
}

void FaultNotices::tell(int to, Kind kind, int serial, std::span<const std::int32_t> fields, const std::string& text) {
  // MPI reads the message after the call returns: it lives until the process exits (one per
  // notice, 512 bytes), and the send is freed, never waited on.
  auto message = std::make_shared<std::vector<char>>(kNoticeBytes, '\0');
  std::int32_t header[2 + kFields] = {static_cast<std::int32_t>(kind), serial};
  std::copy_n(fields.begin(), std::min(fields.size(), kFields), header + 2);
  std::memcpy(message->data(), header, kHeaderBytes);
  std::memcpy(message->data() + kHeaderBytes, text.data(), std::min(text.size(), kNoticeBytes - kHeaderBytes - 1));
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Isend(message->data(), static_cast<int>(kNoticeBytes), MPI_BYTE, to, kNoticeTag, comm_, &request) ==
      MPI_SUCCESS)
    MPI_Request_free(&request);
  keepUntilExit(std::move(message));
}

void FaultNotices::tellAll(Kind kind, int serial, const std::string& text) {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) tell(r, kind, serial, {}, text);
  }
}

void FaultNotices::announce(const Status& error) {
  if (!announcing_) return;
  ++announced_;
  asks_.clear();  // asks for an earlier failure came after its call was done
  recount();
  tellAll(Kind::Fault, announced_, error.toString());
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(kAnnounceWindowMs);
  const auto everyRankAnswered = [&] {
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && heard_[static_cast<std::size_t>(r)].faults < announced_ && !askedFor(r, -1)) return false;
    }
    return true;
  };
  std::vector<std::int64_t> served;
  bool answered = false;
  while (!answered && Clock::now() < deadline) {
    std::this_thread::yield();
    takeIn();
    answered = everyRankAnswered();
    serveAsks(served);
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const auto ask = std::find_if(asks_.begin(), asks_.end(), [&](const Ask& a) { return a.from == r; });
    const bool declined = ask != asks_.end() && groups_ && groups_(ask->key) != nullptr &&
                          std::find(served.begin(), served.end(), ask->key) == served.end();
    tell(r, declined ? Kind::Declined : Kind::Done, announced_, {}, {});
  }
  asks_.clear();
}

bool FaultNotices::askedFor(int world, std::int64_t key) const {
  return std::any_of(asks_.begin(), asks_.end(),
                     [&](const Ask& a) { return a.from == world && (key == -1 || a.key == key); });
}

void FaultNotices::serveAsks(std::vector<std::int64_t>& served) {
  for (std::size_t i = 0; i < asks_.size(); ++i) {
    const Ask ask = asks_[i];  // a stand-in's waits may take in more asks
    if (std::find(served.begin(), served.end(), ask.key) != served.end()) continue;
    const MpiGroup* found = groups_ ? groups_(ask.key) : nullptr;
    if (found == nullptr || ask.round.words < 1 || ask.round.words > kStandInWordsLimit) continue;
    const bool everyMemberAsked = std::all_of(found->members.begin(), found->members.end(), [&](int world) {
      return world == rank_ || askedFor(world, ask.key) || heard_[static_cast<std::size_t>(world)].faults >= announced_;
    });
    if (!everyMemberAsked) continue;
    served.push_back(ask.key);
    MpiGroup group = *found;
    group.timeoutMs = std::min(group.timeoutMs, kStandInLimitMs);
    const Status status = standIn(group, ask.round, rank_);
    if (!status.isOk() && !gaveUp_) {
      // Its messages may still be matched by a later round of the group's: out of step.
      gaveUp_ = true;
      tellAll(Kind::GaveUp, 0, fmt::format("rank {}: {}", rank_, status.toString()));
    }
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
                                            std::chrono::steady_clock::time_point lastProgress, std::string_view what,
                                            const StandInOffer* offer, NoticeWait& wait) {
  takeIn();
  if (holding_ == 0 && wait.asked.empty()) return std::nullopt;
  const Clock::time_point now = Clock::now();
  const auto grace = std::chrono::milliseconds(kNoticeGraceMs);
  const auto idle = now - lastProgress;
  const auto giveUpAfterIdle = [&](int world, const std::string& reason) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(idle).count();
    return giveUp(group, world, reason, what, fmt::format("after {} ms without progress", ms));
  };
  for (const int peer : waitingOn) {
    for (int m = 0; m < group.size; ++m) {
      if (m == group.index || (peer != kWholeGroup && peer != m)) continue;
      const int world = group.members[static_cast<std::size_t>(m)];
      if (world < 0 || world >= size_ || world == rank_) continue;
      const Heard& from = heard_[static_cast<std::size_t>(world)];
      if (from.gaveUp) {
        if (idle >= grace) return giveUpAfterIdle(world, reasonFor(world));
        continue;
      }
      const auto asked = std::find_if(wait.asked.begin(), wait.asked.end(),
                                      [&](const std::pair<int, int>& a) { return a.first == world; });
      if (asked != wait.asked.end()) {
        if (from.declined >= asked->second) {
          // The round is a later call's, which that member takes part in once its failed call returns.
          settle(world);
          wait.asked.erase(asked);
          continue;
        }
        // Its stand-in's words may still be on their way (MPI does not order them with Done).
        const bool finished = from.done >= asked->second && now - from.doneAt >= grace;
        if (idle >= grace && (finished || now - wait.askedAt >= std::chrono::milliseconds(kStandInLimitMs)))
          return giveUpAfterIdle(
              world, fmt::format("rank {} failed a call before it knew the call's group and did not stand in for "
                                 "this one ({})",
                                 world, from.fault));
        continue;
      }
      if (!unexplained(from)) continue;
      if (offer != nullptr && group.standInKey >= 0) {
        if (idle >= grace || from.at <= wait.started) {
          const auto key = static_cast<std::uint64_t>(group.standInKey);
          const std::array<std::int32_t, 4> fields = {static_cast<std::int32_t>(key & 0xffffffffu),
                                                      static_cast<std::int32_t>(key >> 32), offer->tag, offer->words};
          tell(world, Kind::StandIn, from.faults, fields, {});
          wait.asked.emplace_back(world, from.faults);
          wait.askedAt = now;
        }
        continue;
      }
      if (idle >= grace) return giveUpAfterIdle(world, reasonFor(world));
    }
  }
  return std::nullopt;
}

void FaultNotices::settle(int world) {
  if (world < 0 || world >= size_) return;
  Heard& from = heard_[static_cast<std::size_t>(world)];
  from.settled = from.faults;
  recount();
}

std::string FaultNotices::faultOf(int world) {
  takeIn();
  if (world < 0 || world >= size_) return {};
  return heard_[static_cast<std::size_t>(world)].fault;
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
