// SPDX-License-Identifier: Apache-2.0
// The one list of operation kinds: keywords, the subsets each layer uses, and that every
// layer's names and parsers come from it.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "chimera/chain.hpp"
#include "chimera/op_kind.hpp"
#include "chimera/planning/comm_program.hpp"
#include "chimera/planning/plan.hpp"

namespace chimera {
namespace {

std::set<std::string> keywordsIn(OpUse use) {
  std::set<std::string> out;
  for (const OpKindInfo& info : kOpKinds) {
    if (opKindUsedIn(info.kind, use)) out.insert(std::string(info.keyword));
  }
  return out;
}

TEST(OpKinds, EachLayerUsesItsSubset) {
  EXPECT_EQ(keywordsIn(kOpInChain), (std::set<std::string>{"allreduce", "reducescatter", "allgather", "alltoall",
                                                           "broadcast", "send", "slice"}));
  EXPECT_EQ(keywordsIn(kOpInPlan), (std::set<std::string>{"allreduce", "reducescatter", "allgather", "alltoall",
                                                          "broadcast", "send", "manytomany", "localcopy", "scale"}));
  EXPECT_EQ(keywordsIn(kOpInProgram),
            (std::set<std::string>{"allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "manytomany"}));
  EXPECT_EQ(keywordsIn(kOpOnBackend),
            (std::set<std::string>{"allreduce", "reducescatter", "allgather", "alltoall", "broadcast"}));
}

TEST(OpKinds, KeywordsAreUniqueAndFoundOnlyWhereUsed) {
  std::set<std::string_view> seen;
  for (const OpKindInfo& info : kOpKinds) {
    EXPECT_TRUE(seen.insert(info.keyword).second) << info.keyword;
    for (OpUse use : {kOpInChain, kOpInPlan, kOpInProgram, kOpOnBackend}) {
      OpKind found = OpKind::Scale;
      EXPECT_EQ(findOpKind(info.keyword, use, found), opKindUsedIn(info.kind, use)) << info.keyword;
      if (opKindUsedIn(info.kind, use)) {
        EXPECT_EQ(found, info.kind);
      }
    }
  }
  OpKind untouched = OpKind::Slice;
  EXPECT_FALSE(findOpKind("gather", kOpInChain, untouched));
  EXPECT_EQ(untouched, OpKind::Slice);
}

TEST(OpKinds, ReductionAndInPlaceFlags) {
  for (const OpKindInfo& info : kOpKinds) {
    EXPECT_EQ(info.reduces, info.kind == OpKind::AllReduce || info.kind == OpKind::ReduceScatter) << info.keyword;
  }
  EXPECT_TRUE(opKindInfo(OpKind::Broadcast).inPlace);
  EXPECT_FALSE(opKindInfo(OpKind::AllToAll).inPlace);
  EXPECT_EQ(opKindInfo(OpKind::AllGather).call, "allGather");
}

TEST(OpKinds, LayerNamesAndParsersComeFromTheTable) {
  for (const OpKindInfo& info : kOpKinds) {
    EXPECT_EQ(chainOpKindName(info.kind), info.keyword);
    EXPECT_EQ(planStepKindName(info.kind), info.keyword);
    EXPECT_EQ(opKindName(info.kind), info.keyword);
    OpKind parsed = OpKind::ManyToMany;
    EXPECT_EQ(parseStepKind(info.keyword, parsed).isOk(), opKindUsedIn(info.kind, kOpInProgram)) << info.keyword;
  }
  OpKind parsed = OpKind::AllReduce;
  const Status unknown = parseStepKind("slice", parsed);
  EXPECT_EQ(
      unknown.message(),
      "unknown step kind 'slice' (expected allreduce, reducescatter, allgather, alltoall, broadcast or manytomany)");
  EXPECT_EQ(opKindKeywords(kOpInChain), "allreduce, reducescatter, allgather, alltoall, broadcast, send or slice");
}

TEST(OpKinds, AProgramStepOfAKindOutsidePrograms) {
  CommStep step = CommStep::collective(OpKind::Send, {{0, 1}}, 64);
  const Status status = validateStep(step, 2);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("send is not a step of a communication program"), std::string::npos)
      << status.message();
}

TEST(OpKinds, AChainRefusesAKindOutsideChains) {
  Mesh mesh;
  ASSERT_TRUE(Mesh::create({{"tp", 2}}, 2, mesh).isOk());
  Layout layout;
  ASSERT_TRUE(Layout::parse("tp=P", mesh, layout).isOk());
  TensorSpec spec{{4}, DataType::F32};
  ChainOp op;
  op.kind = OpKind::ManyToMany;
  op.axes = mesh.allAxes();
  OpEffect effect;
  const Status status = applyChainOp(layout, op, spec, effect);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("manytomany is not an op of a chain"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace chimera
