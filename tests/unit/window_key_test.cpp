// SPDX-License-Identifier: Apache-2.0
// The Session's window key: windows that differ anywhere get different shared hashes (the
// hash the ranks agree on), including a declaration that differs only in its last placement.
#include <gtest/gtest.h>

#include "session/window.hpp"

namespace chimera::detail {
namespace {

Window receivedWindow(const Mesh& mesh, const char* declared) {
  Window w;
  WindowValue v;
  v.spec = {{32, 48}, DataType::F32};
  EXPECT_TRUE(Layout::parse("pp=@1,tp=R", mesh, v.layout).isOk());
  v.received = true;
  Layout consume;
  EXPECT_TRUE(Layout::parse(declared, mesh, consume).isOk());
  v.declared = consume;
  w.values.push_back(v);
  w.receives.push_back({0, AxisSet::fromBits(1), 1, 0});
  return w;
}

TEST(WindowKey, LastPlacementOfADeclarationChangesTheSharedHash) {
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("pp=2,tp=4", 8, mesh).isOk());
  const WindowKey whole = windowKey(receivedWindow(mesh, "pp=@1,tp=R"), 7);
  const WindowKey rows = windowKey(receivedWindow(mesh, "pp=@1,tp=S0"), 7);
  EXPECT_NE(whole.sharedHash, rows.sharedHash);
  EXPECT_FALSE(whole == rows);
  EXPECT_EQ(whole.sharedHash, windowKey(receivedWindow(mesh, "pp=@1,tp=R"), 4).sharedHash);
}

TEST(WindowKey, ReceiveDirectionChangesTheSharedHash) {
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("pp=2,tp=4", 8, mesh).isOk());
  Window forward = receivedWindow(mesh, "pp=@1,tp=R");
  Window backward = forward;
  backward.receives[0].stageStep = -1;
  EXPECT_NE(windowKey(forward, 7).sharedHash, windowKey(backward, 7).sharedHash);
}

}  // namespace
}  // namespace chimera::detail
