// SPDX-License-Identifier: Apache-2.0
// MPI process setup and the MPI backend factory.
#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chimera/mpi_backend.hpp"
#include "common/env.hpp"
#include "common/hash.hpp"
#include "common/log.hpp"
#include "common/size_text.hpp"
#include "core/check.hpp"
#include "job/job_end.hpp"
#include "job/stall_watchdog.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/host_placement.hpp"
#include "mpi/mpi_backend_impl.hpp"
#include "mpi/mpi_util.hpp"
#include "mpi/word_agreement.hpp"

namespace chimera {
namespace {

bool gChimeraInitializedMpi = false;

// Creates a duplicate of `base` (MPI_COMM_WORLD or the caller's communicator) that returns
// errors instead of aborting; the duplication (collective over `base`) is bounded by
// `timeoutMs`, so a rank that never creates its backend is a Timeout naming it rather than a hang.
Status duplicateWorld(MPI_Comm base, int rank, int size, std::int64_t timeoutMs, MPI_Comm& out) {
  // MPI writes the handle when the duplication completes, which a late rank may make happen
  // after a Timeout: the set keeps the handle's memory.
  auto handle = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  detail::RequestSet duplication;
  duplication.keep(handle);
  CHIMERA_RETURN_IF_ERROR(
      detail::mpiStatus(MPI_Comm_idup(base, handle.get(), &duplication.add(detail::kWholeGroup)), "MPI_Comm_idup"));
  const detail::MpiGroup world = detail::worldGroup(base, rank, size, timeoutMs, "the world");
  CHIMERA_RETURN_IF_ERROR(duplication.waitAll(world, "creating the MPI backend (MPI_Comm_idup)"));
  out = *handle;
  return detail::mpiStatus(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

}  // namespace

Status mpiWorld(int& rank, int& size) {
  int initialized = 0;
  CHIMERA_RETURN_IF_ERROR(detail::mpiStatus(MPI_Initialized(&initialized), "MPI_Initialized"));
  if (initialized == 0) {
    int provided = 0;
    CHIMERA_RETURN_IF_ERROR(
        detail::mpiStatus(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread"));
    gChimeraInitializedMpi = true;
  }
  CHIMERA_RETURN_IF_ERROR(detail::mpiStatus(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank"));
  return detail::mpiStatus(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
}

void finalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (gChimeraInitializedMpi && finalized == 0) detail::watchedFinalize();
  gChimeraInitializedMpi = false;
}

Status createMpiBackend(const Mesh& mesh, std::unique_ptr<Backend>& out) {
  MpiBackendOptions options;
  CHIMERA_RETURN_IF_ERROR(MpiBackendOptions::fromEnvironment(options));
  return detail::createMpiBackend(mesh, options, out);
}

Status createMpiBackend(const Mesh& mesh, const MpiBackendOptions& options, std::unique_ptr<Backend>& out) {
  return detail::createMpiBackend(mesh, options, out);
}

Status MpiBackendOptions::fromEnvironment(MpiBackendOptions& out) { return detail::mpiBackendOptionsFromEnv(out); }

Status createMpiBackendOnComm(const void* comm, const Mesh& mesh, const MpiBackendOptions& options,
                              std::unique_ptr<Backend>& out) {
  CHIMERA_CHECK_ARG(comm != nullptr, "createMpiBackendOnComm: comm is null (pass the address of an MPI_Comm)");
  const MPI_Comm base = *static_cast<const MPI_Comm*>(comm);
  CHIMERA_CHECK_ARG(base != MPI_COMM_NULL, "createMpiBackendOnComm: the communicator is MPI_COMM_NULL");
  int initialized = 0;
  CHIMERA_RETURN_IF_ERROR(detail::mpiStatus(MPI_Initialized(&initialized), "MPI_Initialized"));
  CHIMERA_CHECK_ARG(initialized != 0, "createMpiBackendOnComm: MPI is not initialised");
  return detail::createMpiBackendOn(base, mesh, options, out);
}

namespace {

// A tag for the meeting and the communicator of one rank list, equal on its members: a hash of the
// list, so that creations of different lists in flight at once do not match each other's messages.
int rankListTag(std::span<const int> ranks) {
  detail::Hasher hash;  // the library's one hash
  for (int r : ranks) hash.add(static_cast<std::uint64_t>(r));
  int upperBound = 32767;  // the least MPI_TAG_UB the standard allows
  void* value = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found) == MPI_SUCCESS && found != 0 && value != nullptr)
    upperBound = *static_cast<int*>(value);
  return static_cast<int>(hash.value() % static_cast<std::uint64_t>(upperBound));
}

// Every member sends one token to every other and receives theirs, bounded by `timeoutMs`: after
// it, all members are inside the creation, so MPI_Comm_create_group (which has no bounded form)
// completes.
Status meetMembers(std::span<const int> ranks, int worldRank, int worldSize, int tag, std::int64_t timeoutMs) {
  const detail::MpiGroup world = detail::worldGroup(MPI_COMM_WORLD, worldRank, worldSize, timeoutMs, "the world");
  // [this rank's token, one from each member], the set's for as long as MPI may write them.
  auto store = std::make_shared<std::vector<int>>(ranks.size() + 1, 0);
  int& token = (*store)[0];
  token = 1;
  int* tokens = store->data() + 1;
  detail::RequestSet requests;
  requests.reserve(2 * ranks.size());
  requests.keep(store);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == worldRank) continue;
    CHIMERA_RETURN_IF_ERROR(detail::mpiStatus(
        MPI_Irecv(&tokens[i], 1, MPI_INT, ranks[i], tag, MPI_COMM_WORLD, &requests.add(ranks[i])), "MPI_Irecv"));
    CHIMERA_RETURN_IF_ERROR(detail::mpiStatus(
        MPI_Isend(&token, 1, MPI_INT, ranks[i], tag, MPI_COMM_WORLD, &requests.add(ranks[i])), "MPI_Isend"));
  }
  return requests.waitAll(world, "creating an MPI backend over chosen world ranks");
}

}  // namespace

Status createMpiBackendOnRanks(std::span<const int> worldRanks, const Mesh& mesh, const MpiBackendOptions& options,
                               std::unique_ptr<Backend>& out) {
  int worldRank = 0;
  int worldSize = 0;
  CHIMERA_RETURN_IF_ERROR(mpiWorld(worldRank, worldSize));
  CHIMERA_CHECK_ARG(static_cast<int>(worldRanks.size()) == mesh.size(),
                    "createMpiBackendOnRanks: {} world ranks for mesh {} of {} ranks", worldRanks.size(),
                    mesh.toString(), mesh.size());
  bool member = false;
  std::set<int> seen;
  for (int r : worldRanks) {
    CHIMERA_CHECK_ARG(r >= 0 && r < worldSize, "createMpiBackendOnRanks: rank {} is outside the MPI world of {} ranks",
                      r, worldSize);
    CHIMERA_CHECK_ARG(seen.insert(r).second, "createMpiBackendOnRanks: rank {} is listed twice", r);
    member = member || r == worldRank;
  }
  CHIMERA_CHECK_ARG(member, "createMpiBackendOnRanks: world rank {} is not one of the ranks it creates a backend over",
                    worldRank);
  CHIMERA_CHECK_ARG(options.timeoutMs > 0, "MPI backend timeout must be positive, not {} ms", options.timeoutMs);
  const int tag = rankListTag(worldRanks);
  CHIMERA_RETURN_IF_ERROR(meetMembers(worldRanks, worldRank, worldSize, tag, options.timeoutMs));
  MPI_Group world = MPI_GROUP_NULL;
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  CHIMERA_RETURN_IF_ERROR(detail::mpiStatus(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group"));
  const std::vector<int> list(worldRanks.begin(), worldRanks.end());
  Status status =
      detail::mpiStatus(MPI_Group_incl(world, static_cast<int>(list.size()), list.data(), &group), "MPI_Group_incl");
  // No bounded form: after the meeting every member is here, and one that stalls or dies before its
  // call would hang the others, so the call runs under a watchdog that ends the job.
  if (status.isOk())
    status = detail::mpiStatus(
        detail::watchedBlockingCall(worldRank, std::chrono::milliseconds(options.timeoutMs),
                                    "MPI_Comm_create_group of an MPI backend over chosen world ranks (after the "
                                    "members met)",
                                    [&] { return MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &comm); }),
        "MPI_Comm_create_group");
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  MPI_Group_free(&world);
  CHIMERA_RETURN_IF_ERROR(status);
  status = detail::createMpiBackendOn(comm, mesh, options, out);
  MPI_Comm_free(&comm);
  return status;
}

std::string_view mpiAlgorithmName(MpiAlgorithm algorithm) {
  switch (algorithm) {
    case MpiAlgorithm::Auto: return "auto";
    case MpiAlgorithm::PointToPoint: return "p2p";
    case MpiAlgorithm::Ring: return "ring";
    case MpiAlgorithm::Library: return "library";
    case MpiAlgorithm::Hierarchical: return "hierarchical";
  }
  return "unknown";
}

namespace detail {

Status mpiBackendOptionsFromEnv(MpiBackendOptions& out) {
  MpiBackendOptions options;
  CHIMERA_RETURN_IF_ERROR(checkArgsFromEnv(options.checkArgs, kMpiCheckArgsByDefault));
  CHIMERA_RETURN_IF_ERROR(timeoutMsFromEnv(options.timeoutMs));
  static constexpr MpiAlgorithm kAlgorithms[] = {MpiAlgorithm::Auto, MpiAlgorithm::PointToPoint, MpiAlgorithm::Ring,
                                                 MpiAlgorithm::Library, MpiAlgorithm::Hierarchical};
  std::size_t algorithm = 0;  // Auto, the default
  static constexpr std::string_view kNames[] = {"auto", "p2p", "ring", "library", "hierarchical"};
  CHIMERA_RETURN_IF_ERROR(readEnvChoice("CHIMERA_MPI_ALGORITHM", kNames, algorithm));
  options.algorithm = kAlgorithms[algorithm];
  CHIMERA_RETURN_IF_ERROR(readEnvSize("CHIMERA_MPI_SEGMENT_BYTES", options.segmentBytes));
  CHIMERA_RETURN_IF_ERROR(abortOnTimeoutFromEnv(options.abortOnTimeout));
  CHIMERA_RETURN_IF_ERROR(readEnvSwitch("CHIMERA_MPI_PEER_READ", options.peerRead, options.peerRead));
  std::string logLevel;
  CHIMERA_RETURN_IF_ERROR(logLevelFromEnv(logLevel));
  out = options;
  return Status::ok();
}

Status createMpiBackend(const Mesh& mesh, const MpiBackendOptions& options, std::unique_ptr<Backend>& out) {
  int rank = 0;
  int size = 0;
  CHIMERA_RETURN_IF_ERROR(mpiWorld(rank, size));
  return createMpiBackendOn(MPI_COMM_WORLD, mesh, options, out);
}

Status createMpiBackendOnHosts(const Mesh& mesh, const MpiBackendOptions& options, std::span<const int> hostOfRank,
                               std::unique_ptr<Backend>& out) {
  int rank = 0;
  int size = 0;
  CHIMERA_RETURN_IF_ERROR(mpiWorld(rank, size));
  CHIMERA_CHECK_ARG(static_cast<int>(hostOfRank.size()) == size && size > 0,
                    "createMpiBackendOnHosts: {} hosts given for a world of {} ranks (one per rank)", hostOfRank.size(),
                    size);
  return createMpiBackendOn(MPI_COMM_WORLD, mesh, options, out, hostOfRank);
}

namespace {

constexpr int kGivenHostsTag = 0x484F;  // 'HO'

// `given` numbered 0, 1, ... in the order of their lowest rank (as findHosts numbers them),
// after a bounded agreement over `comm` that every rank passed the same list.
Status takeGivenHosts(MPI_Comm comm, int rank, int size, std::int64_t timeoutMs, std::span<const int> given,
                      std::vector<int>& out) {
  std::vector<int> dense(given.size());
  std::unordered_map<int, int> index;
  Hasher hasher;
  for (std::size_t r = 0; r < given.size(); ++r) {
    dense[r] = index.try_emplace(given[r], static_cast<int>(index.size())).first->second;
    hasher.add(static_cast<std::uint64_t>(dense[r]));
  }
  const std::int64_t hash = hasher.agreementValue();
  std::array<std::int64_t, 2> words = {hash, -hash};
  const MpiGroup world = worldGroup(comm, rank, size, timeoutMs, "the world (given host placement)");
  CHIMERA_RETURN_IF_ERROR(minOverGroup(world, words, kGivenHostsTag, "agreeing on the given host of every rank"));
  if (words[0] != hash || words[1] != -hash)
    return Status::mismatch("createMpiBackendOnHosts: the ranks passed different host placements");
  out = std::move(dense);
  return Status::ok();
}

}  // namespace

Status createMpiBackendOn(MPI_Comm base, const Mesh& mesh, const MpiBackendOptions& options,
                          std::unique_ptr<Backend>& out, std::span<const int> hostOfRank) {
  int rank = 0;
  int size = 0;
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Comm_rank(base, &rank), "MPI_Comm_rank"));
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Comm_size(base, &size), "MPI_Comm_size"));
  std::string logLevel;
  CHIMERA_RETURN_IF_ERROR(logLevelFromEnv(logLevel));
  setLogRank(rank);
  CHIMERA_CHECK_ARG(mesh.size() == size, "mesh {} has {} ranks but the MPI world has {}", mesh.toString(), mesh.size(),
                    size);
  CHIMERA_CHECK_ARG(options.segmentBytes > 0, "MPI backend segment size must be positive");
  CHIMERA_CHECK_ARG(options.timeoutMs > 0, "MPI backend timeout must be positive, not {} ms", options.timeoutMs);
  CHIMERA_RETURN_IF_ERROR(createUserOps());
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm p2p = MPI_COMM_NULL;
  MPI_Comm notices = MPI_COMM_NULL;
  CHIMERA_RETURN_IF_ERROR(duplicateWorld(base, rank, size, options.timeoutMs, world));
  CHIMERA_RETURN_IF_ERROR(duplicateWorld(base, rank, size, options.timeoutMs, p2p));
  CHIMERA_RETURN_IF_ERROR(duplicateWorld(base, rank, size, options.timeoutMs, notices));
  std::vector<int> hosts;
  CHIMERA_RETURN_IF_ERROR(hostOfRank.empty() ? findHosts(p2p, rank, size, options.timeoutMs, hosts)
                                             : takeGivenHosts(p2p, rank, size, options.timeoutMs, hostOfRank, hosts));
  PeerMemory peers;
  CHIMERA_RETURN_IF_ERROR(PeerMemory::create(p2p, rank, size, options.timeoutMs, options.peerRead, hosts, peers));
  CHIMERA_LOG_DEBUG("mpi", "MPI backend on mesh {}: argument checks {}, timeout {} ms, ReduceScatter segment {}",
                    mesh.toString(), options.checkArgs ? "on" : "off", options.timeoutMs,
                    options.segmentBytes == kUnsegmented ? "whole blocks" : formatSize(options.segmentBytes));
  out = std::make_unique<MpiBackend>(mesh, rank, world, p2p, notices, options, std::move(hosts), std::move(peers));
  return Status::ok();
}

}  // namespace detail
}  // namespace chimera
