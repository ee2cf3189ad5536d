// SPDX-License-Identifier: Apache-2.0
// Times every candidate algorithm of the MPI backend against the MPI library's collective,
// per op and message size, on MPI_COMM_WORLD; the numbers behind the choices in
// docs/performance.md. Not a test: run it by hand under mpirun.
//
//   mpirun -np 8 --oversubscribe build/benchmarks/timing/mpi_algorithm_timing [-r ROUNDS] [-o OP] [sizes...]
//
// OP keeps one op's rows: allreduce, reducescatter, allgather, alltoall or broadcast.
//
// Sizes are per-rank buffer bytes (the full AllReduce/ReduceScatter input, the AllGather
// output), parseSize syntax; default 64K 1M 32M. Time of a round = max over ranks of the
// mean per iteration after two warm-up calls, f32 sum; reported: median and best of ROUNDS
// (default 5) rounds, candidates interleaved round-robin.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chimera/mpi_backend.hpp"
#include "common/cli.hpp"
#include "common/size_text.hpp"
#include "core/check.hpp"
#include "mpi/exchange.hpp"
#include "mpi/mpi_backend_impl.hpp"
#include "mpi/ring.hpp"

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

// One candidate of one op, with its per-round timings.
struct Entry {
  std::string op;
  Candidate candidate;
  std::vector<double> samples;
};

// Times every entry for `rounds` rounds, round-robin so that load drifting on the shared
// host hits all candidates alike, and prints the median and the best round per entry.
void measure(std::vector<Entry>& entries, std::size_t bytes, int iterations, int rounds, int rank) {
  for (int round = 0; round < rounds; ++round)
    for (Entry& entry : entries) entry.samples.push_back(timeMs(entry.candidate.run, iterations));
  for (Entry& entry : entries) {
    std::sort(entry.samples.begin(), entry.samples.end());
    const double median = entry.samples[entry.samples.size() / 2];
    if (rank == 0)
      fmt::print("| {:<13} | {:>9} | {:<28} | {:>10.3f} | {:>10.3f} |\n", entry.op, formatSize(bytes),
                 entry.candidate.name, median, entry.samples.front());
  }
}

void add(std::vector<Entry>& entries, const std::string& op, const std::vector<Candidate>& candidates) {
  for (const Candidate& candidate : candidates) entries.push_back({op, candidate, {}});
}

// Buffers and handles shared by the candidates of one message size.
struct Context {
  Backend* backend = nullptr;
  detail::MpiGroup group;
  detail::ScratchBuffer* scratch = nullptr;
  std::size_t count = 0;  // f32 elements per rank (a multiple of the world size)
  std::size_t block = 0;  // count / world size
  std::vector<float> send;
  std::vector<float> recv;
};

constexpr std::size_t kSegments[] = {std::size_t{64} << 10, std::size_t{256} << 10, std::size_t{1} << 20,
                                     std::size_t{1} << 30};

std::string segmentLabel(std::size_t segment, std::size_t blockBytes) {
  return segment >= blockBytes ? "unsegmented" : "segment " + formatSize(segment);
}

void addReductions(Context& c, std::vector<Entry>& entries) {
  const AxisSet world = c.backend->mesh().allAxes();
  const detail::BlockSplit split{c.count, c.group.size};
  std::vector<Candidate> ar = {
      {"MPI_Allreduce",
       [&c, world] {
         MPI_Allreduce(c.send.data(), c.recv.data(), static_cast<int>(c.count), MPI_FLOAT, MPI_SUM, c.group.comm);
       }},
      {"backend (auto)", [&c, world] {
         must(c.backend->allReduce(c.send.data(), c.recv.data(), c.count, DataType::F32, ReduceOp::Sum, world));
       }}};
  std::vector<Candidate> rs = {
      {"MPI_Reduce_scatter_block",
       [&c, world] {
         MPI_Reduce_scatter_block(c.send.data(), c.recv.data(), static_cast<int>(c.block), MPI_FLOAT, MPI_SUM,
                                  c.group.comm);
       }},
      {"backend (auto)", [&c, world] {
         must(c.backend->reduceScatter(c.send.data(), c.recv.data(), c.block, DataType::F32, ReduceOp::Sum, world));
       }}};
  for (const std::size_t seg : kSegments) {
    const std::string label = segmentLabel(seg, c.block * sizeof(float));
    ar.push_back({"direct RS + direct AG, RS " + label, [&c, world, seg] {
                    must(detail::pointToPointAllReduce(c.send.data(), c.recv.data(), c.count, DataType::F32,
                                                       ReduceOp::Sum, c.group, *c.scratch, seg));
                  }});
    rs.push_back({"direct, " + label, [&c, seg, split] {
                    must(detail::directReduceScatter(c.send.data(), c.recv.data(), split, DataType::F32, ReduceOp::Sum,
                                                     c.group, *c.scratch, seg));
                  }});
    rs.push_back({"ring, " + label, [&c, world, seg, split] {
                    must(detail::ringReduceScatter(c.send.data(), c.recv.data(), split, DataType::F32, ReduceOp::Sum,
                                                   c.group, *c.scratch, seg));
                  }});
  }
  add(entries, "allreduce", ar);
  add(entries, "reducescatter", rs);
}

void addDataMovement(Context& c, std::vector<Entry>& entries) {
  const AxisSet world = c.backend->mesh().allAxes();
  const detail::BlockSplit split{c.count, c.group.size};
  const int b = static_cast<int>(c.block);
  std::vector<Candidate> ag = {
      {"MPI_Allgather",
       [&c, world, b] { MPI_Allgather(c.send.data(), b, MPI_FLOAT, c.recv.data(), b, MPI_FLOAT, c.group.comm); }},
      {"backend (auto)",
       [&c, world, b] { must(c.backend->allGather(c.send.data(), c.recv.data(), c.block, DataType::F32, world)); }}};
  ag.push_back(
      {"direct", [&c, split] { must(detail::directAllGather(c.recv.data(), split, DataType::F32, c.group)); }});
  for (const std::size_t seg : kSegments)
    ag.push_back({"ring, " + segmentLabel(seg, c.block * sizeof(float)), [&c, seg, split] {
                    must(detail::ringAllGather(c.recv.data(), split, DataType::F32, c.group, seg));
                  }});
  const std::vector<Candidate> a2a = {
      {"MPI_Alltoall",
       [&c, world, b] { MPI_Alltoall(c.send.data(), b, MPI_FLOAT, c.recv.data(), b, MPI_FLOAT, c.group.comm); }},
      {"pairwise exchange",
       [&c, world, b] {
         must(detail::pairwiseAllToAll(c.send.data(), c.recv.data(), c.block, DataType::F32, c.group,
                                       detail::kMaxMpiCount));
       }},
      {"backend (auto)",
       [&c, world, b] { must(c.backend->allToAll(c.send.data(), c.recv.data(), c.block, DataType::F32, world)); }}};
  const std::vector<Candidate> bcast = {
      {"MPI_Bcast",
       [&c, world, b] { MPI_Bcast(c.recv.data(), static_cast<int>(c.count), MPI_FLOAT, 0, c.group.comm); }},
      {"scatter + ring allgather",
       [&c, world, b] {
         must(detail::scatterAllGatherBroadcast(c.send.data(), c.recv.data(), c.count, DataType::F32, 0, c.group,
                                                nullptr));
       }},
      {"backend (auto)",
       [&c, world, b] { must(c.backend->broadcast(c.send.data(), c.recv.data(), c.count, DataType::F32, 0, world)); }}};
  add(entries, "allgather", ag);
  add(entries, "alltoall", a2a);
  add(entries, "broadcast", bcast);
}

// argv: [-r ROUNDS] [-o OP] SIZE...; every rank parses the same arguments, so every rank
// fails alike before MPI starts.
Status parseArgs(int argc, char** argv, int& rounds, std::string& only, std::vector<std::size_t>& sizes) {
  const detail::CliFlag flags[] = {
      {"-r", "", true, [&](std::string_view v) { return detail::parseIntFlag("-r", v, 1, rounds); }},
      {"-o", "", true, [&](std::string_view v) { return only = v, Status::ok(); }},
  };
  std::vector<std::string> positional;
  CHIMERA_RETURN_IF_ERROR(detail::parseFlags(detail::argumentList(argc, argv), flags, &positional));
  for (const std::string& text : positional) {
    std::size_t bytes = 0;
    CHIMERA_RETURN_IF_ERROR(detail::parseSizeFlag("SIZE", text, bytes));
    sizes.push_back(bytes);
  }
  if (sizes.empty()) sizes = {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{32} << 20};
  return Status::ok();
}

int run(int argc, char** argv) {
  int rounds = 5;
  std::string only;
  std::vector<std::size_t> sizes;
  if (const Status status = parseArgs(argc, argv, rounds, only, sizes); !status.isOk()) {
    fmt::print(stderr, "mpi_algorithm_timing: {}\nusage: mpi_algorithm_timing [-r ROUNDS] [-o OP] [SIZE...]\n",
               status.message());
    return 2;
  }
  int rank = 0;
  int size = 0;
  must(mpiWorld(rank, size));

  std::unique_ptr<Backend> backend;
  detail::MpiBackendOptions unchecked;
  unchecked.checkArgs = false;
  must(detail::createMpiBackend(Mesh::flat(size), unchecked, backend));  // auto, unchecked
  detail::ScratchBuffer scratch;
  Context c;
  c.backend = backend.get();
  c.scratch = &scratch;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  c.group = detail::worldGroup(comm, rank, size, detail::kDefaultTimeoutMs, "the world");
  if (rank == 0) fmt::print("| op | bytes/rank | algorithm | median (ms) | best (ms) |\n|---|---|---|---|---|\n");
  for (const std::size_t bytes : sizes) {
    c.count = bytes / sizeof(float) / static_cast<std::size_t>(size) * static_cast<std::size_t>(size);
    c.block = c.count / static_cast<std::size_t>(size);
    c.send.assign(c.count, 1.0f);
    c.recv.assign(c.count, 0.0f);
    const int iterations = static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / bytes, 2, 50));
    std::vector<Entry> entries;
    addReductions(c, entries);
    addDataMovement(c, entries);
    if (!only.empty()) std::erase_if(entries, [&only](const Entry& entry) { return entry.op != only; });
    measure(entries, bytes, iterations, rounds, rank);
  }
  MPI_Comm_free(&c.group.comm);
  backend.reset();
  finalizeMpi();
  return 0;
}

}  // namespace
}  // namespace chimera

int main(int argc, char** argv) { return chimera::run(argc, argv); }
