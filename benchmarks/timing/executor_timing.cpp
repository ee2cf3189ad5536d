// SPDX-License-Identifier: Apache-2.0
// Wall time of the six scenario presets, baseline (the chain as written) vs fused (the
// planner's best plan), through Executor::runChain on the MPI backend. Not a test: run it
// by hand (chimera-bench --scenario gives the official numbers).
//
//   mpirun -np 8 --oversubscribe build/benchmarks/timing/executor_timing [-i ITERS] [-s SCENARIO|overhead] [SIZE]
//
// SIZE (parseSize syntax, default 16M) is the bytes each rank holds at the chain's start;
// f32. Each iteration runs baseline then fused, each timed as the max over ranks of one
// call between barriers; reported: medians over ITERS (default 7) after 2 warm-up
// iterations, and the number of consumed elements where fused differs from baseline.
#include <fmt/format.h>
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "chimera/executor.hpp"
#include "chimera/mpi_backend.hpp"
#include "common/cli.hpp"
#include "common/size_text.hpp"
#include "core/check.hpp"
#include "world_timing.hpp"

namespace chimera {
namespace {

using timing::median;
using timing::timeOnce;

struct Scenario {
  const char* name;
  const char* mesh;
  const char* from;
  const char* chain;
  const char* consume;
  std::vector<std::int64_t> innerDims;  // every dim but the first
};

const Scenario kScenarios[] = {
    {"tp_sp", "tp=8", "tp=P", "allreduce:tp", "tp=S0", {1024}},
    {"tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", {1024}},
    {"tp_ep", "ep=2,tp=4", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1", {1024}},
    {"sp_ep", "dp=2,sp=4", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", {512, 1024}},
    {"pp_sp", "sp=4,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R", {1024}},
    {"pp_ep", "pp=2,ep=4", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", {1024}},
};

// Builds the request with dim 0 sized so that each rank starts with `bytes`.
Status buildRequest(const Scenario& s, const Mesh& mesh, std::size_t bytes, ChainRequest& out) {
  CHIMERA_RETURN_IF_ERROR(Layout::parse(s.from, mesh, out.from));
  CHIMERA_RETURN_IF_ERROR(Chain::parse(s.chain, mesh, out.chain));
  Layout consume;
  CHIMERA_RETURN_IF_ERROR(Layout::parse(s.consume, mesh, consume));
  out.consume = consume;
  std::int64_t inner = 1;
  for (std::int64_t d : s.innerDims) inner *= d;
  out.spec.dtype = DataType::F32;
  out.spec.shape = {64};
  out.spec.shape.insert(out.spec.shape.end(), s.innerDims.begin(), s.innerDims.end());
  CHIMERA_RETURN_IF_ERROR(out.from.validate(out.spec));
  const std::int64_t shards = out.spec.bytes() / out.from.localBytes(out.spec);  // dim-0 scale-free share
  out.spec.shape[0] = static_cast<std::int64_t>(bytes) / 4 * shards / inner;
  return out.from.validate(out.spec);
}

int runScenario(const Scenario& s, std::size_t bytes, int iterations, int rank, int world) {
  Mesh mesh;
  std::unique_ptr<Backend> backend;
  ChainRequest request;
  Status status = Mesh::parse(s.mesh, world, mesh);
  if (status.isOk()) status = createMpiBackend(mesh, backend);
  if (status.isOk()) status = buildRequest(s, mesh, bytes, request);
  if (!status.isOk()) {
    if (rank == 0) fmt::print("{:<6} skipped: {}\n", s.name, status.toString());
    return 0;
  }
  Executor executor(*backend);
  const ChainPlan* plan = nullptr;
  if (Status planned = executor.plan(request, plan); !planned.isOk()) return 1;
  const auto holds = [&](const Layout& l) {
    return l.holds(rank) ? static_cast<std::size_t>(l.localBytes(request.spec)) : 0;
  };
  const std::size_t inBytes = holds(request.from);
  const std::size_t outBytes = holds(plan->consumed);
  std::vector<float> input(inBytes / 4);
  for (std::size_t i = 0; i < input.size(); ++i)
    input[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(rank)) % 17);
  std::vector<float> baseOut(outBytes / 4);
  std::vector<float> fusedOut(outBytes / 4);
  std::vector<double> base;
  std::vector<double> fused;
  for (int it = 0; it < iterations + 2; ++it) {
    const double b = timeOnce(
        [&] {
          return executor.runChain(request, ChainMode::Baseline, input.data(), inBytes, baseOut.data(), outBytes);
        },
        status);
    if (!status.isOk()) break;
    const double f = timeOnce(
        [&] { return executor.runChain(request, ChainMode::Fused, input.data(), inBytes, fusedOut.data(), outBytes); },
        status);
    if (!status.isOk()) break;
    if (it >= 2) {
      base.push_back(b);
      fused.push_back(f);
    }
  }
  if (!status.isOk()) {
    fmt::print("rank {} {}: {}\n", rank, s.name, status.toString());
    return 1;
  }
  long long wrong = 0;
  for (std::size_t i = 0; i < baseOut.size(); ++i) wrong += baseOut[i] != fusedOut[i] ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    const double bm = median(base) * 1e6;
    const double fm = median(fused) * 1e6;
    fmt::print("{:<6} {:<10} {:>12.0f} {:>12.0f} {:>8.2f} {:>7} {:>6}  {}\n", s.name, s.mesh, bm, fm, bm / fm, wrong,
               plan->useFused ? "fused" : "base", request.spec.toString());
  }
  return wrong == 0 ? 0 : 1;
}

// Per-call cost of a cached runChain against the same backend calls made by hand, on a
// tiny tensor (tp_sp baseline: allReduce then a local copy of the own shard), so the
// difference is the executor's overhead: signature, lookup, pointer resolution.
void measureOverhead(int rank, int world, int calls) {
  Mesh mesh;
  std::unique_ptr<Backend> backend;
  ChainRequest request;
  Status status = Mesh::parse("tp=" + std::to_string(world), world, mesh);
  if (status.isOk()) status = createMpiBackend(mesh, backend);
  if (status.isOk()) status = buildRequest(kScenarios[0], mesh, std::size_t{32} << 10, request);
  if (!status.isOk()) {
    fmt::print("rank {} overhead: {}\n", rank, status.toString());
    return;
  }
  Executor executor(*backend);
  const std::size_t bytes = static_cast<std::size_t>(request.spec.bytes());
  std::vector<float> input(bytes / 4, 1.0f);
  std::vector<float> reduced(bytes / 4);
  std::vector<float> shard(bytes / 4 / static_cast<std::size_t>(world));
  const AxisSet axes = mesh.allAxes();
  auto byHand = [&] {
    Status s = backend->allReduce(input.data(), reduced.data(), input.size(), DataType::F32, ReduceOp::Sum, axes);
    std::memcpy(shard.data(), reduced.data() + static_cast<std::size_t>(rank) * shard.size(), shard.size() * 4);
    return s;
  };
  auto viaExecutor = [&] {
    return executor.runChain(request, ChainMode::Baseline, input.data(), bytes, shard.data(), shard.size() * 4);
  };
  std::vector<double> hand;
  std::vector<double> exec;
  status = byHand();
  if (status.isOk()) status = viaExecutor();
  for (int round = 0; round < 7 && status.isOk(); ++round) {
    hand.push_back(timeOnce(
        [&] {
          for (int i = 0; i < calls && status.isOk(); ++i) status = byHand();
          return status;
        },
        status));
    exec.push_back(timeOnce(
        [&] {
          for (int i = 0; i < calls && status.isOk(); ++i) status = viaExecutor();
          return status;
        },
        status));
  }
  if (!status.isOk()) fmt::print("rank {} overhead: {}\n", rank, status.toString());
  if (rank == 0 && status.isOk()) {
    fmt::print("overhead: {} B allreduce+copy, {} calls: by hand {:.1f} us/call, runChain {:.1f} us/call\n", bytes,
               calls, median(hand) / calls * 1e6, median(exec) / calls * 1e6);
  }
}

}  // namespace
}  // namespace chimera

int main(int argc, char** argv) {
  int iterations = 7;
  std::size_t bytes = std::size_t{16} << 20;
  std::string only;
  const chimera::detail::CliFlag flags[] = {
      {"-i", "", true, [&](std::string_view v) { return chimera::detail::parseIntFlag("-i", v, 1, iterations); }},
      {"-s", "", true, [&](std::string_view v) { return only = v, chimera::Status::ok(); }},
  };
  // Every rank parses the same arguments, so every rank fails alike before MPI starts.
  std::vector<std::string> sizes;
  chimera::Status parsed = chimera::detail::parseFlags(chimera::detail::argumentList(argc, argv), flags, &sizes);
  if (parsed.isOk() && sizes.size() > 1) parsed = chimera::Status::invalidArgument("more than one SIZE");
  if (parsed.isOk() && sizes.size() == 1) parsed = chimera::detail::parseSizeFlag("SIZE", sizes[0], bytes);
  if (!parsed.isOk()) {
    fmt::print(stderr, "executor_timing: {}\nusage: executor_timing [-i ITERS] [-s SCENARIO|overhead] [SIZE]\n",
               parsed.message());
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank = 0;
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (rank == 0) {
    fmt::print("{} ranks, {} per rank at the start, f32, medians of {} iterations\n", world, chimera::formatSize(bytes),
               iterations);
    fmt::print("{:<6} {:<10} {:>12} {:>12} {:>8} {:>7} {:>6}  {}\n", "name", "mesh", "baseline(us)", "fused(us)",
               "speedup", "#wrong", "plan", "tensor");
  }
  int failed = 0;
  for (const auto& s : chimera::kScenarios) {
    if (only.empty() || only == s.name) failed |= chimera::runScenario(s, bytes, iterations, rank, world);
  }
  if (only.empty() || only == "overhead") chimera::measureOverhead(rank, world, 200);
  MPI_Finalize();
  return failed;
}
