// SPDX-License-Identifier: Apache-2.0
// Tests layouts, tensor specs and boxes: parsing, canonical text, rank boxes, stages, bad input.
#include <gtest/gtest.h>

#include "chimera/layout.hpp"

namespace chimera {
namespace {

Mesh meshOf(const char* text, int world) {
  Mesh mesh;
  EXPECT_TRUE(Mesh::parse(text, world, mesh).isOk());
  return mesh;
}

Layout parseOk(const char* text, const Mesh& mesh) {
  Layout layout;
  const Status status = Layout::parse(text, mesh, layout);
  EXPECT_TRUE(status.isOk()) << text << ": " << status.toString();
  return layout;
}

std::string parseError(const char* text, const Mesh& mesh) {
  Layout layout;
  const Status status = Layout::parse(text, mesh, layout);
  EXPECT_FALSE(status.isOk()) << text;
  return status.message();
}

TEST(Layout, ParsesEveryPlacementAndPrintsCanonically) {
  const Mesh mesh = meshOf("pp=2,dp=2,tp=4", 16);
  const Layout l = parseOk("pp=@1, tp=P(max), dp=S1", mesh);
  EXPECT_TRUE(l.placement(0).isStage());
  EXPECT_EQ(l.placement(0).stage, 1);
  EXPECT_EQ(l.placement(1), Placement::shard(1));
  EXPECT_EQ(l.placement(2), Placement::partial(ReduceOp::Max));
  EXPECT_EQ(l.toString(), "pp=@1,dp=S1,tp=P(max)");
  EXPECT_EQ(parseOk(l.toString().c_str(), mesh), l);
  EXPECT_EQ(parseOk("tp=P", mesh).toString(), "tp=P");
  EXPECT_EQ(parseOk("R", mesh), Layout::replicated(mesh));
  EXPECT_EQ(parseOk("tp=R", mesh).toString(), "pp=R");
}

TEST(Layout, NestedSplitsOfOneDimHaveOneCanonicalForm) {
  const Mesh mesh = meshOf("dp=2,tp=4", 8);
  const Layout nested = parseOk("dp=S0,tp=S0", mesh);
  EXPECT_EQ(nested, parseOk("dp+tp=S0", mesh));
  EXPECT_EQ(nested, parseOk("tp=S0,dp=S0", mesh));  // separate entries nest in mesh order
  EXPECT_EQ(nested.toString(), "dp+tp=S0");
  EXPECT_EQ(nested.splitAxes(0), (std::vector<int>{0, 1}));
  // A group nests in written order: tp outer here, a different layout.
  const Layout tpOuter = parseOk("tp+dp=S0", mesh);
  EXPECT_NE(tpOuter, nested);
  EXPECT_EQ(tpOuter.toString(), "tp+dp=S0");
  EXPECT_EQ(parseOk(tpOuter.toString().c_str(), mesh), tpOuter);
}

TEST(Layout, BoxesFollowNestingOrder) {
  const Mesh mesh = meshOf("dp=2,tp=4", 8);
  TensorSpec spec{{16, 6}, DataType::F32};
  const Layout dpOuter = parseOk("dp+tp=S0", mesh);
  const Layout tpOuter = parseOk("tp+dp=S0", mesh);
  ASSERT_TRUE(dpOuter.validate(spec).isOk());
  // rank 6 = (dp 1, tp 2): dp outer -> index 1*4+2 = 6; tp outer -> index 2*2+1 = 5.
  EXPECT_EQ(dpOuter.rankBox(6, spec).offset, (std::vector<std::int64_t>{12, 0}));
  EXPECT_EQ(tpOuter.rankBox(6, spec).offset, (std::vector<std::int64_t>{10, 0}));
  EXPECT_EQ(dpOuter.localShape(spec), (std::vector<std::int64_t>{2, 6}));
  EXPECT_EQ(dpOuter.localBytes(spec), 48);
}

TEST(Layout, StagesAndHolders) {
  const Mesh mesh = meshOf("pp=2,tp=4", 8);
  TensorSpec spec{{8, 8}, DataType::BF16};
  const Layout l = parseOk("pp=@1,tp=S1", mesh);
  EXPECT_EQ(l.holders(), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_FALSE(l.holds(0));
  EXPECT_TRUE(l.rankBox(0, spec).empty());
  EXPECT_EQ(l.rankBox(5, spec).toString(), "[0:8,2:4]");
}

TEST(Layout, RejectsBadTextWithClearMessages) {
  const Mesh mesh = meshOf("pp=2,tp=4", 8);
  EXPECT_NE(parseError("xx=R", mesh).find("unknown mesh axis 'xx'"), std::string::npos);
  EXPECT_NE(parseError("tp=S0,tp=R", mesh).find("placed twice"), std::string::npos);
  EXPECT_NE(parseError("tp=Q", mesh).find("malformed placement 'Q'"), std::string::npos);
  EXPECT_NE(parseError("tp", mesh).find("expected AXES=PLACEMENT"), std::string::npos);
  EXPECT_NE(parseError("pp=@2", mesh).find("stage 2 is out of range"), std::string::npos);
  EXPECT_NE(parseError("pp=P,tp=P(max)", mesh).find("different reduce ops"), std::string::npos);
  EXPECT_NE(parseError("pp+tp=@0", mesh).find("names one axis"), std::string::npos);
  EXPECT_NE(parseError("", mesh).find("empty layout"), std::string::npos);
  EXPECT_NE(parseError("tp=P(foo)", mesh).find("foo"), std::string::npos);
}

TEST(Layout, RejectsUnevenSplits) {
  const Mesh mesh = meshOf("tp=4", 4);
  const Layout l = parseOk("tp=S0", mesh);
  const Status status = l.validate(TensorSpec{{10}, DataType::F32});
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("dim 0 of size 10 is not divisible by 4 shards over tp"), std::string::npos);
  EXPECT_NE(parseOk("tp=S2", mesh).validate(TensorSpec{{8, 8}, DataType::F32}).message().find("2 dimensions"),
            std::string::npos);
}

TEST(TensorSpec, ParsesShapes) {
  std::vector<std::int64_t> shape;
  ASSERT_TRUE(TensorSpec::parseShape("8192,2048", shape).isOk());
  EXPECT_EQ(shape, (std::vector<std::int64_t>{8192, 2048}));
  ASSERT_TRUE(TensorSpec::parseShape("4x2x3", shape).isOk());
  EXPECT_EQ(shape, (std::vector<std::int64_t>{4, 2, 3}));
  EXPECT_FALSE(TensorSpec::parseShape("8,,2", shape).isOk());
  EXPECT_FALSE(TensorSpec::parseShape("0,2", shape).isOk());
  EXPECT_FALSE(TensorSpec::parseShape("-3", shape).isOk());
  EXPECT_FALSE(TensorSpec::parseShape("1,2,3,4,5,6,7,8,9", shape).isOk());
  EXPECT_EQ((TensorSpec{{4, 2}, DataType::BF16}).bytes(), 16);
}

TEST(Box, IntersectAndContain) {
  const Box a{{0, 4}, {8, 4}};
  const Box b{{6, 0}, {4, 6}};
  EXPECT_EQ(a.intersect(b), (Box{{6, 4}, {2, 2}}));
  EXPECT_TRUE(a.intersect(Box{{8, 0}, {1, 1}}).empty());
  EXPECT_TRUE(a.contains(Box{{1, 5}, {2, 2}}));
  EXPECT_FALSE(a.contains(b));
  EXPECT_EQ(a.relativeTo({0, 4}).offset, (std::vector<std::int64_t>{0, 0}));
}

}  // namespace
}  // namespace chimera
