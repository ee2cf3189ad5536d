// SPDX-License-Identifier: Apache-2.0
// Implements host_identity.hpp.
#include "common/host_identity.hpp"

#include <unistd.h>

#include <array>
#include <fstream>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/hash.hpp"

namespace chimera::detail {

std::uint64_t thisHostKey() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) name[0] = '\0';
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return Hasher().add(std::string_view(name.data())).add(boot).value();
}

std::vector<int> hostsOfKeys(std::span<const std::uint64_t> keys) {
  std::unordered_map<std::uint64_t, int> index;
  std::vector<int> out(keys.size(), 0);
  for (std::size_t r = 0; r < keys.size(); ++r) {
    const auto [it, added] = index.try_emplace(keys[r], static_cast<int>(index.size()));
    out[r] = it->second;
  }
  return out;
}

}  // namespace chimera::detail
