// SPDX-License-Identifier: Apache-2.0
// Implements the NCCL backend's MPI bootstrap collectives, bounded by CHIMERA_TIMEOUT_MS.
#include "nccl/mpi_bootstrap.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::detail {
namespace {

// Buffers of collectives abandoned on a Timeout, never freed; the list keeps them reachable (not
// a leak) until the process exits.
std::vector<void*>& abandonedBuffers() {
  static auto* buffers = new std::vector<void*>();  // never destroyed: outlives every backend
  return *buffers;
}

// Waits for `request`, whose buffers `buffers` holds. A collective abandoned on a Timeout may
// still be completed by a late rank, and MPI then writes into its buffers: they are kept
// (never freed) in that case, freed otherwise.
template <typename T>
Status waitKeeping(const MpiGroup& world, MPI_Request& request, std::unique_ptr<T[]>& buffers, std::string_view what) {
  const Status status = waitOne(world, request, kWholeGroup, Lends::Chimera, what);
  if (status.code() == StatusCode::Timeout) abandonedBuffers().push_back(buffers.release());
  return status;
}

}  // namespace

Status agreeOnStep(const MpiGroup& world, const Status& local, std::string_view step) {
  auto words = std::make_unique<int[]>(2);  // [mine, the minimum]
  words[0] = local.isOk() ? 1 : 0;
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Iallreduce(&words[0], &words[1], 1, MPI_INT, MPI_MIN, world.comm, &request),
                                    fmt::format("MPI_Iallreduce agreeing on {}", step)));
  CHIMERA_RETURN_IF_ERROR(waitKeeping(world, request, words, fmt::format("agreeing on {}", step)));
  if (!local.isOk()) return local;
  if (words[1] == 0) return Status::backendError(fmt::format("another rank failed at {}", step));
  return Status::ok();
}

Status nodeLocalRank(const MpiGroup& world, int& localRank, int& localRanks) {
  constexpr std::size_t kName = MPI_MAX_PROCESSOR_NAME;
  const auto members = static_cast<std::size_t>(world.size);
  // [this rank's name, every member's name]
  auto names = std::make_unique<char[]>((members + 1) * kName);
  std::fill_n(names.get(), (members + 1) * kName, '\0');
  int length = 0;
  // A rank that cannot name its processor still takes part in the gather (the others wait
  // for it), and fails after it.
  const Status named = mpiStatus(MPI_Get_processor_name(names.get(), &length), "MPI_Get_processor_name");
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Iallgather(names.get(), static_cast<int>(kName), MPI_CHAR, names.get() + kName,
                                                   static_cast<int>(kName), MPI_CHAR, world.comm, &request),
                                    "MPI_Iallgather of the processor names"));
  CHIMERA_RETURN_IF_ERROR(waitKeeping(world, request, names, "gathering the processor names"));
  CHIMERA_RETURN_IF_ERROR(named);
  const auto nameOf = [&](std::size_t slot) {
    const char* name = names.get() + slot * kName;
    return std::string(name, strnlen(name, kName));
  };
  const std::string own = nameOf(0);
  localRank = 0;
  localRanks = 0;
  for (int r = 0; r < world.size; ++r) {
    if (nameOf(static_cast<std::size_t>(r) + 1) != own) continue;
    if (r < world.index) ++localRank;
    ++localRanks;
  }
  return Status::ok();
}

Status broadcastFromFirst(const MpiGroup& world, std::span<std::byte> bytes, std::string_view what) {
  auto copy = std::make_unique<std::byte[]>(bytes.size());
  std::copy(bytes.begin(), bytes.end(), copy.get());
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(
      mpiStatus(MPI_Ibcast(copy.get(), static_cast<int>(bytes.size()), MPI_BYTE, 0, world.comm, &request),
                fmt::format("MPI_Ibcast of {}", what)));
  CHIMERA_RETURN_IF_ERROR(waitKeeping(world, request, copy, fmt::format("broadcasting {}", what)));
  std::copy(copy.get(), copy.get() + bytes.size(), bytes.begin());
  return Status::ok();
}

}  // namespace chimera::detail
