// SPDX-License-Identifier: Apache-2.0
// See mpi_rendezvous.hpp.
#include "mpi_rendezvous.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <climits>
#include <thread>

#include "chimera/mpi_backend.hpp"
#include "core/check.hpp"
#include "mpi_group_backend.hpp"

namespace chimera::torch_ext {
namespace {

using Clock = std::chrono::steady_clock;

// What one exchange writes into while MPI owns it. Leaked on a timeout: the abandoned
// collective may still complete into it later.
struct Exchange {
  int length = 0;
  std::vector<int> lengths;
  std::vector<int> offsets;
  std::vector<char> bytes;
  std::string mine;
};

// Completes `request`, polling (the CPU is yielded, then slept on, while nothing arrives);
// Timeout once `deadline` passes.
Status completeBy(MPI_Request& request, Clock::time_point deadline, std::int64_t timeoutMs, std::string_view what,
                  std::string_view step) {
  for (int polls = 0;; ++polls) {
    int done = 0;
    CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Test(&request, &done, MPI_STATUS_IGNORE), step));
    if (done != 0) return Status::ok();
    if (Clock::now() >= deadline)
      return Status::timeout(
          fmt::format("{}: {} did not complete within {} ms (a rank of the MPI world has not "
                      "reached the rendezvous, or stalls)",
                      what, step, timeoutMs));
    if (polls < 256)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

Status mpiAllGatherBytes(std::string_view mine, std::int64_t timeoutMs, std::string_view what,
                         std::vector<std::string>& out) {
  CHIMERA_CHECK_ARG(mine.size() <= static_cast<std::size_t>(INT_MAX), "{}: {} bytes exceed MPI's count", what,
                    mine.size());
  CHIMERA_CHECK_ARG(timeoutMs > 0, "{}: timeout {} ms must be positive", what, timeoutMs);
  int rank = 0;
  int size = 0;
  CHIMERA_RETURN_IF_ERROR(mpiWorldOf(rank, size));
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  auto* exchange = new Exchange{static_cast<int>(mine.size()),
                                std::vector<int>(static_cast<std::size_t>(size)),
                                std::vector<int>(static_cast<std::size_t>(size)),
                                {},
                                std::string(mine)};
  MPI_Request request = MPI_REQUEST_NULL;
  Status status = mpiStatus(
      MPI_Iallgather(&exchange->length, 1, MPI_INT, exchange->lengths.data(), 1, MPI_INT, MPI_COMM_WORLD, &request),
      "MPI_Iallgather");
  if (status.isOk()) status = completeBy(request, deadline, timeoutMs, what, "MPI_Iallgather of the lengths");
  if (status.isOk()) {
    long long total = 0;
    for (int r = 0; r < size; ++r) {
      exchange->offsets[static_cast<std::size_t>(r)] = static_cast<int>(total);
      total += exchange->lengths[static_cast<std::size_t>(r)];
    }
    if (total > INT_MAX)
      status = Status::invalidArgument(fmt::format("{}: {} bytes in all exceed MPI's count", what, total));
    if (status.isOk()) {
      exchange->bytes.resize(static_cast<std::size_t>(total));
      status = mpiStatus(
          MPI_Iallgatherv(exchange->mine.data(), exchange->length, MPI_BYTE, exchange->bytes.data(),
                          exchange->lengths.data(), exchange->offsets.data(), MPI_BYTE, MPI_COMM_WORLD, &request),
          "MPI_Iallgatherv");
      if (status.isOk()) status = completeBy(request, deadline, timeoutMs, what, "MPI_Iallgatherv of the bytes");
    }
  }
  if (status.code() == StatusCode::Timeout) return status;  // `exchange` stays with MPI
  if (status.isOk()) {
    out.clear();
    for (int r = 0; r < size; ++r)
      out.emplace_back(exchange->bytes.data() + exchange->offsets[static_cast<std::size_t>(r)],
                       static_cast<std::size_t>(exchange->lengths[static_cast<std::size_t>(r)]));
  }
  delete exchange;
  return status;
}

}  // namespace chimera::torch_ext
