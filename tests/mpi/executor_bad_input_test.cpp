// SPDX-License-Identifier: Apache-2.0
// Bad input to the executor: a clear error on every rank and no hang, and the executor
// still works afterwards.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "chimera/executor.hpp"
#include "chimera/mpi_backend.hpp"
#include "core/check.hpp"
#include "executor_test_support.hpp"

namespace chimera::testing {
namespace {

struct World {
  Mesh mesh;
  std::unique_ptr<Backend> backend;
  Status status;
};

// pp=2,tp=W/2 (tp=1 on 2 ranks).
World makeWorld() {
  World w;
  w.status = Mesh::parse("pp=2,tp=" + std::to_string(worldSize() / 2), worldSize(), w.mesh);
  if (w.status.isOk()) w.status = createMpiBackend(w.mesh, w.backend);
  return w;
}

// A request on `mesh` from text; InvalidArgument from the parsers is returned as is.
Status request(const Mesh& mesh, const std::string& from, const std::string& chain, ChainRequest& out) {
  out.spec = TensorSpec{{16, 8}, DataType::F32};
  CHIMERA_RETURN_IF_ERROR(Layout::parse(from, mesh, out.from));
  return Chain::parse(chain, mesh, out.chain);
}

bool contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// The executor still plans and runs a good chain correctly.
bool stillWorks(Executor& executor, const Mesh& mesh) {
  ChainRequest good;
  Status status = request(mesh, "tp=P", "allreduce:tp", good);
  const int rank = worldRank();
  const auto input = makeInput(good.from, good.spec, rank);
  auto output = makeBuffer(static_cast<std::size_t>(good.spec.numElements()), DataType::F32);
  if (status.isOk()) {
    status = executor.runChain(good, ChainMode::Planned, input.data(), static_cast<std::size_t>(good.spec.bytes()),
                               output.data(), static_cast<std::size_t>(good.spec.bytes()));
  }
  if (!allRanksAgree(status.isOk())) return false;
  const int members = mesh.groupSize(good.from.axesOfKind(Placement::Kind::Partial));
  return allRanksAgree(countWrong(output.data(),
                                  good.from.withReplicated(good.from.axesOfKind(Placement::Kind::Partial)), good.spec,
                                  rank, members, 1.0) == 0);
}

TEST(ExecutorBadInput, ChainOnAnotherMesh) {
  World w = makeWorld();
  if (!allRanksAgree(w.status.isOk())) {
    ADD_FAILURE() << w.status.toString();
    return;
  }
  Executor executor(*w.backend);
  // A name the mesh lacks is refused by the parser.
  ChainRequest bad;
  Status parsed = request(w.mesh, "tp=P", "allreduce:ep", bad);
  EXPECT_EQ(parsed.code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(contains(parsed, "ep")) << parsed.toString();
  // A request built on another mesh (3 axes) is refused by the executor on every rank.
  Mesh other;
  Status status = Mesh::parse("dp=1,pp=2,tp=" + std::to_string(worldSize() / 2), worldSize(), other);
  if (status.isOk()) status = request(other, "dp=R,tp=P", "allreduce:dp+tp", bad);
  if (!allRanksAgree(status.isOk())) {
    ADD_FAILURE() << status.toString();
    return;
  }
  const ChainPlan* plan = nullptr;
  status = executor.plan(bad, plan);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << status.toString();
  EXPECT_TRUE(contains(status, "mesh")) << status.toString();
  // The layouts on this mesh, but the chain from the other one: op axes outside the mesh.
  ChainRequest mixed;
  status = request(w.mesh, "tp=P", "allreduce:tp", mixed);
  mixed.chain = bad.chain;
  if (status.isOk()) status = executor.plan(mixed, plan);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << status.toString();
  EXPECT_TRUE(contains(status, "chain op 1")) << status.toString();
  EXPECT_TRUE(stillWorks(executor, w.mesh));
}

TEST(ExecutorBadInput, BuffersTooSmall) {
  World w = makeWorld();
  if (!allRanksAgree(w.status.isOk())) {
    ADD_FAILURE() << w.status.toString();
    return;
  }
  Executor executor(*w.backend);
  ChainRequest req;
  Status status = request(w.mesh, "tp=P", "allreduce:tp", req);
  const auto bytes = static_cast<std::size_t>(req.spec.bytes());
  auto buffer = makeBuffer(static_cast<std::size_t>(req.spec.numElements()), DataType::F32);
  if (status.isOk()) status = executor.runChain(req, ChainMode::Fused, buffer.data(), bytes - 4, buffer.data(), bytes);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << status.toString();
  EXPECT_TRUE(contains(status, std::to_string(bytes - 4)) && contains(status, std::to_string(bytes)))
      << status.toString();
  status = executor.runChain(req, ChainMode::Baseline, buffer.data(), bytes, nullptr, 0);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << status.toString();
  EXPECT_TRUE(contains(status, "null output")) << status.toString();
  EXPECT_TRUE(stillWorks(executor, w.mesh));
}

// With CHIMERA_CHECK_ARGS=1 the executor agrees on the buffer check: one rank's small
// buffer fails every rank instead of leaving the others in a collective.
TEST(ExecutorBadInput, OneRankWithASmallBufferWhenChecking) {
  setenv("CHIMERA_CHECK_ARGS", "1", 1);
  World w = makeWorld();
  std::unique_ptr<Executor> executor;
  if (w.status.isOk()) executor = std::make_unique<Executor>(*w.backend);
  unsetenv("CHIMERA_CHECK_ARGS");
  if (!allRanksAgree(w.status.isOk())) {
    ADD_FAILURE() << w.status.toString();
    return;
  }
  const bool odd = worldRank() == 1;
  ChainRequest req;
  Status status = request(w.mesh, "tp=P", "allreduce:tp", req);
  const auto bytes = static_cast<std::size_t>(req.spec.bytes());
  auto buffer = makeBuffer(static_cast<std::size_t>(req.spec.numElements()), DataType::F32);
  auto output = makeBuffer(static_cast<std::size_t>(req.spec.numElements()), DataType::F32);
  if (status.isOk()) {
    status = executor->runChain(req, ChainMode::Fused, buffer.data(), odd ? bytes / 2 : bytes, output.data(), bytes);
  }
  EXPECT_EQ(status.code(), odd ? StatusCode::InvalidArgument : StatusCode::Mismatch) << status.toString();
  EXPECT_TRUE(contains(status, odd ? std::to_string(bytes / 2) : " failed to ")) << status.toString();
  EXPECT_TRUE(stillWorks(*executor, w.mesh));
}

TEST(ExecutorBadInput, RankWithADifferentChain) {
  World w = makeWorld();
  if (!allRanksAgree(w.status.isOk())) {
    ADD_FAILURE() << w.status.toString();
    return;
  }
  Executor executor(*w.backend);
  const bool odd = worldRank() == 1;
  ChainRequest req;
  Status status = request(w.mesh, "tp=P", odd ? "reducescatter:tp:1" : "allreduce:tp", req);
  if (!allRanksAgree(status.isOk())) {
    ADD_FAILURE() << status.toString();
    return;
  }
  auto buffer = makeBuffer(static_cast<std::size_t>(req.spec.numElements()), DataType::F32);
  auto output = makeBuffer(static_cast<std::size_t>(req.spec.numElements()), DataType::F32);
  const auto bytes = static_cast<std::size_t>(req.spec.bytes());
  status = executor.runChain(req, ChainMode::Fused, buffer.data(), bytes, output.data(), bytes);
  EXPECT_EQ(status.code(), StatusCode::Mismatch) << status.toString();
  EXPECT_TRUE(contains(status, "disagree")) << status.toString();
  // A chain that fails to plan on one rank only: that rank says why, the others mismatch.
  status = request(w.mesh, odd ? "tp=S0" : "tp=P", odd ? "allgather:pp:0" : "allreduce:tp", req);
  if (status.isOk()) status = executor.runChain(req, ChainMode::Fused, buffer.data(), bytes, output.data(), bytes);
  EXPECT_EQ(status.code(), odd ? StatusCode::InvalidArgument : StatusCode::Mismatch) << status.toString();
  EXPECT_EQ(executor.cachedPlans(), 0u);
  EXPECT_TRUE(stillWorks(executor, w.mesh));
}

TEST(ExecutorBadInput, RedistributionDiffersOrFailsOnOneRank) {
  World w = makeWorld();
  if (!allRanksAgree(w.status.isOk())) {
    ADD_FAILURE() << w.status.toString();
    return;
  }
  Executor executor(*w.backend);
  const bool odd = worldRank() == 1;
  const TensorSpec spec{{16, 8}, DataType::F32};
  Layout from;
  Layout to;
  Status status = Layout::parse("tp=S0", w.mesh, from);
  if (status.isOk()) status = Layout::parse(odd ? "tp=S1" : "R", w.mesh, to);
  auto buffer = makeBuffer(static_cast<std::size_t>(spec.numElements()), DataType::F32);
  auto output = makeBuffer(static_cast<std::size_t>(spec.numElements()), DataType::F32);
  const auto bytes = static_cast<std::size_t>(spec.bytes());
  if (status.isOk()) status = executor.redistribute(spec, from, to, buffer.data(), bytes, output.data(), bytes);
  EXPECT_EQ(status.code(), StatusCode::Mismatch) << status.toString();
  // Unreachable on rank 1 only (partial where the start is not).
  if (odd) status = Layout::parse("tp=P", w.mesh, to);
  if (!odd) status = Layout::parse("tp=S1", w.mesh, to);
  if (status.isOk()) status = executor.redistribute(spec, from, to, buffer.data(), bytes, output.data(), bytes);
  EXPECT_EQ(status.code(), odd ? StatusCode::InvalidArgument : StatusCode::Mismatch) << status.toString();
  EXPECT_EQ(executor.cachedPlans(), 0u);
  EXPECT_TRUE(stillWorks(executor, w.mesh));
}

TEST(ExecutorBadInput, MalformedExplicitPlan) {
  World w = makeWorld();
  if (!allRanksAgree(w.status.isOk())) {
    ADD_FAILURE() << w.status.toString();
    return;
  }
  Executor executor(*w.backend);
  Layout layout;
  Status status = Layout::parse("tp=S0", w.mesh, layout);
  Plan plan;
  plan.spec = TensorSpec{{16, 8}, DataType::F32};
  plan.addBuffer(layout);
  plan.addBuffer(layout);
  PlanStep step;
  step.kind = PlanStep::Kind::Scale;
  step.input = Plan::kInput;
  step.output = Plan::kInput;
  step.scale = 2;
  plan.steps.push_back(step);
  auto buffer = makeBuffer(static_cast<std::size_t>(plan.spec.numElements()), DataType::F32);
  const auto bytes = static_cast<std::size_t>(plan.spec.bytes());
  if (status.isOk()) status = executor.run(plan, buffer.data(), bytes, buffer.data(), bytes);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << status.toString();
  EXPECT_TRUE(contains(status, "writes the input")) << status.toString();
  plan.steps[0].output = 7;
  status = executor.run(plan, buffer.data(), bytes, buffer.data(), bytes);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << status.toString();
  EXPECT_TRUE(contains(status, "the plan has 2")) << status.toString();
  // Fails on stage 1 only (it holds the output of a local copy but not the input): those
  // ranks say why, stage 0 ranks get Mismatch, nobody runs the plan.
  Layout stage0;
  Layout stage1;
  status = Layout::parse("pp=@0,tp=S0", w.mesh, stage0);
  if (status.isOk()) status = Layout::parse("pp=@1,tp=S0", w.mesh, stage1);
  plan.buffers[0].layout = stage0;
  plan.buffers[1].layout = stage1;
  plan.steps[0].kind = PlanStep::Kind::LocalCopy;
  plan.steps[0].output = Plan::kOutput;
  const bool second = stage1.holds(worldRank());
  if (status.isOk()) status = executor.run(plan, buffer.data(), bytes, buffer.data(), bytes);
  EXPECT_EQ(status.code(), second ? StatusCode::InvalidArgument : StatusCode::Mismatch) << status.toString();
  EXPECT_TRUE(contains(status, second ? "not the input" : " failed to ")) << status.toString();
  EXPECT_EQ(executor.cachedPlans(), 0u);
}

}  // namespace
}  // namespace chimera::testing
