// SPDX-License-Identifier: Apache-2.0
// Hand-run cost of a many-to-many's fan-out on the MPI backend (docs/cost_model.md, "host"):
// the first half of the world sends L bytes per rank to the second half, to 1, 2, 4, ...
// peers (L split evenly), in one groupedP2P with the backend's defaults (argument check on),
// fan-outs interleaved per iteration so that load drifts hit all alike. Prints per size the
// median (max over ranks per iteration) of each fan-out and the cost of each extra peer,
// (t(f) - t(1)) / (f - 1) at the widest fan-out f: the calibration pairs ranks 1:1 and
// cannot see it.
//   mpirun -np 8 --oversubscribe build/benchmarks/timing/fan_out_timing
#include <mpi.h>

#include <fmt/format.h>

#include <memory>
#include <vector>

#include "mpi/mpi_backend_impl.hpp"
#include "world_timing.hpp"

namespace {

using chimera::Backend;
using chimera::DataType;
using chimera::P2POp;
using chimera::timing::median;
using chimera::timing::timeOnce;

// Seconds of one hand-off of `bytes` per sender to `fan` receivers, the max over ranks.
double timed(Backend& backend, std::vector<char>& buf, std::size_t bytes, int fan) {
  const int rank = backend.rank();
  const int half = backend.mesh().size() / 2;
  const std::size_t piece = bytes / static_cast<std::size_t>(fan);
  std::vector<P2POp> ops;
  for (int k = 0; k < fan; ++k) {
    const bool sending = rank < half;
    const int me = sending ? rank : rank - half;
    const int peer = sending ? half + (me + k) % half : (me - k + half) % half;
    ops.push_back({sending ? P2POp::Kind::Send : P2POp::Kind::Recv, buf.data() + k * piece, piece, DataType::U8, peer});
  }
  chimera::Status status;
  const double elapsed = timeOnce([&] { return backend.groupedP2P(ops); }, status);
  if (!status.isOk()) fmt::print(stderr, "{}\n", status.toString());
  return elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 0;
  int rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (size < 4 || size % 2 != 0) {
    if (rank == 0) fmt::print(stderr, "fan_out_timing needs an even number of ranks, at least 4\n");
    MPI_Finalize();
    return 2;
  }
  std::unique_ptr<Backend> backend;
  if (!chimera::detail::createMpiBackend(chimera::Mesh::flat(size), {}, backend).isOk()) return 1;
  std::vector<int> fans;
  for (int f = 1; f <= size / 2; f *= 2) fans.push_back(f);
  const int widest = fans.back();
  if (rank == 0) {
    fmt::print("| bytes per sender |");
    for (const int f : fans) fmt::print(" {} peer(s) (us) |", f);
    fmt::print(" per extra peer (us) |\n|---|");
    for (std::size_t i = 0; i <= fans.size(); ++i) fmt::print("---|");
    fmt::print("\n");
  }
  constexpr int kIterations = 60;
  constexpr int kWarmUp = 10;
  for (std::size_t bytes = 4096; bytes <= (std::size_t{1} << 20); bytes *= 4) {
    std::vector<char> buf(bytes, 1);
    std::vector<std::vector<double>> times(fans.size());
    for (int i = 0; i < kIterations + kWarmUp; ++i) {
      for (std::size_t f = 0; f < fans.size(); ++f) {
        const double t = timed(*backend, buf, bytes, fans[f]);
        if (i >= kWarmUp) times[f].push_back(t);
      }
    }
    if (rank == 0) {
      fmt::print("| {} KiB |", bytes >> 10);
      for (const auto& t : times) fmt::print(" {:.1f} |", median(t) * 1e6);
      fmt::print(" {:.1f} |\n", (median(times.back()) - median(times.front())) / (widest - 1) * 1e6);
    }
  }
  backend.reset();
  MPI_Finalize();
  return 0;
}
