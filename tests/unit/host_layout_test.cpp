// SPDX-License-Identifier: Apache-2.0
// The host layout of a group (mpi/host_layout.hpp): hosts in the order of their lowest
// member, local indices, lanes as the fewest members of any host, and when the hierarchical
// programs differ from the flat ones.
#include "mpi/host_layout.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace chimera::detail {
namespace {

TEST(HostLayout, BlocksGiveOneLanePerLocalIndex) {
  const std::vector<int> hosts = {4, 4, 4, 4, 9, 9, 9, 9};
  const HostLayout layout = makeHostLayout(hosts);
  EXPECT_EQ(layout.hosts(), 2);
  EXPECT_EQ(layout.lanes, 4);
  EXPECT_EQ(layout.hostOf, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(layout.localIndex, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(layout.laneMember(1, 2), 6);
  EXPECT_TRUE(layout.hierarchical());
}

TEST(HostLayout, RoundRobinNumbersHostsByTheirLowestMember) {
  const std::vector<int> hosts = {1, 0, 1, 0, 1, 0};
  const HostLayout layout = makeHostLayout(hosts);
  EXPECT_EQ(layout.hostOf, (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(layout.members[1], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(layout.lanes, 3);
  EXPECT_EQ(layout.laneMember(1, 0), 1);
}

TEST(HostLayout, UnevenHostsServeTheExtraMembersRoundTheLanes) {
  const std::vector<int> hosts = {0, 0, 0, 1, 1, 1, 1, 1};  // 3 + 5
  const HostLayout layout = makeHostLayout(hosts);
  EXPECT_EQ(layout.lanes, 3);
  EXPECT_TRUE(layout.inLane(5));   // local index 2 on host 1
  EXPECT_FALSE(layout.inLane(6));  // local index 3
  EXPECT_EQ(layout.laneOf(6), 0);
  EXPECT_EQ(layout.laneOf(7), 1);
}

TEST(HostLayout, HierarchicalOnlyAcrossHostsWithSharedHosts) {
  EXPECT_FALSE(makeHostLayout(std::vector<int>{3, 3, 3, 3}).hierarchical());  // one host
  EXPECT_FALSE(makeHostLayout(std::vector<int>{0, 1, 2, 3}).hierarchical());  // a member per host
  EXPECT_TRUE(makeHostLayout(std::vector<int>{0, 1, 1}).hierarchical());      // 1 + 2
  EXPECT_EQ(makeHostLayout(std::vector<int>{0, 1, 1}).lanes, 1);
}

}  // namespace
}  // namespace chimera::detail
