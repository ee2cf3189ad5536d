// SPDX-License-Identifier: Apache-2.0
// What the plain-MPI baseline needs: MPI's view of each DataType, reduction ops (MPI's
// predefined ones, plus user-defined ops for f16/bf16, which MPI has no type for), the
// avg finish step, and int-range checks for MPI's count arguments.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <map>
#include <utility>

#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::bench {

/// The MPI datatype carrying `dtype`: MPI_FLOAT, MPI_DOUBLE, MPI_INT32_T, MPI_INT64_T,
/// MPI_UINT8_T, and MPI_UINT16_T for f16/bf16 (bit patterns; reductions need a user op).
MPI_Datatype mpiDatatype(DataType dtype);

/// Converts an element count to MPI's int; Unsupported when it does not fit.
[[nodiscard]] Status mpiCount(std::size_t count, int& out);

/// MPI_Op for each (dtype, op) the baseline reduces with. Avg maps to the sum op (finish
/// with `finishAverage`). f16/bf16 get commutative user-defined ops over chimera's host
/// reduction (widen to float, combine, round to nearest even), created on first use. Destroy the table before
/// MPI_Finalize: it frees the user-defined ops.
class MpiOpTable {
 public:
  MpiOpTable() = default;
  MpiOpTable(const MpiOpTable&) = delete;
  MpiOpTable& operator=(const MpiOpTable&) = delete;
  ~MpiOpTable();

  /// The MPI_Op reducing `dtype` with `op`; BackendError when MPI_Op_create fails.
  [[nodiscard]] Status get(DataType dtype, ReduceOp op, MPI_Op& out);

 private:
  std::map<std::pair<DataType, ReduceOp>, MPI_Op> userOps_;
};

/// After an MPI_SUM standing in for avg: buffer[i] /= groupSize (integers truncate toward
/// zero), by chimera's host `divideByCount`.
void finishAverage(void* buffer, std::size_t count, DataType dtype, int groupSize);

}  // namespace chimera::bench
