// SPDX-License-Identifier: Apache-2.0
// Tests meshes: parsing, validation, axis groups.
#include <gtest/gtest.h>

#include "chimera/mesh.hpp"

namespace chimera {
namespace {

Mesh parseOk(const char* text, int world) {
  Mesh mesh;
  const Status status = Mesh::parse(text, world, mesh);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return mesh;
}

TEST(Mesh, RowMajorCoordinates) {
  const Mesh mesh = parseOk("pp=2,tp=4", 8);
  EXPECT_EQ(mesh.size(), 8);
  EXPECT_EQ(mesh.numAxes(), 2);
  EXPECT_EQ(mesh.toString(), "pp=2,tp=4");
  for (int rank = 0; rank < 8; ++rank) {
    const auto coords = mesh.coordinates(rank);
    EXPECT_EQ(coords[0], rank / 4);
    EXPECT_EQ(coords[1], rank % 4);
    EXPECT_EQ(mesh.rankOf(coords), rank);
  }
}

TEST(Mesh, GroupsAlongOneAndFlattenedAxes) {
  const Mesh mesh = parseOk("dp=2,pp=2,tp=2", 8);
  AxisSet tp;
  ASSERT_TRUE(mesh.parseAxes("tp", tp).isOk());
  EXPECT_EQ(mesh.groupRanks(5, tp), (std::vector<int>{4, 5}));
  AxisSet dpTp;
  ASSERT_TRUE(mesh.parseAxes("dp+tp", dpTp).isOk());
  // rank 2 = (dp0, pp1, tp0): group over dp and tp with pp fixed at 1, dp outer.
  EXPECT_EQ(mesh.groupRanks(2, dpTp), (std::vector<int>{2, 3, 6, 7}));
  EXPECT_EQ(mesh.groupIndex(7, dpTp), 3);
  EXPECT_EQ(mesh.groupIndex(6, dpTp), 2);
  EXPECT_EQ(mesh.groupSize(dpTp), 4);
  // Written order does not matter: the mesh order wins.
  AxisSet tpDp;
  ASSERT_TRUE(mesh.parseAxes("tp+dp", tpDp).isOk());
  EXPECT_EQ(tpDp, dpTp);
  EXPECT_EQ(mesh.axesName(tpDp), "dp+tp");
  EXPECT_EQ(mesh.groupColor(2, dpTp), mesh.groupColor(7, dpTp));
  EXPECT_NE(mesh.groupColor(0, dpTp), mesh.groupColor(2, dpTp));
  EXPECT_EQ(mesh.groupSize(mesh.allAxes()), 8);
}

TEST(Mesh, SubMeshFixesOneCoordinate) {
  const Mesh mesh = parseOk("pp=2,tp=4", 8);
  Mesh stage1;
  ASSERT_TRUE(mesh.subMesh(0, 1, stage1).isOk());
  EXPECT_EQ(stage1.toString(), "tp=4");
  EXPECT_EQ(stage1.worldRanks(), (std::vector<int>{4, 5, 6, 7}));
  Mesh tpSlice;
  ASSERT_TRUE(mesh.subMesh(1, 2, tpSlice).isOk());
  EXPECT_EQ(tpSlice.worldRanks(), (std::vector<int>{2, 6}));
  Mesh bad;
  EXPECT_EQ(mesh.subMesh(0, 2, bad).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(stage1.subMesh(0, 0, bad).code(), StatusCode::InvalidArgument);
}

TEST(Mesh, ValidationNamesTheProblem) {
  Mesh mesh;
  Status status = Mesh::parse("pp=2,tp=4", 6, mesh);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("8 ranks but the world has 6"), std::string::npos) << status.message();
  status = Mesh::parse("tp=2,tp=4", 8, mesh);
  EXPECT_NE(status.message().find("appears twice"), std::string::npos) << status.message();
  status = Mesh::parse("=2,tp=4", 8, mesh);
  EXPECT_NE(status.message().find("empty name"), std::string::npos) << status.message();
  status = Mesh::parse("pp=0,tp=4", 0, mesh);
  EXPECT_NE(status.message().find("size 0"), std::string::npos) << status.message();
  status = Mesh::parse("pp=two", 2, mesh);
  EXPECT_NE(status.message().find("malformed size"), std::string::npos) << status.message();
  status = Mesh::parse("pp", 2, mesh);
  EXPECT_NE(status.message().find("malformed mesh axis"), std::string::npos) << status.message();
  EXPECT_FALSE(Mesh::parse("", 1, mesh).isOk());
  const Mesh ok = parseOk("pp=2,tp=4", 8);
  AxisSet axes;
  status = ok.parseAxes("ep", axes);
  EXPECT_NE(status.message().find("unknown mesh axis 'ep'"), std::string::npos) << status.message();
  EXPECT_FALSE(ok.parseAxes("tp+tp", axes).isOk());
  EXPECT_FALSE(ok.parseAxes("tp+", axes).isOk());
}

TEST(Mesh, ParsesWithoutAWorldSizeAndBoundsTheRankCount) {
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("dp=2,pp=2,tp=4", mesh).isOk());
  EXPECT_EQ(mesh.size(), 16);
  EXPECT_TRUE(mesh.checkWorldSize(16).isOk());
  EXPECT_NE(mesh.checkWorldSize(8).message().find("16 ranks but the world has 8"), std::string::npos);
  // Beyond kMaxRanks: refused before anything is allocated for the ranks, with or without a
  // world size (a fuzzed "a=771777777" once made the world-size check allocate 3 GB first).
  const std::string huge = "a=" + std::to_string(Mesh::kMaxRanks + 1);
  Status status = Mesh::parse(huge, mesh);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("too large"), std::string::npos) << status.message();
  status = Mesh::parse("a=771777777,d=1", 4, mesh);
  EXPECT_NE(status.message().find("too large"), std::string::npos) << status.message();
  status = Mesh::parse("a=4096,d=4", 4, mesh);
  EXPECT_NE(status.message().find("mesh a=4096,d=4 has 16384 ranks but the world has 4"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace chimera
