// SPDX-License-Identifier: Apache-2.0
// Hostile sizes and files: byte arithmetic that would overflow, profiles with absurd rank
// counts or endless contents, chains whose scale overflows, and costs that price nothing.
// Each is a clear InvalidArgument naming the value; none wraps, throws or runs out of memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/planning/topology.hpp"
#include "chimera/planning/topology_cost.hpp"
#include "core/checked_math.hpp"

namespace chimera {
namespace {

bool contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST(CheckedMath, BufferBytesRefusesWhatDoesNotFit) {
  std::size_t bytes = 0;
  EXPECT_TRUE(detail::bufferBytes(1024, 4, 8, "x", bytes).isOk());
  EXPECT_EQ(bytes, 32768u);
  EXPECT_TRUE(detail::bufferBytes(0, 8, 1, "x", bytes).isOk());
  EXPECT_EQ(bytes, 0u);
  for (const std::size_t count : {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / 8 + 1}) {
    const Status status = detail::bufferBytes(count, 8, 1, "allReduce count", bytes);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
    EXPECT_TRUE(contains(status, "allReduce count")) << status.message();
  }
  // Fits per rank, not times the group.
  const Status grouped = detail::bufferBytes(std::size_t{1} << 60, 2, 8, "allGather sendCount", bytes);
  EXPECT_EQ(grouped.code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(contains(grouped, "x 8 ranks")) << grouped.message();
  std::int64_t product = 0;
  EXPECT_FALSE(detail::checkedMul(std::int64_t{1} << 62, std::int64_t{4}, product));
  EXPECT_TRUE(detail::checkedMul(std::int64_t{1} << 31, std::int64_t{4}, product));
  EXPECT_EQ(product, std::int64_t{1} << 33);
}

std::string profile(long long ranks) {
  return R"({"format": "chimera-topology-1", "name": "big", "fabric": "shared-memory", "ranks": )" +
         std::to_string(ranks) + R"(, "ranks_per_domain": )" + std::to_string(ranks) +
         R"(, "local_link": {"alpha_s": 1e-6, "bandwidth_bytes_per_s": 1e10}})";
}

TEST(TopologyLimits, HugeRankCountsAreRefused) {
  for (const long long ranks : {600000000LL, 1000000000LL, 2147483647LL, (1LL << 20) + 1}) {
    Topology t;
    const Status status = topologyFromJson(profile(ranks), t);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << ranks;
    EXPECT_TRUE(contains(status, std::to_string(ranks))) << status.message();
  }
  Topology t;
  EXPECT_TRUE(topologyFromJson(profile(1 << 20), t).isOk());
}

TEST(TopologyLimits, EndlessFilesAreReadWithALimit) {
  Topology t;
  const Status status = loadTopology("/dev/zero", t);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(contains(status, "too large")) << status.message();
}

struct Problem {
  Mesh mesh;
  Layout from;
  Chain chain;
  Status status;
};

Problem problem(const std::string& from, const std::string& chain) {
  Problem p;
  p.status = Mesh::parse("pp=2,tp=4", 8, p.mesh);
  if (p.status.isOk()) p.status = Layout::parse(from, p.mesh, p.from);
  if (p.status.isOk()) p.status = Chain::parse(chain, p.mesh, p.chain);
  return p;
}

TEST(PlannerLimits, ByteCountsThatOverflowAreRefused) {
  Problem p = problem("pp=@0,tp=P", "allreduce:tp,send:pp");
  ASSERT_TRUE(p.status.isOk()) << p.status.toString();
  // 2^58 f64 elements: 2^61 bytes fit an int64, but not times 8 ranks and 2 ops.
  const TensorSpec spec{{std::int64_t{1} << 30, std::int64_t{1} << 28}, DataType::F64};
  ChainPlan plan;
  const Status status = planChain(spec, p.from, p.chain, std::nullopt, BytesCost(), plan);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(contains(status, "overflow")) << status.message();
}

TEST(PlannerLimits, ChainScaleOverflowIsRefused) {
  std::string ops = "allreduce:tp";
  for (int i = 1; i < 2100; ++i) ops += ",allreduce:tp";
  Problem p = problem("tp=R", ops);
  ASSERT_TRUE(p.status.isOk()) << p.status.toString();
  ChainTrace trace;
  const Status status = traceChain(p.from, p.chain, TensorSpec{{64, 64}, DataType::F32}, trace);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(contains(status, "2^63")) << status.message();
}

TEST(PlannerLimits, CostsThatPriceNothingAreAnError) {
  Problem p = problem("pp=@0,tp=P", "allreduce:tp,send:pp");
  ASSERT_TRUE(p.status.isOk()) << p.status.toString();
  // A topology of 2 ranks cannot price plans on 8.
  Topology small;
  ASSERT_TRUE(topologyFromJson(profile(2), small).isOk());
  ChainPlan plan;
  Status status =
      planChain(TensorSpec{{64, 64}, DataType::F32}, p.from, p.chain, std::nullopt, TopologyCost(small), plan);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(contains(status, "has 8 ranks but topology")) << status.message();
  // A link so slow that every time is infinite.
  Topology slow;
  ASSERT_TRUE(topologyFromJson(profile(8), slow).isOk());
  slow.local.bytesPerSecond = 1e-320;
  status = planChain(TensorSpec{{64, 64}, DataType::F32}, p.from, p.chain, std::nullopt, TopologyCost(slow), plan);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(contains(status, "cannot price")) << status.message();
}

}  // namespace
}  // namespace chimera
