// SPDX-License-Identifier: Apache-2.0
// Implements host_layout.hpp.
#include "mpi/host_layout.hpp"

#include <algorithm>
#include <unordered_map>

namespace chimera::detail {

bool HostLayout::hierarchical() const {
  return hosts() >= 2 && std::any_of(members.begin(), members.end(), [](const auto& m) { return m.size() >= 2; });
}

HostLayout makeHostLayout(std::span<const int> hostOfMember) {
  HostLayout layout;
  std::unordered_map<int, int> dense;  // host number given -> host of the layout
  layout.hostOf.resize(hostOfMember.size());
  layout.localIndex.resize(hostOfMember.size());
  for (std::size_t i = 0; i < hostOfMember.size(); ++i) {
    const auto [it, added] = dense.try_emplace(hostOfMember[i], static_cast<int>(dense.size()));
    if (added) layout.members.emplace_back();
    auto& members = layout.members[static_cast<std::size_t>(it->second)];
    layout.hostOf[i] = it->second;
    layout.localIndex[i] = static_cast<int>(members.size());
    members.push_back(static_cast<int>(i));
  }
  std::size_t fewest = layout.members.empty() ? 1 : layout.members.front().size();
  for (const auto& members : layout.members) fewest = std::min(fewest, members.size());
  layout.lanes = static_cast<int>(std::max<std::size_t>(1, fewest));
  return layout;
}

}  // namespace chimera::detail
