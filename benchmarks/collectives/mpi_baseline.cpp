// SPDX-License-Identifier: Apache-2.0
// Implements the plain-MPI baseline's count checks and reduction ops.
#include "mpi_baseline.hpp"

#include <fmt/format.h>

#include <climits>

#include "common/host_reduce.hpp"
#include "core/check.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::bench {

Status mpiCount(std::size_t count, int& out) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    return Status::unsupported(fmt::format("count {} exceeds MPI's int range", count));
  }
  out = static_cast<int>(count);
  return Status::ok();
}

Status baselineReduceOp(DataType dtype, ReduceOp op, MPI_Op& out) {
  CHIMERA_RETURN_IF_ERROR(detail::createUserOps());
  out = detail::mpiReduceOp(dtype, op);
  return Status::ok();
}

void finishAverage(void* buffer, std::size_t count, DataType dtype, int groupSize) {
  detail::divideByCount(buffer, count, dtype, groupSize);
}

}  // namespace chimera::bench
