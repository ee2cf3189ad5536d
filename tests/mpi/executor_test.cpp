// SPDX-License-Identifier: Apache-2.0
// The executor on real MPI ranks: every scenario preset (and other meshes) and seeded random
// chains, fused vs baseline vs an independent reference, exactly, on every rank;
// redistributions; the plan cache; bad input answered with a clear error on every rank, never a
// hang. Every check is local first, then agreed over the world (no ASSERT before a collective).
#include "chimera/executor.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "chimera/mpi_backend.hpp"
#include "chimera/planning/topology_cost.hpp"
#include "core/check.hpp"
#include "executor_test_support.hpp"

namespace chimera::testing {
namespace {

constexpr DataType kDtypes[] = {DataType::F32, DataType::BF16, DataType::I32};

// A backend and executor on one mesh.
struct Fixture {
  Mesh mesh;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Executor> executor;
  Status status;
};

Fixture makeFixture(const std::string& meshText) {
  Fixture f;
  f.status = Mesh::parse(meshText, worldSize(), f.mesh);
  if (f.status.isOk()) f.status = createMpiBackend(f.mesh, f.backend);
  if (f.status.isOk()) f.executor = std::make_unique<Executor>(*f.backend);
  return f;
}

Status makeRequest(const Mesh& mesh, const ChainCase& c, DataType dtype, ChainRequest& out) {
  out.spec = TensorSpec{c.shape, dtype};
  CHIMERA_RETURN_IF_ERROR(Layout::parse(c.from, mesh, out.from));
  CHIMERA_RETURN_IF_ERROR(Chain::parse(c.chain, mesh, out.chain));
  Layout consume;
  CHIMERA_RETURN_IF_ERROR(Layout::parse(c.consume, mesh, consume));
  out.consume = consume;
  return Status::ok();
}

std::size_t localBytes(const Layout& layout, const TensorSpec& spec, int rank) {
  return layout.holds(rank) ? static_cast<std::size_t>(layout.localBytes(spec)) : 0;
}

// Runs one chain in all three modes and checks them against each other and the reference.
// Returns false (on every rank) when some rank failed; `why` says what failed here.
bool checkChain(Executor& executor, const ChainRequest& request, std::string& why) {
  const int rank = worldRank();
  const ChainPlan* plan = nullptr;
  Status status = executor.plan(request, plan);
  if (!allRanksAgree(status.isOk())) {
    why = "plan: " + status.toString();
    return false;
  }
  const Layout& consumed = plan->consumed;
  const std::vector<std::uint64_t> input = makeInput(request.from, request.spec, rank);
  const std::size_t inBytes = localBytes(request.from, request.spec, rank);
  const std::size_t outBytes = localBytes(consumed, request.spec, rank);
  const std::size_t outCount = outBytes / dataTypeSize(request.spec.dtype);
  std::vector<std::vector<std::uint64_t>> outputs;
  for (ChainMode mode : {ChainMode::Baseline, ChainMode::Fused, ChainMode::Planned}) {
    outputs.push_back(makeBuffer(outCount, request.spec.dtype));
    status = executor.runChain(request, mode, inBytes ? input.data() : nullptr, inBytes,
                               outBytes ? outputs.back().data() : nullptr, outBytes);
    if (!allRanksAgree(status.isOk())) {
      why = "runChain mode " + std::to_string(static_cast<int>(mode)) + ": " + status.toString();
      return false;
    }
  }
  const int members = request.from.mesh().groupSize(request.from.axesOfKind(Placement::Kind::Partial));
  const int wrong =
      countWrong(outputs[0].data(), consumed, request.spec, rank, members, static_cast<double>(plan->trace.scale));
  const bool same = std::memcmp(outputs[0].data(), outputs[1].data(), outBytes) == 0 &&
                    std::memcmp(outputs[0].data(), outputs[2].data(), outBytes) == 0;
  if (wrong != 0) why = std::to_string(wrong) + " baseline elements differ from the reference";
  if (!same) why += " fused or planned output differs from the baseline";
  return allRanksAgree(wrong == 0 && same);
}

TEST(ExecutorChains, FusedEqualsBaselineEqualsReference) {
  const auto cases = chainCases(worldSize());
  EXPECT_FALSE(cases.empty());
  for (const ChainCase& c : cases) {
    Fixture f = makeFixture(c.mesh);
    if (!allRanksAgree(f.status.isOk())) {
      ADD_FAILURE() << c.mesh << ": " << f.status.toString();
      return;
    }
    for (DataType dtype : kDtypes) {
      ChainRequest request;
      Status built = makeRequest(f.mesh, c, dtype, request);
      if (!allRanksAgree(built.isOk())) {
        ADD_FAILURE() << c.name << " on " << c.mesh << ": " << built.toString();
        return;
      }
      std::string why;
      const bool ok = checkChain(*f.executor, request, why);
      EXPECT_TRUE(ok) << c.name << " on " << c.mesh << " (" << dataTypeName(dtype) << "): " << why;
      if (!ok) return;
    }
    // 3 dtypes, each planned once and prepared twice (baseline, fused; planned reuses one).
    EXPECT_EQ(f.executor->planningPasses(), 3u);
    EXPECT_EQ(f.executor->cachedPlans(), 6u);
  }
}

// The scenarios whose fused plans move boxes that are not one run in a many-to-many (sp_ep,
// pp_ep; tp_ep for its other steps), at sizes where those boxes are read straight from the
// sender's memory on one host (MpiBackendOptions::peerRead): equal to the baseline and the
// reference with the reads and without them, and copying fewer bytes locally with them. The
// executor's cost model prices the boxes as its backend moves them (movesBoxesEverywhere), so
// the fused plans cost no more with the reads, and less where a pass goes away.
TEST(ExecutorChains, BoxesReadFromPeersEqualPackedOnes) {
  int compared = 0, fewer = 0, cheaper = 0;
  for (ChainCase c : chainCases(worldSize())) {
    if (c.name != "tp_ep" && c.name != "sp_ep" && c.name != "pp_ep") continue;
    c.shape = c.shape.size() == 2 ? std::vector<std::int64_t>{1024, 4096} : std::vector<std::int64_t>{64, 32, 4096};
    std::uint64_t copied[2] = {0, 0};
    double fusedCost[2] = {0, 0};
    bool moves = true;  // every peer's boxes are read (one host that allows it)
    for (const bool read : {true, false}) {
      Fixture f;
      MpiBackendOptions options;
      f.status = MpiBackendOptions::fromEnvironment(options);
      options.peerRead = read;
      if (f.status.isOk()) f.status = Mesh::parse(c.mesh, worldSize(), f.mesh);
      if (f.status.isOk()) f.status = createMpiBackend(f.mesh, options, f.backend);
      if (f.status.isOk()) f.executor = std::make_unique<Executor>(*f.backend);
      ChainRequest request;
      if (f.status.isOk()) f.status = makeRequest(f.mesh, c, DataType::F32, request);
      ASSERT_TRUE(allRanksAgree(f.status.isOk())) << c.name << " on " << c.mesh << ": " << f.status.toString();
      for (int p = 0; read && p < worldSize(); ++p) moves = moves && (p == worldRank() || f.backend->movesBoxes(p));
      EXPECT_TRUE(read || !f.backend->movesBoxes((worldRank() + 1) % worldSize())) << "peerRead off still reads";
      std::string why;
      const bool ok = checkChain(*f.executor, request, why);
      EXPECT_TRUE(ok) << c.name << " on " << c.mesh << (read ? " reading boxes" : " packing boxes") << ": " << why;
      copied[read ? 0 : 1] = f.executor->localCopyBytes();
      const ChainPlan* plan = nullptr;
      ASSERT_TRUE(f.executor->plan(request, plan).isOk());
      std::unique_ptr<PlanCost> cost;
      ASSERT_TRUE(loadPlanCost(f.backend->defaultTopology(), cost, f.backend->movesBoxesEverywhere()).isOk());
      EXPECT_EQ(plan->fusedCost.value, cost->predict(plan->fused).value) << c.name << ": not priced as it moves";
      EXPECT_EQ(f.backend->movesBoxesEverywhere(), read && allRanksAgree(moves));
      fusedCost[read ? 0 : 1] = plan->fusedCost.value;
    }
    if (!allRanksAgree(moves)) continue;
    ++compared;
    EXPECT_LE(fusedCost[0], fusedCost[1]) << c.name << " priced dearer with its boxes read";
    cheaper += fusedCost[0] < fusedCost[1] ? 1 : 0;
    EXPECT_TRUE(allRanksAgree(copied[0] <= copied[1])) << c.name << " on " << c.mesh << ": " << copied[0]
                                                       << " bytes copied reading boxes, " << copied[1] << " packing";
    fewer += sumOverRanks(copied[0]) < sumOverRanks(copied[1]) ? 1 : 0;
  }
  if (compared == 0) GTEST_SKIP() << "no rank here reads its peers' memory (another host, or CHIMERA_MPI_PEER_READ=0)";
  EXPECT_GT(fewer, 0) << "no case copied fewer bytes reading boxes than packing them";
  EXPECT_GT(cheaper, 0) << "no case was priced cheaper reading boxes than packing them";
}

// A seeded random chain on a mesh of `world` ranks, valid at every op: each axis is R, P, S0 or
// S1 (a tensor dim sharded by one axis at most), and each op is one its axis's state allows
// (allreduce or reducescatter from P, slice from R, allgather or alltoall from a shard); on a
// mesh with a pipeline axis the tensor starts on stage 0 and is sent to stage 1 once; partial
// axes left at the end are reduced. No case (an empty mesh) for a world other than 2, 4 or 8.
ChainCase randomChain(std::mt19937& rng, int world) {
  struct Shape {
    std::string mesh;
    std::vector<std::string> axes;  // the axes the ops run on (not pp)
  };
  std::vector<Shape> meshes;
  if (world == 8)
    meshes = {{"a=2,b=4", {"a", "b"}},
              {"a=4,b=2", {"a", "b"}},
              {"a=2,b=2,c=2", {"a", "b", "c"}},
              {"pp=2,a=4", {"a"}},
              {"a=2,pp=2,b=2", {"a", "b"}}};
  if (world == 4) meshes = {{"a=2,b=2", {"a", "b"}}, {"a=4", {"a"}}, {"pp=2,a=2", {"a"}}, {"a=2,pp=2", {"a"}}};
  if (world == 2) meshes = {{"a=2", {"a"}}, {"pp=2,a=1", {"a"}}};
  if (meshes.empty()) return {};
  const auto pick = [&rng](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const Shape& m = meshes[pick(meshes.size())];
  const bool staged = m.mesh.find("pp=") != std::string::npos;
  const std::vector<std::string> starts = {"R", "P", "S0", "S1"};
  std::vector<std::string> state;
  for (std::size_t i = 0; i < m.axes.size(); ++i) {
    std::string s = starts[pick(starts.size())];
    for (std::size_t j = 0; j < i; ++j)
      if (s[0] == 'S' && state[j] == s) s = "R";
    state.push_back(s);
  }
  const auto layoutText = [&](const char* stage) {
    std::string text = staged ? std::string("pp=") + stage : "";
    for (std::size_t i = 0; i < m.axes.size(); ++i) {
      if (state[i] == "R") continue;
      text += (text.empty() ? "" : ",") + m.axes[i] + "=" + state[i];
    }
    return text.empty() ? m.axes[0] + "=R" : text;
  };
  ChainCase c{"random", m.mesh, layoutText("@0"), "", "", {16, 24, 8}};
  bool sent = false;
  const auto add = [&c](const std::string& op) { c.chain += (c.chain.empty() ? "" : ",") + op; };
  const int ops = 2 + static_cast<int>(pick(3));
  for (int o = 0; o < ops; ++o) {
    if (staged && !sent && pick(10) < 3) {
      add("send:pp");
      sent = true;
      continue;
    }
    const std::size_t i = pick(m.axes.size());
    std::vector<std::string> free;  // the dims no other axis shards
    for (const char* d : {"S0", "S1"}) {
      bool taken = false;
      for (std::size_t j = 0; j < state.size(); ++j) taken = taken || (j != i && state[j] == d);
      if (!taken) free.emplace_back(d);
    }
    const std::string& a = m.axes[i];
    std::string& s = state[i];
    if (s == "P") {
      if (!free.empty() && pick(10) < 6) {
        const std::string d = free[pick(free.size())];
        add("reducescatter:" + a + ":" + d.substr(1));
        s = d;
      } else {
        add("allreduce:" + a);
        s = "R";
      }
    } else if (s == "R") {
      if (free.empty()) continue;
      const std::string d = free[pick(free.size())];
      add("slice:" + a + ":" + d.substr(1));
      s = d;
    } else {
      std::string to;
      for (const std::string& d : free)
        if (d != s) to = d;
      if (!to.empty() && pick(2) == 0) {
        add("alltoall:" + a + ":" + s.substr(1) + ":" + to.substr(1));
        s = to;
      } else {
        add("allgather:" + a + ":" + s.substr(1));
        s = "R";
      }
    }
  }
  if (staged && !sent) add("send:pp");
  for (std::size_t i = 0; i < state.size(); ++i) {  // the reference reads whole values: no partial sum left
    if (state[i] != "P") continue;
    add("allreduce:" + m.axes[i]);
    state[i] = "R";
  }
  if (c.chain.empty()) return randomChain(rng, world);  // every op drawn was impossible: draw again
  c.consume = layoutText(staged ? "@1" : "@0");
  return c;
}

TEST(ExecutorChains, RandomChainsEqualBaselineAndReference) {
  std::mt19937 rng(2026);  // the same cases on every rank
  int checked = 0;
  for (int n = 0; n < 24; ++n) {
    const ChainCase c = randomChain(rng, worldSize());
    if (c.mesh.empty()) GTEST_SKIP() << "random chains are drawn for 2, 4 and 8 ranks";
    Fixture f = makeFixture(c.mesh);
    const DataType dtype = kDtypes[static_cast<std::size_t>(n) % std::size(kDtypes)];
    ChainRequest request;
    Status built = f.status.isOk() ? makeRequest(f.mesh, c, dtype, request) : f.status;
    const std::string what =
        c.chain + " from " + c.from + " on " + c.mesh + " (" + std::string(dataTypeName(dtype)) + ")";
    if (!allRanksAgree(built.isOk())) {
      ADD_FAILURE() << what << ": " << built.toString();
      return;
    }
    std::string why;
    const bool ok = checkChain(*f.executor, request, why);
    EXPECT_TRUE(ok) << what << ": " << why;
    if (!ok) return;
    ++checked;
  }
  EXPECT_EQ(checked, 24);
}

TEST(ExecutorCache, SecondRunPlansNothing) {
  const ChainCase c = chainCases(worldSize()).front();
  Fixture f = makeFixture(c.mesh);
  ChainRequest request;
  Status status = f.status.isOk() ? makeRequest(f.mesh, c, DataType::F32, request) : f.status;
  if (!allRanksAgree(status.isOk())) {
    ADD_FAILURE() << status.toString();
    return;
  }
  std::string why;
  EXPECT_TRUE(allRanksAgree(checkChain(*f.executor, request, why))) << why;
  const std::size_t passes = f.executor->planningPasses();
  const std::size_t cached = f.executor->cachedPlans();
  EXPECT_EQ(passes, 1u);
  EXPECT_TRUE(allRanksAgree(checkChain(*f.executor, request, why))) << why;
  EXPECT_EQ(f.executor->planningPasses(), passes);
  EXPECT_EQ(f.executor->cachedPlans(), cached);
  // Another dtype is another signature.
  request.spec.dtype = DataType::I32;
  EXPECT_TRUE(allRanksAgree(checkChain(*f.executor, request, why))) << why;
  EXPECT_EQ(f.executor->planningPasses(), passes + 1);
}

// A run given its own stream on a host backend: the MPI backend ignores the stream and the
// run succeeds on every rank (that each call receives the run's stream is checked in
// prepared_plan_test.cpp on a recording backend).
TEST(ExecutorStreams, RunsOnThePerCallStream) {
  const ChainCase c = chainCases(worldSize()).front();
  Fixture f = makeFixture(c.mesh);
  ChainRequest request;
  Status status = f.status.isOk() ? makeRequest(f.mesh, c, DataType::F32, request) : f.status;
  if (!allRanksAgree(status.isOk())) {
    ADD_FAILURE() << status.toString();
    return;
  }
  int callStream = 0;
  const int rank = worldRank();
  const auto inBytes = request.from.holds(rank) ? static_cast<std::size_t>(request.from.localBytes(request.spec)) : 0;
  const Layout& out = request.consume ? *request.consume : request.from;
  const auto outBytes = out.holds(rank) ? static_cast<std::size_t>(out.localBytes(request.spec)) : 0;
  std::vector<float> input(inBytes / 4 + 1, 1.0f), output(outBytes / 4 + 1);
  status = f.executor->runChain(request, ChainMode::Planned, inBytes ? input.data() : nullptr, inBytes,
                                outBytes ? output.data() : nullptr, outBytes, &callStream);
  EXPECT_TRUE(status.isOk()) << status.toString();
  EXPECT_TRUE(allRanksAgree(status.isOk()));
}

// With a limit of 3 prepared plans, three signatures (6 programs) keep only the 3 most
// recently run; running them all again prepares the freed ones anew (no new planning pass) and
// still gives the reference results.
TEST(ExecutorCache, LimitFreesTheLeastRecentlyRunPlans) {
  const ChainCase c = chainCases(worldSize()).front();
  Fixture f = makeFixture(c.mesh);
  ASSERT_TRUE(allRanksAgree(f.status.isOk())) << f.status.toString();
  EXPECT_EQ(f.executor->setPreparedPlanLimit(0).code(), StatusCode::InvalidArgument);
  ASSERT_TRUE(f.executor->setPreparedPlanLimit(3).isOk());
  std::vector<ChainRequest> requests;
  for (DataType dtype : kDtypes) {
    ChainRequest request;
    ASSERT_TRUE(allRanksAgree(makeRequest(f.mesh, c, dtype, request).isOk()));
    requests.push_back(request);
  }
  std::string why;
  for (int round = 0; round < 2; ++round) {
    for (const ChainRequest& request : requests) EXPECT_TRUE(checkChain(*f.executor, request, why)) << why;
    EXPECT_EQ(f.executor->cachedPlans(), 3u);
  }
  EXPECT_EQ(f.executor->planningPasses(), 3u);
  EXPECT_EQ(f.executor->evictedPlans(), 9u);  // 12 preparations (6 per round), 3 kept
  ASSERT_TRUE(f.executor->setPreparedPlanLimit(1).isOk());
  EXPECT_EQ(f.executor->cachedPlans(), 1u);
}

// A cost that prices plans by the negated bytes, so the planner keeps the chain as written.
class PreferBaseline final : public PlanCost {
 public:
  std::string_view name() const override { return "prefer-baseline"; }
  CostPrediction predict(const Plan& plan) const override {
    CostPrediction prediction;
    prediction.value = -static_cast<double>(planBytes(plan).total);
    return prediction;
  }
};

TEST(ExecutorModes, PlannedFollowsTheCostDecision) {
  const ChainCase c = chainCases(worldSize()).front();  // tp_sp: fused by bytes
  Fixture f = makeFixture(c.mesh);
  PreferBaseline cost;
  std::unique_ptr<Executor> executor;
  ChainRequest request;
  Status status = f.status.isOk() ? makeRequest(f.mesh, c, DataType::F32, request) : f.status;
  if (status.isOk()) executor = std::make_unique<Executor>(*f.backend, &cost);
  if (!allRanksAgree(status.isOk())) {
    ADD_FAILURE() << status.toString();
    return;
  }
  std::string why;
  EXPECT_TRUE(checkChain(*executor, request, why)) << why;
  const ChainPlan* plan = nullptr;
  status = executor->plan(request, plan);
  EXPECT_TRUE(allRanksAgree(status.isOk())) << status.toString();
  if (!status.isOk()) return;
  EXPECT_FALSE(plan->useFused) << plan->explain;
  // Baseline and fused prepared; Planned ran the baseline program (no third preparation).
  EXPECT_EQ(executor->cachedPlans(), 2u);
  const BytesCost bytes;
  Executor byBytesExecutor(*f.backend, &bytes);
  const ChainPlan* byBytes = nullptr;
  status = byBytesExecutor.plan(request, byBytes);
  EXPECT_TRUE(allRanksAgree(status.isOk())) << status.toString();
  if (status.isOk()) {
    EXPECT_TRUE(byBytes->useFused) << byBytes->explain;
  }
}

// Given no cost, an executor prices as a Session on its backend does: CHIMERA_TOPOLOGY when
// set, else the backend's model (host:N on MPI), whose margin keeps a small hand-off as
// written and fuses a large one; an unknown name fails every planning call on every rank.
TEST(ExecutorCost, TheBackendsModelUnlessTheEnvironmentNamesOne) {
  const int n = worldSize();
  Fixture f = makeFixture(n == 8 ? "pp=2,tp=4" : "tp=" + std::to_string(n));
  ASSERT_TRUE(allRanksAgree(f.status.isOk())) << f.status.toString();
  EXPECT_EQ(f.executor->cost().name(), n == 8 ? "host" : "host:" + std::to_string(n));
  ::setenv("CHIMERA_TOPOLOGY", "bytes", 1);
  EXPECT_EQ(Executor(*f.backend).cost().name(), "bytes");
  const BytesCost given;
  ::setenv("CHIMERA_TOPOLOGY", "no-such-topology", 1);
  EXPECT_EQ(&Executor(*f.backend, &given).cost(), &given);  // a given cost reads no environment
  Executor unknown(*f.backend);
  ::unsetenv("CHIMERA_TOPOLOGY");
  const ChainCase tpSp = chainCases(n).front();
  ChainRequest request;
  Status status = makeRequest(f.mesh, tpSp, DataType::F32, request);
  const ChainPlan* plan = nullptr;
  if (status.isOk()) status = unknown.plan(request, plan);
  EXPECT_TRUE(allRanksAgree(status.code() == StatusCode::InvalidArgument &&
                            status.message().find("CHIMERA_TOPOLOGY") != std::string::npos &&
                            status.message().find("no-such-topology") != std::string::npos))
      << status.toString();
  if (n != 8) return;
  // The SessionCost case through the executor: 6 KiB to hand off kept as written, 512 KiB fused.
  Executor byBytes(*f.backend, &given);
  for (const auto& [shape, pays] : {std::pair<std::vector<std::int64_t>, bool>{{32, 48}, false}, {{256, 512}, true}}) {
    const ChainCase c{"tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", shape};
    status = makeRequest(f.mesh, c, DataType::F32, request);
    const ChainPlan* host = nullptr;
    const ChainPlan* bytes = nullptr;
    if (status.isOk()) status = f.executor->plan(request, host);
    if (status.isOk()) status = byBytes.plan(request, bytes);
    std::string why;
    const bool same = status.isOk() && checkChain(*f.executor, request, why);
    ASSERT_TRUE(allRanksAgree(status.isOk() && same)) << status.toString() << why;
    EXPECT_EQ(host->useFused, pays) << shape[0] << "x" << shape[1] << ": " << host->explain;
    EXPECT_TRUE(bytes->useFused) << bytes->explain;
  }
}

}  // namespace
}  // namespace chimera::testing
