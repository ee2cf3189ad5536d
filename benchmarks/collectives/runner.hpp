// SPDX-License-Identifier: Apache-2.0
// One runner per collective kind behind a common interface: how to run ours (the chimera
// backend), how to run the plain-MPI baseline with the same semantics on the same group,
// and what each element of this rank's result must be.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "chimera/backend.hpp"
#include "collective.hpp"
#include "input_pattern.hpp"
#include "mpi/mpi_util.hpp"
#include "mpi_baseline.hpp"

namespace chimera::bench {

/// The group this rank measures in and the handles to run on it. Outlives every runner.
struct GroupContext {
  /// Our backend (chimera's MPI backend).
  Backend* backend = nullptr;
  /// The mesh axes of the group.
  AxisSet axes;
  /// World ranks of this rank's group, by group index.
  std::vector<int> groupRanks;
  /// This rank's index in its group.
  int groupIndex = 0;
  /// The same group as an MPI communicator (rank = group index), for the baseline.
  MPI_Comm comm = MPI_COMM_NULL;
  /// Broadcast root, as a group index.
  int root = 0;

  /// Ranks in the group.
  int groupSize() const { return static_cast<int>(groupRanks.size()); }
};

/// Parameters of one row.
struct RowCase {
  /// Element type.
  DataType dtype = DataType::F32;
  /// Set for reducing collectives only.
  std::optional<ReduceOp> op;
  /// Buffer counts for the requested size.
  BufferShape shape;
};

/// Runs one collective kind. Every rank of every group calls the same methods in the same
/// order (they are collective). Send buffers hold shape.sendCount elements, receive buffers
/// shape.recvCount; they are separate, except that runOurs is also called in place, with
/// send and recv inside one buffer as in_place.hpp lays them out.
class CollectiveRunner {
 public:
  virtual ~CollectiveRunner() = default;

  /// Our backend's call.
  [[nodiscard]] virtual Status runOurs(const RowCase& row, const void* send, void* recv) = 0;
  /// The plain MPI call with the same semantics on GroupContext::comm; Unsupported when MPI
  /// cannot express the row (a count beyond int).
  [[nodiscard]] virtual Status runBaseline(const RowCase& row, const void* send, void* recv) = 0;
  /// What element `index` of this rank's result must be, given the group's inputs.
  virtual double expected(const InputPattern& inputs, const RowCase& row, std::size_t index) const = 0;
  /// Where the baseline leaves this rank's result: `recv`, except for the broadcast root,
  /// which MPI_Bcast reads from its send buffer and does not copy.
  virtual const void* baselineResult(const void* /*send*/, const void* recv) const { return recv; }
};

/// The runner for `collective` on `context` (kept by reference).
std::unique_ptr<CollectiveRunner> createRunner(Collective collective, const GroupContext& context);

/// Per-collective factories used by createRunner (one file each).
std::unique_ptr<CollectiveRunner> makeAllReduceRunner(const GroupContext& context);
std::unique_ptr<CollectiveRunner> makeReduceScatterRunner(const GroupContext& context);
std::unique_ptr<CollectiveRunner> makeAllGatherRunner(const GroupContext& context);
std::unique_ptr<CollectiveRunner> makeAllToAllRunner(const GroupContext& context);
std::unique_ptr<CollectiveRunner> makeBroadcastRunner(const GroupContext& context);
std::unique_ptr<CollectiveRunner> makeSendRecvRunner(const GroupContext& context);

/// The backend's MPI plumbing, for the baseline: mpiStatus (BackendError naming the call and
/// MPI's error string unless the code is MPI_SUCCESS) and mpiDataType (MPI's type for a DataType).
using detail::mpiDataType;
using detail::mpiStatus;

}  // namespace chimera::bench
