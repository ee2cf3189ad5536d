// SPDX-License-Identifier: Apache-2.0
// Hand-run cost of the default-on argument check (docs/reliability.md): AllReduce(Sum, f32)
// over the world at 4 KiB, 1 MiB and 32 MiB per rank, with checks on and off in alternating
// iterations of one run (so that load drifts hit both alike), plus the check alone (a
// zero-count call). Prints per-size medians (max over ranks per iteration) and their ratio.
//   mpirun -np 4 --oversubscribe build/benchmarks/timing/check_cost_timing
#include <mpi.h>

#include <fmt/format.h>

#include <memory>
#include <vector>

#include "mpi/mpi_backend_impl.hpp"
#include "world_timing.hpp"

namespace {

using chimera::Backend;
using chimera::DataType;
using chimera::ReduceOp;
using chimera::timing::median;
using chimera::timing::timeOnce;

// Seconds of one call, the max over ranks (the time the slowest rank saw).
double timed(Backend& backend, std::vector<float>& buf, std::size_t count) {
  chimera::Status status;
  const double elapsed = timeOnce(
      [&] {
        return backend.allReduce(buf.data(), buf.data(), count, DataType::F32, ReduceOp::Sum, backend.mesh().allAxes());
      },
      status);
  if (!status.isOk()) fmt::print(stderr, "{}\n", status.toString());
  return elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const chimera::Mesh mesh = chimera::Mesh::flat(size);
  std::unique_ptr<Backend> on;
  std::unique_ptr<Backend> off;
  chimera::detail::MpiBackendOptions options;
  options.checkArgs = true;
  if (!chimera::detail::createMpiBackend(mesh, options, on).isOk()) return 1;
  options.checkArgs = false;
  if (!chimera::detail::createMpiBackend(mesh, options, off).isOk()) return 1;
  struct Row {
    std::size_t bytes;
    int iterations;
  };
  if (rank == 0) {
    fmt::print("| size per rank | checks off (us) | checks on (us) | on/off | check alone (us) | iterations |\n");
    fmt::print("|---|---|---|---|---|---|\n");
  }
  for (const Row row : {Row{4096, 2000}, Row{1 << 20, 200}, Row{32 << 20, 16}}) {
    const std::size_t count = row.bytes / 4;
    std::vector<float> buf(count, 1.0f);
    std::vector<double> tOn, tOff, tCheck;
    for (int i = 0; i < row.iterations + 2; ++i) {  // the first two of each are warm-up
      const double a = timed(*off, buf, count);
      const double b = timed(*on, buf, count);
      const double c = timed(*on, buf, 0);
      if (i < 2) continue;
      tOff.push_back(a);
      tOn.push_back(b);
      tCheck.push_back(c);
    }
    if (rank == 0) {
      fmt::print("| {} KiB | {:.1f} | {:.1f} | {:.3f} | {:.1f} | {} |\n", row.bytes >> 10, median(tOff) * 1e6,
                 median(tOn) * 1e6, median(tOn) / median(tOff), median(tCheck) * 1e6, row.iterations);
    }
  }
  on.reset();
  off.reset();
  MPI_Finalize();
  return 0;
}
