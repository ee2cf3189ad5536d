// SPDX-License-Identifier: Apache-2.0
// Tests chains: parsing, and every op's precondition and effect on layouts.
#include <gtest/gtest.h>

#include "chimera/chain.hpp"

namespace chimera {
namespace {

struct Fixture {
  Mesh mesh;
  TensorSpec spec{{16, 8, 4}, DataType::F32};
  explicit Fixture(const char* text, int world) { EXPECT_TRUE(Mesh::parse(text, world, mesh).isOk()); }
  Layout layout(const char* text) const {
    Layout l;
    EXPECT_TRUE(Layout::parse(text, mesh, l).isOk()) << text;
    return l;
  }
  ChainOp op(const char* text) const {
    Chain chain;
    const Status s = Chain::parse(text, mesh, chain);
    EXPECT_TRUE(s.isOk()) << s.toString();
    return chain.ops.at(0);
  }
  // Applies `opText` to `from`; returns the output layout text or the error message.
  std::string apply(const char* from, const char* opText) const {
    OpEffect effect;
    const Status s = applyChainOp(layout(from), op(opText), spec, effect);
    return s.isOk() ? effect.output.toString() : "error: " + s.message();
  }
};

TEST(Chain, ParsesTheTextForm) {
  Fixture f("dp=2,pp=2,tp=2", 8);
  Chain chain;
  ASSERT_TRUE(Chain::parse("allreduce:tp, reducescatter:dp+tp:1,allgather:tp:0,alltoall:tp+dp:0:2,slice:dp:1,"
                           "send:pp,broadcast:tp:1",
                           f.mesh, chain)
                  .isOk());
  ASSERT_EQ(chain.ops.size(), 7u);
  EXPECT_EQ(chain.ops[3].kind, ChainOp::Kind::AllToAll);
  EXPECT_EQ(chain.ops[3].axes, AxisSet::fromBits(0b101));
  EXPECT_EQ(chain.ops[3].dim, 0);
  EXPECT_EQ(chain.ops[3].toDim, 2);
  EXPECT_EQ(chain.ops[6].root, 1);
  EXPECT_EQ(chain.toString(f.mesh),
            "allreduce:tp,reducescatter:dp+tp:1,allgather:tp:0,alltoall:dp+tp:0:2,slice:dp:1,"
            "send:pp,broadcast:tp:1");
}

TEST(Chain, RejectsMalformedText) {
  Fixture f("pp=2,tp=4", 8);
  Chain chain;
  EXPECT_NE(Chain::parse("allreduce:xx", f.mesh, chain).message().find("unknown mesh axis 'xx'"), std::string::npos);
  EXPECT_NE(Chain::parse("gather:tp:0", f.mesh, chain).message().find("unknown op 'gather'"), std::string::npos);
  EXPECT_NE(Chain::parse("allgather:tp", f.mesh, chain).message().find("takes AX:DIM"), std::string::npos);
  EXPECT_NE(Chain::parse("alltoall:tp:0", f.mesh, chain).message().find("AX:FROMDIM:TODIM"), std::string::npos);
  EXPECT_NE(Chain::parse("slice:tp:x", f.mesh, chain).message().find("malformed number 'x'"), std::string::npos);
  EXPECT_NE(Chain::parse("allreduce:tp+tp", f.mesh, chain).message().find("twice"), std::string::npos);
  EXPECT_NE(Chain::parse("send:pp:prev", f.mesh, chain).message().find("'forward' or 'backward', not 'prev'"),
            std::string::npos);
  EXPECT_NE(Chain::parse("send:pp:backward:1", f.mesh, chain).message().find("takes AX[:forward|:backward]"),
            std::string::npos);
  ASSERT_TRUE(Chain::parse("send:pp:forward,send:pp:backward", f.mesh, chain).isOk());
  EXPECT_EQ(chain.ops[0].stageStep, 1);
  EXPECT_EQ(chain.ops[1].stageStep, -1);
  EXPECT_EQ(chain.toString(f.mesh), "send:pp,send:pp:backward");
  EXPECT_FALSE(Chain::parse("", f.mesh, chain).isOk());
  EXPECT_FALSE(Chain::parse("allreduce:tp,", f.mesh, chain).isOk());
}

TEST(Chain, AppliesEachOpToTheLayout) {
  Fixture f("dp=2,tp=4", 8);
  EXPECT_EQ(f.apply("tp=P", "allreduce:tp"), "dp=R");
  EXPECT_EQ(f.apply("dp=P,tp=P", "reducescatter:dp+tp:0"), "dp+tp=S0");
  EXPECT_EQ(f.apply("dp=S0,tp=S0", "allgather:tp:0"), "dp=S0");
  EXPECT_EQ(f.apply("dp+tp=S0", "alltoall:dp+tp:0:1"), "dp+tp=S1");
  EXPECT_EQ(f.apply("dp=S1", "slice:tp:1"), "dp+tp=S1");
  EXPECT_EQ(f.apply("tp=S0", "slice:dp:0"), "tp+dp=S0");  // dp nests inside tp's shard
  EXPECT_EQ(f.apply("dp=@1", "broadcast:dp:1"), "dp=R");
}

TEST(Chain, ChecksPreconditions) {
  Fixture f("pp=2,tp=4", 8);
  EXPECT_EQ(f.apply("tp=S0", "allreduce:tp"), "error: allreduce:tp needs tp to be P or R, but the layout is tp=S0");
  EXPECT_EQ(f.apply("tp=S0", "allgather:tp:1"),
            "error: allgather:tp:1 needs tp to be the innermost split of dim 1, but the layout is tp=S0");
  EXPECT_EQ(f.apply("pp+tp=S0", "allgather:pp:0"),
            "error: allgather:pp:0 needs pp to be the innermost split of dim 0, but the layout is pp+tp=S0");
  EXPECT_EQ(f.apply("tp=P", "slice:tp:0"), "error: slice:tp:0 needs tp to be R, but the layout is tp=P");
  EXPECT_EQ(f.apply("pp=@1", "send:pp"), "error: send:pp: stage 1 is the last stage of pp (size 2)");
  EXPECT_EQ(f.apply("pp=@0", "send:pp:backward"), "error: send:pp:backward: stage 0 is the first stage of pp (size 2)");
  EXPECT_EQ(f.apply("pp=@1,tp=S0", "send:pp:backward"), "pp=@0,tp=S0");
  EXPECT_EQ(f.apply("pp=@0", "send:pp:forward"), "pp=@1");
  EXPECT_EQ(f.apply("tp=P", "send:pp"), "error: send:pp needs pp to be a stage placement @k, but the layout is tp=P");
  EXPECT_EQ(f.apply("pp=@0,tp=P", "allreduce:pp+tp"),
            "error: allreduce:pp+tp runs over pp, but the tensor lives on stage 0 of pp only (layout pp=@0,tp=P)");
  EXPECT_EQ(f.apply("pp=@0", "broadcast:pp:1"),
            "error: broadcast:pp:1 needs pp to be R or @1 (the root's coordinate), but the layout is pp=@0");
  EXPECT_EQ(f.apply("tp=S0", "alltoall:tp:0:0"), "error: alltoall:tp:0:0 moves a split from dim 0 to itself");
  EXPECT_NE(f.apply("R", "slice:tp:3").find("names dim 3 but the tensor"), std::string::npos);
  // 4 rows of the 16x8x4 tensor per tp rank; a further split by 4 along dim 2 leaves 1.
  EXPECT_NE(f.apply("tp=S2", "slice:pp:2").find("not divisible"), std::string::npos);
}

TEST(Chain, SumOverReplicatedAxesScales) {
  Fixture f("dp=2,tp=4", 8);
  OpEffect effect;
  ASSERT_TRUE(applyChainOp(f.layout("tp=P"), f.op("allreduce:dp+tp"), f.spec, effect).isOk());
  EXPECT_EQ(effect.scale, 2);
  ASSERT_TRUE(applyChainOp(f.layout("tp=P(max)"), f.op("allreduce:dp+tp"), f.spec, effect).isOk());
  EXPECT_EQ(effect.scale, 1);
  EXPECT_EQ(effect.op, ReduceOp::Max);
  EXPECT_EQ(applyChainOp(f.layout("tp=P(prod)"), f.op("allreduce:dp+tp"), f.spec, effect).code(),
            StatusCode::Unsupported);
}

TEST(Chain, TraceNamesTheFailingOp) {
  Fixture f("pp=2,tp=4", 8);
  Chain chain;
  ASSERT_TRUE(Chain::parse("allreduce:tp,allreduce:tp", f.mesh, chain).isOk());
  ChainTrace trace;
  ASSERT_TRUE(traceChain(f.layout("tp=P"), chain, f.spec, trace).isOk());
  EXPECT_EQ(trace.scale, 4);  // the second AllReduce sums 4 identical copies
  ASSERT_TRUE(Chain::parse("allreduce:tp,allgather:tp:0", f.mesh, chain).isOk());
  const Status s = traceChain(f.layout("tp=P"), chain, f.spec, trace);
  EXPECT_EQ(s.message().rfind("op 2 (allgather:tp:0): ", 0), 0u) << s.message();
}

TEST(Chain, ConsumerMustReadWhatTheChainLeaves) {
  Fixture f("pp=2,tp=4", 8);
  EXPECT_TRUE(checkConsumable(f.layout("tp=R"), f.layout("tp=S1"), f.spec).isOk());
  EXPECT_NE(checkConsumable(f.layout("tp=S0"), f.layout("tp=R"), f.spec).message().find("holds only"),
            std::string::npos);
  EXPECT_NE(checkConsumable(f.layout("pp=@0"), f.layout("pp=@1"), f.spec).message().find("leaves the tensor at @0"),
            std::string::npos);
  EXPECT_FALSE(checkConsumable(f.layout("tp=P"), f.layout("tp=R"), f.spec).isOk());
}

}  // namespace
}  // namespace chimera
