// SPDX-License-Identifier: Apache-2.0
// Process-wide state of one chimera-bench run: the MPI world, the mesh, our backend, this
// rank's group (as mesh axes for ours and as an MPI communicator for the baseline), and the
// cross-rank agreement every fallible step goes through so that no rank is left hanging.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "chimera/backend.hpp"
#include "chimera/mesh.hpp"
#include "mpi_baseline.hpp"
#include "options.hpp"
#include "runner.hpp"

namespace chimera::bench {

/// Everything a run needs. Create with `create`; destroy before MPI_Finalize.
class BenchContext {
 public:
  BenchContext() = default;
  BenchContext(const BenchContext&) = delete;
  BenchContext& operator=(const BenchContext&) = delete;
  ~BenchContext();

  /// Builds the mesh (--mesh, or flat over the world), the group (--axis, or every axis),
  /// checks -r against the group size, creates the MPI backend and splits the baseline
  /// communicator. Collective over MPI_COMM_WORLD; the returned Status is the same on every rank.
  [[nodiscard]] static Status create(const Options& options, std::unique_ptr<BenchContext>& out);

  /// This process's rank in MPI_COMM_WORLD.
  int worldRank() const { return worldRank_; }
  /// Size of MPI_COMM_WORLD.
  int worldSize() const { return worldSize_; }
  /// The mesh the backend serves.
  const Mesh& mesh() const { return mesh_; }
  /// "tp", "dp+tp", or the flat mesh's single axis.
  const std::string& axisName() const { return axisName_; }
  /// This rank's group and the handles to run on it.
  GroupContext& group() { return group_; }

 private:
  int worldRank_ = 0;
  int worldSize_ = 0;
  Mesh mesh_;
  std::string axisName_;
  std::unique_ptr<Backend> backend_;
  GroupContext group_;
};

/// Makes a Status agree across MPI_COMM_WORLD (collective): Ok when every rank passed Ok;
/// otherwise every rank gets the code and message of the lowest-numbered failing rank, with
/// "rank N: " in front when it came from another rank.
[[nodiscard]] Status agreeOnStatus(const Status& local);

}  // namespace chimera::bench
