// SPDX-License-Identifier: Apache-2.0
// The plan executor on the NCCL backend (device buffers, stream-ordered): the paper's chains
// baseline vs fused vs an exact reference, one rank per GPU (threads) or one rank per
// process (chimera-rank-launch, several ranks per GPU where NCCL allows it) with the six
// chimera-bench scenarios timed at 8 ranks, and a prepared plan captured into a CUDA graph
// and replayed on one GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chimera/chain.hpp"
#include "chimera/executor.hpp"
#include "chimera/layout.hpp"
#include "chimera/nccl_backend.hpp"
#include "core/check.hpp"
#include "gpu_test_util.hpp"
#include "typed_values.hpp"

namespace chimera {
namespace {

struct ChainCase {
  std::string mesh;
  std::string from;
  std::string chain;
  std::string consume;
  std::vector<std::int64_t> shape;
};

// A few of the paper's pairs per world size (the full table runs under MPI in tests/mpi).
std::vector<ChainCase> chainCases(int world) {
  const std::vector<std::int64_t> flat{32, 48};
  const std::vector<std::int64_t> cube{16, 24, 16};
  switch (world) {
    case 1:
      return {{"tp=1", "tp=P", "allreduce:tp", "tp=S0", flat},
              {"dp=1,sp=1", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", cube}};
    case 2:
      return {{"tp=2", "tp=P", "allreduce:tp", "tp=S1", flat},
              {"pp=2,tp=1", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", flat},
              {"dp=1,sp=2", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", cube}};
    case 4:
      return {{"pp=2,tp=2", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", flat},
              {"ep=2,tp=2", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1", cube}};
    case 8:
      return {{"pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", flat},
              {"sp=4,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R", flat},
              {"pp=2,ep=4", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", flat}};
    default: return {};
  }
}

// Partial-group member m's share of logical element `index`: small integers, so every sum
// is exact in f32 and bf16 and fused must equal baseline bit for bit.
double contribution(int member, std::int64_t index) { return static_cast<double>((index * 7 + member * 13) % 17 - 8); }

// Calls visit(local, logicalIndex) for the elements `rank` holds of `layout`.
template <typename Visit>
void forEachLocal(const Layout& layout, const TensorSpec& spec, int rank, Visit visit) {
  if (!layout.holds(rank)) return;
  const Box box = layout.rankBox(rank, spec);
  std::vector<std::int64_t> coords(box.offset);
  for (std::int64_t local = 0; local < box.volume(); ++local) {
    std::int64_t index = 0;
    for (std::size_t d = 0; d < coords.size(); ++d) index = index * spec.shape[d] + coords[d];
    visit(static_cast<std::size_t>(local), index);
    for (std::size_t d = coords.size(); d-- > 0;) {
      if (++coords[d] < box.offset[d] + box.extent[d]) break;
      coords[d] = box.offset[d];
    }
  }
}

// One rank's executor run of one chain: backend, request, plan, input and output sizes.
struct RankRun {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Executor> executor;
  ChainRequest request;
  const ChainPlan* plan = nullptr;
  std::vector<std::uint8_t> input;
  std::size_t outputBytes = 0;
  int members = 1;  // size of the start layout's partial group
};

// Collective over the ranks (backend creation and the executor's first-use agreement).
Status prepare(const ChainCase& c, DataType dtype, int world, int rank, int device, const NcclUniqueId& id,
               RankRun& run) {
  Mesh mesh;
  CHIMERA_RETURN_IF_ERROR(Mesh::parse(c.mesh, world, mesh));
  CHIMERA_RETURN_IF_ERROR(createNcclBackend(mesh, rank, device, id, run.backend));
  run.executor = std::make_unique<Executor>(*run.backend);
  run.request.spec = TensorSpec{c.shape, dtype};
  CHIMERA_RETURN_IF_ERROR(Layout::parse(c.from, mesh, run.request.from));
  CHIMERA_RETURN_IF_ERROR(Chain::parse(c.chain, mesh, run.request.chain));
  Layout consume;
  CHIMERA_RETURN_IF_ERROR(Layout::parse(c.consume, mesh, consume));
  run.request.consume = consume;
  CHIMERA_RETURN_IF_ERROR(run.executor->plan(run.request, run.plan));
  const Layout& from = run.request.from;
  const TensorSpec& spec = run.request.spec;
  const AxisSet partial = from.axesOfKind(Placement::Kind::Partial);
  run.members = mesh.groupSize(partial);
  const int member = mesh.groupIndex(rank, partial);
  run.input.assign(from.holds(rank) ? static_cast<std::size_t>(from.localBytes(spec)) : 0, 0);
  forEachLocal(from, spec, rank, [&](std::size_t local, std::int64_t index) {
    test::storeValue(spec.dtype, contribution(member, index), run.input.data() + local * dataTypeSize(spec.dtype));
  });
  const Layout& consumed = run.plan->consumed;
  run.outputBytes = consumed.holds(rank) ? static_cast<std::size_t>(consumed.localBytes(spec)) : 0;
  return Status::ok();
}

// Elements of `output` that differ from the reference (scale x the sum of the contributions).
int countWrong(const RankRun& run, int rank, const std::vector<std::uint8_t>& output) {
  int wrong = 0;
  const TensorSpec& spec = run.request.spec;
  forEachLocal(run.plan->consumed, spec, rank, [&](std::size_t local, std::int64_t index) {
    double want = 0;
    for (int m = 0; m < run.members; ++m) want += contribution(m, index);
    want *= static_cast<double>(run.plan->trace.scale);
    if (test::loadValue(spec.dtype, output.data() + local * dataTypeSize(spec.dtype)) != want) ++wrong;
  });
  return wrong;
}

// Runs the chain in `mode` on device copies of the input; `output` gets the result.
Status runMode(RankRun& run, ChainMode mode, std::vector<std::uint8_t>& output) {
  Backend& backend = *run.backend;
  void* in = nullptr;
  void* out = nullptr;
  if (!run.input.empty()) CHIMERA_RETURN_IF_ERROR(backend.allocate(run.input.size(), &in));
  if (run.outputBytes > 0) CHIMERA_RETURN_IF_ERROR(backend.allocate(run.outputBytes, &out));
  Status status = backend.copy(in, run.input.data(), run.input.size());
  if (status.isOk()) status = run.executor->runChain(run.request, mode, in, run.input.size(), out, run.outputBytes);
  output.assign(run.outputBytes, 0xEE);
  if (status.isOk()) status = backend.copy(output.data(), out, run.outputBytes);
  if (status.isOk()) status = backend.synchronize();
  backend.deallocate(in);
  backend.deallocate(out);
  return status;
}

// "" when baseline and fused both match the reference on this rank, else what went wrong.
std::string checkRank(const ChainCase& c, DataType dtype, int world, int rank, int device, const NcclUniqueId& id) {
  RankRun run;
  Status status = prepare(c, dtype, world, rank, device, id, run);
  if (!status.isOk()) return "prepare: " + status.toString();
  std::vector<std::uint8_t> baseline;
  std::vector<std::uint8_t> fused;
  if (!(status = runMode(run, ChainMode::Baseline, baseline)).isOk()) return "baseline: " + status.toString();
  if (!(status = runMode(run, ChainMode::Fused, fused)).isOk()) return "fused: " + status.toString();
  std::string why;
  if (const int wrong = countWrong(run, rank, baseline); wrong != 0) why += std::to_string(wrong) + " wrong; ";
  if (fused != baseline) why += "fused differs from baseline; ";
  return why;
}

TEST(ExecutorOnNccl, PaperChainsMatchTheReferenceOnEveryGpu) {
  CHIMERA_REQUIRE_DEVICES(1);
  std::string why;
  const int devices = test::cudaDevices(why);
  const int world = devices >= 8 ? 8 : devices >= 4 ? 4 : devices >= 2 ? 2 : 1;
  for (const ChainCase& c : chainCases(world)) {
    for (DataType dtype : {DataType::F32, DataType::BF16}) {
      NcclUniqueId id;
      ASSERT_TRUE(createNcclUniqueId(id).isOk());
      std::vector<std::string> results(static_cast<std::size_t>(world));
      std::vector<std::thread> threads;
      for (int rank = 0; rank < world; ++rank) {
        threads.emplace_back(
            [&, rank] { results[static_cast<std::size_t>(rank)] = checkRank(c, dtype, world, rank, rank, id); });
      }
      for (auto& thread : threads) thread.join();
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_EQ(results[static_cast<std::size_t>(rank)], "")
            << c.chain << " on " << c.mesh << " (" << dataTypeName(dtype) << ") rank " << rank;
      }
    }
  }
}

TEST(ExecutorOnNccl, PreparedPlanIsCapturedIntoACudaGraphAndReplayed) {
  CHIMERA_REQUIRE_DEVICES(1);
  const ChainCase c = chainCases(1).back();  // a box pack/unpack, an allgather and an alltoall
  NcclUniqueId id;
  ASSERT_TRUE(createNcclUniqueId(id).isOk());
  RankRun run;
  setenv("CHIMERA_CHECK_ARGS", "0", 1);  // the agreement waits for the stream: not capturable
  const Status prepared = prepare(c, DataType::F32, 1, 0, 0, id, run);
  unsetenv("CHIMERA_CHECK_ARGS");
  ASSERT_TRUE(prepared.isOk()) << prepared.toString();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  test::DeviceBuffer in(run.input.size());
  test::DeviceBuffer out(run.outputBytes);
  in.upload(run.input);
  // The first run plans, prepares (allocates scratch) and agrees: outside the capture.
  ASSERT_TRUE(
      run.executor->runChain(run.request, ChainMode::Fused, in.data(), in.bytes(), out.data(), out.bytes(), stream)
          .isOk());
  ASSERT_TRUE(run.backend->synchronize(stream).isOk());
  ASSERT_EQ(cudaMemset(out.data(), 0, out.bytes()), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status captured =
      run.executor->runChain(run.request, ChainMode::Fused, in.data(), in.bytes(), out.data(), out.bytes(), stream);
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  ASSERT_TRUE(captured.isOk()) << captured.toString();
  ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(countWrong(run, 0, out.download(out.bytes())), 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  run.executor.reset();
  run.backend.reset();
  cudaStreamDestroy(stream);
}

TEST(ExecutorOnNcclProcesses, PaperChainsMatchTheReferenceOnEveryLaunchedRank) {
  detail::NcclBootstrapEnv env;
  int device = 0;
  CHIMERA_REQUIRE_LAUNCHED_RANKS(env, device, 1);
  const std::vector<ChainCase> cases = chainCases(env.worldSize);
  if (cases.empty()) GTEST_SKIP() << "no chain cases for " << env.worldSize << " ranks (1, 2, 4 or 8)";
  for (const ChainCase& c : cases) {
    for (DataType dtype : {DataType::F32, DataType::BF16}) {
      NcclUniqueId id;  // every case is a new NCCL world, which needs its own id
      const Status fresh = test::launchedWorldId(env, device, id);
      ASSERT_TRUE(fresh.isOk()) << fresh.toString();
      EXPECT_EQ(checkRank(c, dtype, env.worldSize, env.rank, device, id), "")
          << c.chain << " on " << c.mesh << " (" << dataTypeName(dtype) << ") rank " << env.rank;
    }
  }
}

// The six scenarios of chimera-bench --scenario (benchmarks/scenario.cpp), 8 ranks.
std::vector<std::pair<std::string, ChainCase>> sixScenarios() {
  const std::vector<std::int64_t> flat{2048, 1024};    // 8 MiB in f32
  const std::vector<std::int64_t> cube{64, 256, 128};  // 8 MiB in f32
  return {{"tp_sp", {"tp=8", "tp=P", "allreduce:tp", "tp=S0", flat}},
          {"tp_pp", {"pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", flat}},
          {"tp_ep", {"ep=2,tp=4", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1", cube}},
          {"sp_ep", {"dp=2,sp=4", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", cube}},
          {"pp_sp", {"sp=4,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R", flat}},
          {"pp_ep", {"pp=2,ep=4", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", flat}}};
}

// Median milliseconds of `iterations` runs of the chain in `mode` (after 2 warm-up runs),
// each timed on the host from the call to the end of synchronize().
Status timeMode(RankRun& run, ChainMode mode, void* in, void* out, int iterations, double& medianMs) {
  std::vector<double> times;
  for (int i = 0; i < iterations + 2; ++i) {
    const auto start = std::chrono::steady_clock::now();
    CHIMERA_RETURN_IF_ERROR(run.executor->runChain(run.request, mode, in, run.input.size(), out, run.outputBytes));
    CHIMERA_RETURN_IF_ERROR(run.backend->synchronize());
    if (i >= 2)
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  medianMs = times[times.size() / 2];
  return Status::ok();
}

// Runs the six scenarios in `dtype` on this launched rank and prints one line per scenario
// for scripts/gpu-check.sh to collect:
//   SCENARIO name=<s> dtype=<d> rank=<r> wrong=<elements> fused_equal=<0|1> baseline_ms=<m> fused_ms=<m>
void runSixScenarios(const detail::NcclBootstrapEnv& env, int device, DataType dtype) {
  for (const auto& [name, c] : sixScenarios()) {
    NcclUniqueId id;
    Status status = test::launchedWorldId(env, device, id);
    ASSERT_TRUE(status.isOk()) << status.toString();
    RankRun run;
    status = prepare(c, dtype, 8, env.rank, device, id, run);
    ASSERT_TRUE(status.isOk()) << name << ": " << status.toString();
    std::vector<std::uint8_t> baseline;
    std::vector<std::uint8_t> fused;
    ASSERT_TRUE((status = runMode(run, ChainMode::Baseline, baseline)).isOk()) << name << ": " << status.toString();
    ASSERT_TRUE((status = runMode(run, ChainMode::Fused, fused)).isOk()) << name << ": " << status.toString();
    const int wrong = countWrong(run, env.rank, baseline) + countWrong(run, env.rank, fused);
    test::DeviceBuffer in(std::max<std::size_t>(run.input.size(), 1));
    test::DeviceBuffer out(std::max<std::size_t>(run.outputBytes, 1));
    if (!run.input.empty()) in.upload(run.input);
    double baselineMs = 0;
    double fusedMs = 0;
    ASSERT_TRUE((status = timeMode(run, ChainMode::Baseline, in.data(), out.data(), 5, baselineMs)).isOk())
        << status.toString();
    ASSERT_TRUE((status = timeMode(run, ChainMode::Fused, in.data(), out.data(), 5, fusedMs)).isOk())
        << status.toString();
    std::printf("SCENARIO name=%s dtype=%s rank=%d wrong=%d fused_equal=%d baseline_ms=%.3f fused_ms=%.3f\n",
                name.c_str(), std::string(dataTypeName(dtype)).c_str(), env.rank, wrong, fused == baseline ? 1 : 0,
                baselineMs, fusedMs);
    std::fflush(stdout);
    EXPECT_EQ(wrong, 0) << name << " (" << dataTypeName(dtype) << ") rank " << env.rank;
    EXPECT_TRUE(fused == baseline) << name << " (" << dataTypeName(dtype) << ") rank " << env.rank;
  }
}

TEST(ExecutorOnNcclProcesses, SixScenariosF32AtEightRanks) {
  detail::NcclBootstrapEnv env;
  int device = 0;
  CHIMERA_REQUIRE_LAUNCHED_RANKS(env, device, 8);
  if (env.worldSize != 8) GTEST_SKIP() << "the scenarios are for 8 ranks";
  runSixScenarios(env, device, DataType::F32);
}

TEST(ExecutorOnNcclProcesses, SixScenariosBf16AtEightRanks) {
  detail::NcclBootstrapEnv env;
  int device = 0;
  CHIMERA_REQUIRE_LAUNCHED_RANKS(env, device, 8);
  if (env.worldSize != 8) GTEST_SKIP() << "the scenarios are for 8 ranks";
  runSixScenarios(env, device, DataType::BF16);
}

}  // namespace
}  // namespace chimera
