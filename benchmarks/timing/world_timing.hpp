// SPDX-License-Identifier: Apache-2.0
// What the hand-run timing programs share: one call timed between barriers as the slowest
// rank saw it, and the median of such timings.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <vector>

#include "chimera/status.hpp"

namespace chimera::timing {

/// The median of `v` (the upper one of an even count); `v` must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Seconds of one `call()` (returning a Status, stored in `status`), between barriers on
/// MPI_COMM_WORLD: the max over ranks.
template <typename Call>
double timeOnce(Call call, Status& status) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  status = call();
  double elapsed = MPI_Wtime() - start;
  MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return elapsed;
}

}  // namespace chimera::timing
