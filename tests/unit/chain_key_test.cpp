// SPDX-License-Identifier: Apache-2.0
// The executor's chain cache key: equal requests share a key, and requests that differ in any
// part the plan depends on (shape, dtype, start layout, the nesting order of a split, an op's
// fields, the consumed layout) do not.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "exec/signature.hpp"

namespace chimera::detail {
namespace {

class ChainKeyTest : public testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(Mesh::parse("dp=2,tp=4", 8, mesh_).isOk()); }
  ChainRequest request(const char* from, const char* chain, const char* consume) const {
    ChainRequest r;
    r.spec = {{64, 32}, DataType::F32};
    EXPECT_TRUE(Layout::parse(from, mesh_, r.from).isOk()) << from;
    EXPECT_TRUE(Chain::parse(chain, mesh_, r.chain).isOk()) << chain;
    if (consume != nullptr) {
      Layout c;
      EXPECT_TRUE(Layout::parse(consume, mesh_, c).isOk()) << consume;
      r.consume = c;
    }
    return r;
  }
  Mesh mesh_;
};

TEST_F(ChainKeyTest, EqualRequestsShareTheKeyAndItsHash) {
  const ChainKey a = chainKey(request("tp=P", "allreduce:tp", "tp=S0"));
  const ChainKey b = chainKey(request("tp=P", "allreduce:tp", "tp=S0"));
  EXPECT_EQ(a, b);
  EXPECT_EQ(ChainKeyHash()(a), ChainKeyHash()(b));
}

TEST_F(ChainKeyTest, EveryPartOfTheRequestChangesTheKey) {
  const ChainRequest base = request("dp+tp=S0", "allgather:tp:0", "dp=S0");
  std::vector<ChainRequest> others = {
      request("tp+dp=S0", "allgather:tp:0", "dp=S0"),  // the nesting order of dim 0's split
      request("dp+tp=S0", "allgather:tp:0", nullptr),  // no consume declaration
      request("dp+tp=S0", "allgather:tp:0", "dp=S1"),  // another consumed layout
      request("dp+tp=S0", "allgather:dp+tp:0", "dp=S0"),
  };
  ChainRequest wider = base;
  wider.spec.shape[1] = 48;
  others.push_back(wider);
  ChainRequest doubles = base;
  doubles.spec.dtype = DataType::F64;
  others.push_back(doubles);
  const ChainKey key = chainKey(base);
  for (std::size_t i = 0; i < others.size(); ++i) EXPECT_FALSE(chainKey(others[i]) == key) << "variant " << i;
}

}  // namespace
}  // namespace chimera::detail
