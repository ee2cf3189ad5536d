// SPDX-License-Identifier: Apache-2.0
// What the plain-MPI baseline needs beyond the backend's MPI type and op mapping
// (mpi/mpi_util.hpp): its reduction ops, the avg finish step, and int-range checks
// for MPI's count arguments.
#pragma once

#include <mpi.h>

#include <cstddef>

#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::bench {

/// Converts an element count to MPI's int; Unsupported when it does not fit.
[[nodiscard]] Status mpiCount(std::size_t count, int& out);

/// The MPI_Op the baseline reduces `dtype` with `op`: the backend's (MPI's predefined op, or
/// its user op over chimera's host reduction for f16/bf16, which MPI has no type for; created
/// once per process). Avg maps to the sum op: finish with `finishAverage`. BackendError when
/// MPI_Op_create fails.
[[nodiscard]] Status baselineReduceOp(DataType dtype, ReduceOp op, MPI_Op& out);

/// After an MPI_SUM standing in for avg: buffer[i] /= groupSize (integers truncate toward
/// zero), by chimera's host `divideByCount`.
void finishAverage(void* buffer, std::size_t count, DataType dtype, int groupSize);

}  // namespace chimera::bench
