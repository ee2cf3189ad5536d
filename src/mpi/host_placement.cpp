// SPDX-License-Identifier: Apache-2.0
// Implements host_placement.hpp: one bounded all-gather of the host keys.
#include "mpi/host_placement.hpp"

#include <memory>
#include <span>

#include "common/host_identity.hpp"
#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_group.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::detail {

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
  out = hostsOfKeys(std::span<const std::uint64_t>(words.data() + 1, static_cast<std::size_t>(size)));
  return Status::ok();
}

}  // namespace chimera::detail
