// SPDX-License-Identifier: Apache-2.0
// Times every candidate algorithm of the MPI backend against the MPI library's collective,
// per op and message size, on MPI_COMM_WORLD; the numbers behind the choices in
// docs/performance.md. Not a test: run it by hand under mpirun.
//
//   mpirun -np 8 --oversubscribe build/tests/mpi/mpi_algorithm_timing [sizes...]
//
// Sizes are per-rank buffer bytes (the full AllReduce/ReduceScatter input, the AllGather
// output), parseSize syntax; default 64K 1M 32M. Time = max over ranks of the mean per
// iteration after two warm-up calls, f32 sum.
#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/mpi/exchange.hpp"
#include "backend/mpi/mpi_backend_impl.hpp"
#include "backend/mpi/ring.hpp"
#include "chimera/mpi_backend.hpp"

namespace chimera {
namespace {

struct Candidate {
  std::string name;
  std::function<void()> run;
};

double timeMs(const std::function<void()>& run, int iterations) {
  run();
  run();
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iterations; ++i) run();
  const double mean = (MPI_Wtime() - start) / iterations;
  double slowest = 0;
  MPI_Allreduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest * 1e3;
}

void must(const Status& status) {
  if (!status.isOk()) {
    fmt::print(stderr, "{}\n", status.toString());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void report(const std::string& op, std::size_t bytes, const std::vector<Candidate>& candidates, int iterations,
            int rank) {
  for (const Candidate& candidate : candidates) {
    const double ms = timeMs(candidate.run, iterations);
    if (rank == 0) fmt::print("| {:<13} | {:>9} | {:<28} | {:>10.3f} |\n", op, formatSize(bytes), candidate.name, ms);
  }
}

int run(int argc, char** argv) {
  int rank = 0;
  int size = 0;
  must(mpiWorld(rank, size));
  std::vector<std::size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    std::size_t bytes = 0;
    must(parseSize(argv[i], bytes));
    sizes.push_back(bytes);
  }
  if (sizes.empty()) sizes = {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{32} << 20};

  std::unique_ptr<Backend> backend;
  detail::MpiBackendOptions options;  // Auto, no argument checks, as in a release build
  must(detail::createMpiBackend(Mesh::flat(size), options, backend));
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const detail::MpiGroup group{comm, size, rank};
  detail::ScratchBuffer scratch;
  const AxisSet world = backend->mesh().allAxes();
  const std::size_t segments[] = {std::size_t{256} << 10, std::size_t{1} << 20, std::size_t{1} << 30};

  if (rank == 0) fmt::print("| op | bytes/rank | algorithm | time (ms) |\n|---|---|---|---|\n");
  for (const std::size_t bytes : sizes) {
    const std::size_t count = bytes / sizeof(float) / static_cast<std::size_t>(size) * static_cast<std::size_t>(size);
    const std::size_t block = count / static_cast<std::size_t>(size);
    const int iterations = static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / bytes, 3, 50));
    std::vector<float> send(count, 1.0f);
    std::vector<float> recv(count, 0.0f);
    const int n = static_cast<int>(count);
    const int b = static_cast<int>(block);

    std::vector<Candidate> ar = {
        {"MPI_Allreduce", [&] { MPI_Allreduce(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, comm); }},
        {"backend (auto)", [&] { must(backend->allReduce(send.data(), recv.data(), count, DataType::F32, ReduceOp::Sum, world)); }}};
    std::vector<Candidate> rs = {
        {"MPI_Reduce_scatter_block",
         [&] { MPI_Reduce_scatter_block(send.data(), recv.data(), b, MPI_FLOAT, MPI_SUM, comm); }},
        {"backend (auto)", [&] { must(backend->reduceScatter(send.data(), recv.data(), block, DataType::F32, ReduceOp::Sum, world)); }}};
    std::vector<Candidate> ag = {
        {"MPI_Allgather", [&] { MPI_Allgather(send.data(), b, MPI_FLOAT, recv.data(), b, MPI_FLOAT, comm); }},
        {"backend (auto)", [&] { must(backend->allGather(send.data(), recv.data(), block, DataType::F32, world)); }}};
    for (const std::size_t seg : segments) {
      const std::string suffix = seg >= bytes ? "unsegmented" : "segment " + formatSize(seg);
      ar.push_back({"ring RS+AG, " + suffix, [&, seg] {
                      must(detail::ringAllReduce(send.data(), recv.data(), count, DataType::F32, ReduceOp::Sum, group,
                                                 scratch, seg));
                    }});
      rs.push_back({"ring, " + suffix, [&, seg] {
                      must(detail::ringReduceScatter(send.data(), recv.data(), detail::BlockSplit{count, size},
                                                     DataType::F32, ReduceOp::Sum, group, scratch, seg));
                    }});
      ag.push_back({"ring, " + suffix, [&, seg] {
                      must(detail::ringAllGather(recv.data(), detail::BlockSplit{count, size}, DataType::F32, group,
                                                 seg));
                    }});
    }
    std::vector<Candidate> a2a = {
        {"MPI_Alltoall", [&] { MPI_Alltoall(send.data(), b, MPI_FLOAT, recv.data(), b, MPI_FLOAT, comm); }},
        {"pairwise exchange", [&] { must(detail::pairwiseAllToAll(send.data(), recv.data(), block, DataType::F32, group)); }}};
    std::vector<Candidate> bcast = {
        {"MPI_Bcast", [&] { MPI_Bcast(recv.data(), n, MPI_FLOAT, 0, comm); }},
        {"scatter + ring allgather", [&] {
           must(detail::scatterAllGatherBroadcast(send.data(), recv.data(), count, DataType::F32, 0, group,
                                                  std::size_t{1} << 20));
         }}};
    report("allreduce", bytes, ar, iterations, rank);
    report("reducescatter", bytes, rs, iterations, rank);
    report("allgather", bytes, ag, iterations, rank);
    report("alltoall", bytes, a2a, iterations, rank);
    report("broadcast", bytes, bcast, iterations, rank);
  }
  MPI_Comm_free(&comm);
  backend.reset();
  finalizeMpi();
  return 0;
}

}  // namespace
}  // namespace chimera

int main(int argc, char** argv) { return chimera::run(argc, argv); }
