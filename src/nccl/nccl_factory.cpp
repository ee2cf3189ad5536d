// SPDX-License-Identifier: Apache-2.0
// NCCL backend factories: from a caller-given unique id (no MPI), and bootstrapped over MPI.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "chimera/nccl_backend.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "core/check.hpp"
#include "kernels/cuda_check.hpp"
#include "nccl/device_choice.hpp"
#include "nccl/nccl_api.hpp"
#include "nccl/nccl_backend_impl.hpp"
#include "nccl/nccl_bootstrap_env.hpp"
#include "nccl/nccl_check.hpp"

#if CHIMERA_HAS_MPI
#include <mpi.h>

#include "nccl/mpi_bootstrap.hpp"
#endif

namespace chimera {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "NcclUniqueId must hold an ncclUniqueId");

Status createNcclUniqueId(NcclUniqueId& out) {
  ncclUniqueId id;
  CHIMERA_NCCL_RETURN(ncclGetUniqueId(&id));
  std::memcpy(out.bytes.data(), &id, sizeof id);
  return Status::ok();
}

namespace {

// The world communicator, non-blocking, its creation bounded by the timeout (a peer that
// never joins, e.g. after failing to parse its environment, gives Timeout, not a hang).
Status initWorld(const detail::NcclApi& api, const Mesh& mesh, int rank, const NcclUniqueId& id,
                 std::chrono::milliseconds timeout, ncclComm_t& world) {
  ncclUniqueId ncclId;
  std::memcpy(&ncclId, id.bytes.data(), sizeof ncclId);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  world = nullptr;
  const ncclResult_t result = api.commInitRankConfig(&world, mesh.size(), ncclId, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    if (world != nullptr) ncclCommAbort(world);
    return detail::ncclStatus(result, "ncclCommInitRankConfig");
  }
  const Status ready = detail::awaitNccl(std::span<const ncclComm_t>(&world, 1), timeout,
                                         fmt::format("ncclCommInitRankConfig of rank {} of {}", rank, mesh.size()));
  if (!ready.isOk()) {
    ncclCommAbort(world);
    return ready;
  }
  return Status::ok();
}

detail::NcclBackendOptions implementationOptions(const NcclBackendOptions& options) {
  detail::NcclBackendOptions out;
  out.timeout = std::chrono::milliseconds(options.timeoutMs);
  out.groupedAllToAll = options.groupedAllToAll;
  out.checkArgs = options.checkArgs;
  out.abortOnTimeout = options.abortOnTimeout;
  return out;
}

}  // namespace

Status NcclBackendOptions::fromEnvironment(NcclBackendOptions& out) {
  detail::NcclBackendOptions options;
  CHIMERA_RETURN_IF_ERROR(detail::ncclBackendOptionsFromEnv(options));
  out.timeoutMs = static_cast<std::uint64_t>(options.timeout.count());
  out.groupedAllToAll = options.groupedAllToAll;
  out.checkArgs = options.checkArgs;
  out.abortOnTimeout = options.abortOnTimeout;
  return Status::ok();
}

Status createNcclBackend(const Mesh& mesh, int rank, int device, const NcclUniqueId& id,
                         std::unique_ptr<Backend>& out) {
  NcclBackendOptions options;
  CHIMERA_RETURN_IF_ERROR(NcclBackendOptions::fromEnvironment(options));
  return createNcclBackend(mesh, rank, device, id, options, out);
}

Status createNcclBackendOnComm(const void* comm, const Mesh& mesh, int device, const NcclBackendOptions& publicOptions,
                               std::unique_ptr<Backend>& out) {
  CHIMERA_CHECK_ARG(comm != nullptr, "createNcclBackendOnComm: comm is null (pass the address of an ncclComm_t)");
  const ncclComm_t base = *static_cast<const ncclComm_t*>(comm);
  CHIMERA_CHECK_ARG(base != nullptr, "createNcclBackendOnComm: the communicator is null");
  CHIMERA_CHECK_ARG(publicOptions.timeoutMs > 0, "NCCL backend timeout must be positive");
  std::string logLevel;
  CHIMERA_RETURN_IF_ERROR(detail::logLevelFromEnv(logLevel));
  int size = 0;
  int rank = 0;
  CHIMERA_NCCL_RETURN(ncclCommCount(base, &size));
  CHIMERA_NCCL_RETURN(ncclCommUserRank(base, &rank));
  CHIMERA_CHECK_ARG(mesh.size() == size, "mesh {} has {} ranks but the NCCL communicator has {}", mesh.toString(),
                    mesh.size(), size);
  int devices = 0;
  CHIMERA_CUDA_RETURN(cudaGetDeviceCount(&devices));
  CHIMERA_CHECK_ARG(device >= 0 && device < devices, "CUDA device {} outside 0..{}", device, devices - 1);
  CHIMERA_CUDA_RETURN(cudaSetDevice(device));
  const detail::NcclApi* api = nullptr;
  CHIMERA_RETURN_IF_ERROR(detail::ncclApi(api));
  const detail::NcclBackendOptions options = implementationOptions(publicOptions);
  // A private copy, so that the backend may destroy (or abort) its world without touching
  // the caller's communicator; non-blocking and bounded like every other creation.
  ncclComm_t world = nullptr;
  const Status ready = detail::splitCommunicator(*api, base, 0, rank, options.timeout,
                                                 "ncclCommSplit of the caller's communicator", world);
  if (!ready.isOk()) {
    if (world != nullptr) ncclCommAbort(world);
    return ready;
  }
  CHIMERA_LOG_INFO("nccl", "rank {} of {} on CUDA device {} (mesh {}), on the caller's communicator", rank, size,
                   device, mesh.toString());
  out = std::make_unique<detail::NcclBackend>(mesh, rank, device, world, *api, options);
  return Status::ok();
}

Status createNcclBackend(const Mesh& mesh, int rank, int device, const NcclUniqueId& id,
                         const NcclBackendOptions& publicOptions, std::unique_ptr<Backend>& out) {
  CHIMERA_CHECK_ARG(mesh.size() >= 1, "NCCL backend needs a mesh with at least one rank");
  CHIMERA_CHECK_ARG(rank >= 0 && rank < mesh.size(), "rank {} outside mesh {} of {} ranks", rank, mesh.toString(),
                    mesh.size());
  CHIMERA_CHECK_ARG(publicOptions.timeoutMs > 0, "NCCL backend timeout must be positive");
  std::string logLevel;
  CHIMERA_RETURN_IF_ERROR(detail::logLevelFromEnv(logLevel));
  const detail::NcclBackendOptions options = implementationOptions(publicOptions);
  const detail::NcclApi* api = nullptr;
  CHIMERA_RETURN_IF_ERROR(detail::ncclApi(api));
  int devices = 0;
  CHIMERA_CUDA_RETURN(cudaGetDeviceCount(&devices));
  CHIMERA_CHECK_ARG(device >= 0 && device < devices, "CUDA device {} outside 0..{}", device, devices - 1);
  CHIMERA_CUDA_RETURN(cudaSetDevice(device));
  ncclComm_t world = nullptr;
  CHIMERA_RETURN_IF_ERROR(initWorld(*api, mesh, rank, id, options.timeout, world));
  CHIMERA_LOG_INFO("nccl", "rank {} of {} on CUDA device {} (mesh {}, NCCL {})", rank, mesh.size(), device,
                   mesh.toString(), api->features.text);
  out = std::make_unique<detail::NcclBackend>(mesh, rank, device, world, *api, options);
  return Status::ok();
}

Status createNcclBackendFromEnv(const Mesh& mesh, std::unique_ptr<Backend>& out) {
  detail::NcclBootstrapEnv env;
  CHIMERA_RETURN_IF_ERROR(detail::readNcclBootstrapEnv(env));
  CHIMERA_CHECK_ARG(mesh.size() == env.worldSize, "mesh {} has {} ranks but CHIMERA_WORLD_SIZE={}", mesh.toString(),
                    mesh.size(), env.worldSize);
  int devices = 0;
  CHIMERA_CUDA_RETURN(cudaGetDeviceCount(&devices));
  int device = 0;
  CHIMERA_RETURN_IF_ERROR(detail::chooseCudaDevice(env.localRank, env.localWorldSize, devices, device));
  return createNcclBackend(mesh, env.rank, device, env.id, out);
}

Status ncclLibraryVersion(std::string& text, int& code) {
  const detail::NcclApi* api = nullptr;
  const Status status = detail::ncclApi(api);
  text = api->features.text;
  code = api->features.code;
  return status;
}

#if CHIMERA_HAS_MPI
Status createNcclBackendMpi(const Mesh& mesh, std::unique_ptr<Backend>& out) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  CHIMERA_CHECK_ARG(initialized != 0, "MPI is not initialised: call chimera::mpiWorld() or MPI_Init first");
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHIMERA_CHECK_ARG(mesh.size() == size, "mesh {} has {} ranks but the MPI world has {}", mesh.toString(), mesh.size(),
                    size);
  // Every wait of the bootstrap is bounded by CHIMERA_TIMEOUT_MS (the default while the
  // variable is malformed, which the first agreement reports on every rank).
  std::int64_t timeoutMs = detail::kDefaultTimeoutMs;
  if (!detail::timeoutMsFromEnv(timeoutMs).isOk()) timeoutMs = detail::kDefaultTimeoutMs;
  const detail::MpiGroup world = detail::worldGroup(MPI_COMM_WORLD, rank, size, timeoutMs, "the world");
  // Everything a rank can fail on by itself is agreed on before any rank enters NCCL's
  // communicator creation, so one rank's bad environment or old library fails all ranks.
  detail::NcclBackendOptions options;
  CHIMERA_RETURN_IF_ERROR(
      detail::agreeOnStep(world, detail::ncclBackendOptionsFromEnv(options), "reading the environment"));
  const detail::NcclApi* api = nullptr;
  CHIMERA_RETURN_IF_ERROR(detail::agreeOnStep(world, detail::ncclApi(api), "checking the NCCL library"));
  int localRank = 0;
  int localRanks = 1;
  int device = 0;
  Status local = detail::nodeLocalRank(world, localRank, localRanks);
  if (local.isOk()) {
    int devices = 0;
    local = detail::cudaStatus(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    if (local.isOk()) local = detail::chooseCudaDevice(localRank, localRanks, devices, device);
  }
  CHIMERA_RETURN_IF_ERROR(detail::agreeOnStep(world, local, "selecting a CUDA device"));
  NcclUniqueId id;
  CHIMERA_RETURN_IF_ERROR(
      detail::agreeOnStep(world, rank == 0 ? createNcclUniqueId(id) : Status::ok(), "creating the NCCL unique id"));
  CHIMERA_RETURN_IF_ERROR(
      detail::broadcastFromFirst(world, std::as_writable_bytes(std::span(id.bytes)), "the NCCL unique id"));
  return createNcclBackend(mesh, rank, device, id, out);
}
#else
Status createNcclBackendMpi(const Mesh& /*mesh*/, std::unique_ptr<Backend>& /*out*/) {
  return Status::unsupported(
      "chimera was built without MPI (CHIMERA_WITH_MPI=OFF): create a unique id and call createNcclBackend");
}
#endif

}  // namespace chimera
