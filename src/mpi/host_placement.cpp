// SPDX-License-Identifier: Apache-2.0
// Implements host_placement.hpp: one bounded all-gather of the host keys.
#include "mpi/host_placement.hpp"

#include <unistd.h>

#include <array>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/hash.hpp"
#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_group.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::detail {

std::uint64_t thisHostKey() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) name[0] = '\0';
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return Hasher().add(std::string_view(name.data())).add(boot).value();
}

Status findHosts(MPI_Comm comm, int rank, int size, std::int64_t timeoutMs, std::vector<int>& out) {
  // [this rank's key, every rank's key], kept by the set for as long as MPI may write it.
  auto keyStore = std::make_shared<std::vector<std::uint64_t>>(static_cast<std::size_t>(size) + 1);
  std::vector<std::uint64_t>& words = *keyStore;
  words[0] = thisHostKey();
  const MpiGroup world = worldGroup(comm, rank, size, timeoutMs, "the world (host placement)");
  RequestSet gather;
  gather.keep(keyStore);
  CHIMERA_RETURN_IF_ERROR(mpiStatus(
      MPI_Iallgather(words.data(), 1, MPI_UINT64_T, words.data() + 1, 1, MPI_UINT64_T, comm, &gather.add(kWholeGroup)),
      "MPI_Iallgather (hosts)"));
  CHIMERA_RETURN_IF_ERROR(gather.waitAll(world, "finding the host of every rank"));
  const std::span<const std::uint64_t> keys(words.data() + 1, static_cast<std::size_t>(size));
  std::unordered_map<std::uint64_t, int> index;
  out.assign(static_cast<std::size_t>(size), 0);
  for (std::size_t r = 0; r < keys.size(); ++r) {
    const auto [it, added] = index.try_emplace(keys[r], static_cast<int>(index.size()));
    out[r] = it->second;
  }
  return Status::ok();
}

}  // namespace chimera::detail
