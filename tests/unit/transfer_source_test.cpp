// SPDX-License-Identifier: Apache-2.0
// TransferSource (the planner's many-to-many builder, one index of the source layout shared
// by several targets): reuse gives what a fresh source gives, and isLocal agrees with the
// transfers it stands in for.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/redistribute.hpp"

namespace chimera::detail {
namespace {

struct Scene {
  Mesh mesh;
  TensorSpec spec{{8, 4, 4}, DataType::F32};
  std::vector<Layout> layouts;
  Scene() {
    EXPECT_TRUE(Mesh::parse("dp=2,pp=2,tp=2", 8, mesh).isOk());
    for (const char* text : {"R", "pp=@0", "pp=@1", "pp=@1,tp=S1", "dp+tp=S0", "tp+dp=S0", "dp=S2,tp=S0", "pp=@0,dp=S1",
                             "pp=@1,dp+tp=S2", "tp=P", "tp=P,dp=S0", "pp=@0,tp=P", "dp=P,tp=P", "pp=@1,tp=P,dp=S1"}) {
      Layout layout;
      EXPECT_TRUE(Layout::parse(text, mesh, layout).isOk()) << text;
      layouts.push_back(layout);
    }
  }
};

TEST(TransferSource, ReusedSourceMatchesAFreshOne) {
  const Scene s;
  int compared = 0;
  for (const Layout& from : s.layouts) {
    TransferSource reused(from, s.spec);
    for (const Layout& to : s.layouts) {
      std::vector<BoxTransfer> again;
      std::vector<BoxTransfer> fresh;
      const Status a = reused.transfersTo(to, again);
      const Status b = manyToManyTransfers(from, to, s.spec, fresh);
      ASSERT_EQ(a.isOk(), b.isOk()) << from.toString() << " -> " << to.toString();
      EXPECT_EQ(a.toString(), b.toString());
      EXPECT_EQ(again, fresh) << from.toString() << " -> " << to.toString();
      compared += a.isOk() ? 1 : 0;
    }
  }
  EXPECT_GT(compared, 60);  // most pairs are reachable; the partial ones only among themselves
}

TEST(TransferSource, IsLocalExactlyWhenEveryTransferStaysOnItsRank) {
  const Scene s;
  int local = 0;
  int remote = 0;
  for (const Layout& from : s.layouts) {
    const TransferSource source(from, s.spec);
    for (const Layout& to : s.layouts) {
      bool isLocal = false;
      const Status checked = source.isLocal(to, isLocal);
      std::vector<BoxTransfer> transfers;
      const Status built = manyToManyTransfers(from, to, s.spec, transfers);
      if (!checked.isOk()) {
        EXPECT_EQ(checked.toString(), built.toString()) << from.toString() << " -> " << to.toString();
        continue;
      }
      if (!built.isOk()) {  // isLocal answers false; building the transfers finds the error
        EXPECT_FALSE(isLocal) << from.toString() << " -> " << to.toString();
        continue;
      }
      const bool stays =
          std::all_of(transfers.begin(), transfers.end(), [](const BoxTransfer& t) { return t.src == t.dst; });
      EXPECT_EQ(isLocal, stays) << from.toString() << " -> " << to.toString();
      (stays ? local : remote) += 1;
    }
  }
  EXPECT_GT(local, 10);  // both answers occur
  EXPECT_GT(remote, 10);
}

}  // namespace
}  // namespace chimera::detail
