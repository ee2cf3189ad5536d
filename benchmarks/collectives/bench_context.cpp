// SPDX-License-Identifier: Apache-2.0
// Implements BenchContext: the MPI world, mesh, backend and groups of one chimera-bench run.
#include "bench_context.hpp"

#include <fmt/format.h>

#include <string>

#include "chimera/mpi_backend.hpp"
#include "common/log.hpp"
#include "core/check.hpp"
#include "timing.hpp"

namespace chimera::bench {
namespace {

/// Mesh, axes and root: a pure function of the options and the world size.
Status resolveGroup(const Options& options, int worldSize, Mesh& mesh, AxisSet& axes) {
  if (options.mesh.empty()) {
    mesh = Mesh::flat(worldSize);
  } else {
    const Status status = Mesh::parse(options.mesh, worldSize, mesh);
    if (!status.isOk()) return Status(status.code(), "--mesh: " + status.message());
  }
  if (options.axis.empty()) {
    axes = mesh.allAxes();
  } else {
    const Status status = mesh.parseAxes(options.axis, axes);
    if (!status.isOk()) return Status(status.code(), "--axis: " + status.message());
  }
  const int groupSize = mesh.groupSize(axes);
  CHIMERA_CHECK_ARG(options.collective != Collective::Broadcast || options.root < groupSize,
                    "-r/--root {} is not a group index (groups along '{}' have {} ranks)", options.root,
                    mesh.axesName(axes), groupSize);
  return Status::ok();
}

}  // namespace

BenchContext::~BenchContext() {
  if (group_.comm != MPI_COMM_NULL) MPI_Comm_free(&group_.comm);
}

Status BenchContext::create(const Options& options, std::unique_ptr<BenchContext>& out) {
  auto context = std::make_unique<BenchContext>();
  MPI_Comm_rank(MPI_COMM_WORLD, &context->worldRank_);
  MPI_Comm_size(MPI_COMM_WORLD, &context->worldSize_);
  detail::setLogRank(context->worldRank_);
  const int rank = context->worldRank_;

  AxisSet axes;
  CHIMERA_RETURN_IF_ERROR(resolveGroup(options, context->worldSize_, context->mesh_, axes));
  context->axisName_ = context->mesh_.axesName(axes);
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(createMpiBackend(context->mesh_, context->backend_)));

  GroupContext& group = context->group_;
  group.backend = context->backend_.get();
  group.axes = axes;
  group.groupRanks = context->mesh_.groupRanks(rank, axes);
  group.groupIndex = context->mesh_.groupIndex(rank, axes);
  group.root = options.root;
  const int code = MPI_Comm_split(MPI_COMM_WORLD, context->mesh_.groupColor(rank, axes), group.groupIndex, &group.comm);
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(mpiStatus(code, "MPI_Comm_split")));
  out = std::move(context);
  return Status::ok();
}

Status agreeOnStatus(const Status& local) {
  const Stretch stretch("chimera-bench: agreeing on a status over the world (MPI_Allreduce, MPI_Bcast)");
  int worldRank = 0;
  int worldSize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  int firstFailing = local.isOk() ? worldSize : worldRank;
  MPI_Allreduce(MPI_IN_PLACE, &firstFailing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (firstFailing == worldSize) return Status::ok();
  // The failing rank shares its code and message so every rank reports the same error.
  int header[2] = {static_cast<int>(local.code()), static_cast<int>(local.message().size())};
  MPI_Bcast(header, 2, MPI_INT, firstFailing, MPI_COMM_WORLD);
  std::string message = local.message();
  message.resize(static_cast<std::size_t>(header[1]));
  MPI_Bcast(message.data(), header[1], MPI_CHAR, firstFailing, MPI_COMM_WORLD);
  if (firstFailing == worldRank) return local;
  return Status(static_cast<StatusCode>(header[0]), fmt::format("rank {}: {}", firstFailing, message));
}

}  // namespace chimera::bench
