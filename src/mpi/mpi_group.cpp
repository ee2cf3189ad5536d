// SPDX-License-Identifier: Apache-2.0
// Implements the MPI backend's communicators, one per mesh axis group.
#include "mpi/mpi_group.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <string>

#include "common/hash.hpp"
#include "common/log.hpp"
#include "core/check.hpp"
#include "job/stall_watchdog.hpp"
#include "mpi/fault_notice.hpp"
#include "mpi/mpi_util.hpp"
#include "mpi/word_agreement.hpp"

namespace chimera::detail {
namespace {

constexpr int kAxesAgreementTag = 0x4158;       // 'AX'
constexpr int kNewGroupsAgreementTag = 0x4E47;  // 'NG'

}  // namespace

MpiGroup worldGroup(MPI_Comm comm, int rank, int size, std::int64_t timeoutMs, std::string label,
                    FaultNotices* notices) {
  MpiGroup group;
  group.notices = notices;
  group.comm = comm;
  group.size = size;
  group.index = rank;
  group.members.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) group.members[static_cast<std::size_t>(r)] = r;
  group.timeoutMs = timeoutMs;
  group.label = std::move(label);
  return group;
}

MpiGroupCache::MpiGroupCache(MPI_Comm world, Mesh mesh, int rank, std::int64_t timeoutMs, FaultNotices& notices)
    : world_(world),
      mesh_(std::move(mesh)),
      rank_(rank),
      timeoutMs_(timeoutMs),
      notices_(&notices),
      worldGroup_(worldGroup(world, rank, mesh_.size(), timeoutMs, "the world", &notices)) {
  worldGroup_.standInKey = 0;
  notices_->serve([this](std::int64_t key) -> const MpiGroup* {
    if (key <= 0) return key == 0 ? &worldGroup_ : nullptr;
    const auto it = groups_.find(static_cast<std::uint32_t>(key));
    return it == groups_.end() ? nullptr : &it->second;
  });
}

MpiGroupCache::~MpiGroupCache() {
  notices_->serve(nullptr);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0 || abandoned_) return;
  for (auto& [bits, group] : groups_) MPI_Comm_free(&group.comm);
}

Status MpiGroupCache::get(AxisSet axes, const MpiGroup*& out) {
  Status named;
  if (axes.empty()) {
    named = Status::invalidArgument(fmt::format("empty axis set (mesh {})", mesh_.toString()));
  } else if ((axes.bits() & ~mesh_.allAxes().bits()) != 0) {
    named = Status::invalidArgument(
        fmt::format("axis set 0x{:x} names axes mesh {} does not have", axes.bits(), mesh_.toString()));
  }
  if (!named.isOk()) {
    notices_->announce(named);
    return named;
  }
  if (auto it = groups_.find(axes.bits()); it != groups_.end()) {
    out = &it->second;
    return Status::ok();
  }
  CHIMERA_RETURN_IF_ERROR(agreeOnAxes(axes));
  MpiGroup group;
  group.size = mesh_.groupSize(axes);
  group.index = mesh_.groupIndex(rank_, axes);
  group.timeoutMs = timeoutMs_;
  group.notices = notices_;
  group.standInKey = axes.bits();
  const int color = mesh_.groupColor(rank_, axes);
  group.members.resize(static_cast<std::size_t>(group.size));
  for (int r = 0; r < mesh_.size(); ++r) {
    if (mesh_.groupColor(r, axes) == color) group.members[static_cast<std::size_t>(mesh_.groupIndex(r, axes))] = r;
  }
  std::string ranks;
  for (const int r : group.members) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  group.label = fmt::format("axes {} (world ranks {})", mesh_.axesName(axes), ranks);
  // MPI has no bounded split: after the agreement every rank is here, and one that stalls or dies
  // before its split would hang the others, so the split runs under a watchdog that ends the job.
  const std::string splitting =
      fmt::format("MPI_Comm_split for axes {} (every rank agreed to create it)", mesh_.axesName(axes));
  if (std::optional<Status> gaveUp = notices_->gaveUpAmong(worldGroup_, splitting)) return *gaveUp;
  CHIMERA_RETURN_IF_ERROR(
      mpiStatus(watchedBlockingCall(rank_, std::chrono::milliseconds(timeoutMs_), splitting,
                                    [&] { return MPI_Comm_split(world_, color, group.index, &group.comm); }),
                splitting));
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Comm_set_errhandler(group.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  int commSize = 0;
  int commRank = 0;
  MPI_Comm_size(group.comm, &commSize);
  MPI_Comm_rank(group.comm, &commRank);
  CHIMERA_ASSERT_EQ(commSize, group.size);
  CHIMERA_ASSERT_EQ(commRank, group.index);
  CHIMERA_LOG_DEBUG("mpi", "created communicator for axes {} (size {}, index {})", mesh_.axesName(axes), group.size,
                    group.index);
  out = &groups_.emplace(axes.bits(), group).first->second;
  return Status::ok();
}

Status MpiGroupCache::createAll(std::span<const AxisSet> groups) {
  std::vector<AxisSet> missing;
  for (AxisSet axes : groups) {
    if (axes.empty() || (axes.bits() & ~mesh_.allAxes().bits()) != 0) {
      // Peers whose groups all exist send nothing here and wait in their next call instead: the
      // rank cannot tell where, so the failure is announced to every rank (fault_notice.hpp).
      const Status named = Status::invalidArgument(
          fmt::format("createGroups: axis set 0x{:x} is not a group of mesh {}", axes.bits(), mesh_.toString()));
      notices_->announce(named);
      return named;
    }
    if (!contains(axes) && std::find(missing.begin(), missing.end(), axes) == missing.end()) missing.push_back(axes);
  }
  if (missing.empty()) return Status::ok();
  CHIMERA_RETURN_IF_ERROR(agreeOnNewGroups(missing));
  for (AxisSet axes : missing) {
    const MpiGroup* group = nullptr;
    CHIMERA_RETURN_IF_ERROR(get(axes, group));
  }
  return Status::ok();
}

Status MpiGroupCache::agreeOnNewGroups(std::span<const AxisSet> missing) {
  Hasher hasher;
  std::string names;
  for (AxisSet axes : missing) {
    hasher.add(axes.bits());
    names += (names.empty() ? "" : ", ") + mesh_.axesName(axes);
  }
  const std::string mesh = mesh_.toString();
  return detail::agreeOnNewGroups(
      {hasher.agreementValue(), names, "communicators", mesh}, Status::ok(), rank_,
      groupMin(worldGroup_, kNewGroupsAgreementTag,
               fmt::format("creating the communicators of axes [{}] (every rank must create the same groups together)",
                           names)));
}

Status MpiGroupCache::agreeOnAxes(AxisSet axes) {
  const std::array<std::int64_t, 1> bits = {static_cast<std::int64_t>(axes.bits())};
  WordRange range;
  CHIMERA_RETURN_IF_ERROR(agreeOnRange(bits,
                                       groupMin(worldGroup_, kAxesAgreementTag,
                                                fmt::format("creating the communicator of axes {} (every rank must "
                                                            "ask for the same new group at the same time)",
                                                            mesh_.axesName(axes))),
                                       range));
  const std::int64_t low = range.low[0];
  const std::int64_t high = range.high[0];
  if (low == high) return Status::ok();
  return Status::mismatch(fmt::format(
      "ranks disagree on the axes of a collective that creates a new group: this rank asked for axes {}, the ranks "
      "asked for axes from {} to {} (mesh {}); no communicator was created",
      mesh_.axesName(axes), mesh_.axesName(AxisSet::fromBits(static_cast<std::uint32_t>(low))),
      mesh_.axesName(AxisSet::fromBits(static_cast<std::uint32_t>(high))), mesh_.toString()));
}

}  // namespace chimera::detail
