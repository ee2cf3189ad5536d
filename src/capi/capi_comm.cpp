// SPDX-License-Identifier: Apache-2.0
// C API: results, communicators, plain collectives, redistribution.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "capi/capi_handles.hpp"
#include "capi/capi_registry.hpp"
#include "chimera/mpi_backend.hpp"
#include "chimera/nccl_backend.hpp"
#include "core/check.hpp"
#include "core/checked_math.hpp"

namespace chimera::detail {
namespace {
thread_local std::string lastError;
}  // namespace

chimeraResult_t toResult(const Status& status) {
  if (status.isOk()) return chimeraSuccess;
  lastError = status.toString();
  switch (status.code()) {
    case StatusCode::Ok: return chimeraSuccess;
    case StatusCode::InvalidArgument: return chimeraInvalidArgument;
    case StatusCode::Unsupported: return chimeraUnsupported;
    case StatusCode::Mismatch: return chimeraMismatch;
    case StatusCode::BackendError: return chimeraBackendError;
    case StatusCode::Timeout: return chimeraTimeout;
    case StatusCode::Internal: return chimeraInternalError;
  }
  return chimeraInternalError;
}

Status fromCDataType(const chimeraDataType_t& datatype, DataType& out) {
  const long long value = cEnumValue(datatype);
  CHIMERA_CHECK_ARG(value >= 0 && value <= static_cast<int>(DataType::U8), "unknown chimeraDataType_t {}", value);
  out = static_cast<DataType>(value);
  return Status::ok();
}

const char* lastErrorText() { return lastError.c_str(); }

}  // namespace chimera::detail

namespace {

using chimera::Status;
using chimera::detail::toResult;

using chimera::detail::guardedCall;

using chimera::detail::CommObject;
using chimera::detail::lookup;

// InvalidArgument when `count` elements of `type`, times the size of the group along `axes`
// when `perRank`, do not fit in one buffer.
Status checkCount(const CommObject* comm, std::size_t count, chimera::DataType type, chimera::AxisSet axes,
                  bool perRank, const char* what) {
  std::size_t bytes = 0;
  const auto parts = perRank ? static_cast<std::size_t>(comm->mesh.groupSize(axes)) : std::size_t{1};
  return chimera::detail::bufferBytes(count, chimera::dataTypeSize(type), parts, what, bytes);
}

// Looks up the live communicator `commHandle` into `comm`, then reads the axes of the call's
// group. Axes that name no group cannot be refused in the group: they are announced to every
// rank (Backend::announceFault). A handle that is not live names no backend: that rank fails
// alone, and its peers wait in their call until their timeout.
Status groupArgs(chimeraComm_t commHandle, const char* axesText, CommObject*& comm, chimera::AxisSet& axes) {
  CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
  const Status status =
      axesText == nullptr ? Status::invalidArgument("null axes text") : comm->mesh.parseAxes(axesText, axes);
  return status.isOk() ? status : comm->backend->announceFault(status);
}

// `local`, the verdict of a collective's own checks of its C arguments (datatype, op, count)
// once its group is known: a failure refuses the collective (Backend::refuseCollective), so the
// group's other members fail at once instead of waiting for this rank until their timeout.
Status refuseUnlessOk(CommObject* comm, chimera::AxisSet axes, const Status& local) {
  if (local.isOk()) return local;
  return comm->backend->refuseCollective(axes, local, comm->stream);
}

Status reduceOp(const chimeraRedOp_t& op, chimera::ReduceOp& out) {
  const long long value = chimera::detail::cEnumValue(op);
  CHIMERA_CHECK_ARG(value >= 0 && value <= static_cast<int>(chimera::ReduceOp::Avg), "unknown chimeraRedOp_t {}",
                    value);
  out = static_cast<chimera::ReduceOp>(value);
  return Status::ok();
}

Status parseMesh(const char* text, int world, chimera::Mesh& out) {
  CHIMERA_CHECK_ARG(text != nullptr, "null mesh text");
  return chimera::Mesh::parse(text, world, out);
}

}  // namespace

extern "C" {

const char* chimeraGetErrorString(chimeraResult_t result) {
  switch (result) {
    case chimeraSuccess: return "success";
    case chimeraInvalidArgument: return "invalid argument";
    case chimeraUnsupported: return "unsupported";
    case chimeraMismatch: return "ranks disagree (mismatch)";
    case chimeraBackendError: return "backend error (MPI, NCCL or CUDA)";
    case chimeraTimeout: return "timeout";
    case chimeraInternalError: return "internal error";
  }
  return "unknown chimeraResult_t";
}

const char* chimeraGetLastError(void) { return chimera::detail::lastErrorText(); }

chimeraResult_t chimeraCommInitMpi(chimeraComm_t* comm, const char* mesh) {
#ifdef CHIMERA_HAS_MPI
  auto run = [&]() -> Status {
    CHIMERA_CHECK_ARG(comm != nullptr, "null chimeraComm_t* to fill");
    int rank = 0;
    int size = 0;
    CHIMERA_RETURN_IF_ERROR(chimera::mpiWorld(rank, size));
    auto made = std::make_unique<CommObject>();
    CHIMERA_RETURN_IF_ERROR(parseMesh(mesh, size, made->mesh));
    CHIMERA_RETURN_IF_ERROR(chimera::createMpiBackend(made->mesh, made->backend));
    *comm = chimera::detail::publish<chimeraComm_t>(std::move(made));
    return Status::ok();
  };
  return guardedCall("chimeraCommInitMpi", run);
#else
  (void)comm;
  (void)mesh;
  return toResult(Status::unsupported("chimera was built without MPI (CHIMERA_WITH_MPI=OFF)"));
#endif
}

chimeraResult_t chimeraGetUniqueId(chimeraUniqueId* id) {
#ifdef CHIMERA_HAS_CUDA
  return guardedCall("chimeraGetUniqueId", [&]() -> Status {
    CHIMERA_CHECK_ARG(id != nullptr, "null chimeraUniqueId*");
    chimera::NcclUniqueId nccl;
    CHIMERA_RETURN_IF_ERROR(chimera::createNcclUniqueId(nccl));
    std::memcpy(id->internal, nccl.bytes.data(), sizeof(id->internal));
    return Status::ok();
  });
#else
  (void)id;
  return toResult(Status::unsupported("chimera was built without CUDA: no NCCL unique id"));
#endif
}

chimeraResult_t chimeraCommInitRank(chimeraComm_t* comm, const char* mesh, int rank, int device, chimeraUniqueId id) {
#ifdef CHIMERA_HAS_CUDA
  auto run = [&]() -> Status {
    CHIMERA_CHECK_ARG(comm != nullptr, "null chimeraComm_t* to fill");
    CHIMERA_CHECK_ARG(mesh != nullptr, "null mesh text");
    auto made = std::make_unique<CommObject>();
    CHIMERA_RETURN_IF_ERROR(chimera::Mesh::parse(mesh, made->mesh));
    chimera::NcclUniqueId nccl;
    std::memcpy(nccl.bytes.data(), id.internal, sizeof(id.internal));
    CHIMERA_RETURN_IF_ERROR(chimera::createNcclBackend(made->mesh, rank, device, nccl, made->backend));
    *comm = chimera::detail::publish<chimeraComm_t>(std::move(made));
    return Status::ok();
  };
  return guardedCall("chimeraCommInitRank", run);
#else
  (void)comm;
  (void)mesh;
  (void)rank;
  (void)device;
  (void)id;
  return toResult(Status::unsupported("chimera was built without CUDA: no NCCL communicator"));
#endif
}

chimeraResult_t chimeraCommDestroy(chimeraComm_t comm) {
  return guardedCall("chimeraCommDestroy", [&]() -> Status { return chimera::detail::destroy<CommObject>(comm); });
}

chimeraResult_t chimeraCommRank(chimeraComm_t commHandle, int* rank) {
  return guardedCall("chimeraCommRank", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
    CHIMERA_CHECK_ARG(rank != nullptr, "null int* for the rank");
    *rank = comm->backend->rank();
    return Status::ok();
  });
}

chimeraResult_t chimeraCommSize(chimeraComm_t commHandle, int* size) {
  return guardedCall("chimeraCommSize", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
    CHIMERA_CHECK_ARG(size != nullptr, "null int* for the size");
    *size = comm->mesh.size();
    return Status::ok();
  });
}

void chimeraFinalize(void) {
#ifdef CHIMERA_HAS_MPI
  chimera::finalizeMpi();
#endif
}

chimeraResult_t chimeraAllReduce(const void* sendbuff, void* recvbuff, size_t count, chimeraDataType_t datatype,
                                 chimeraRedOp_t op, const char* axes, chimeraComm_t commHandle) {
  chimera::DataType type = chimera::DataType::F32;
  chimera::AxisSet set;
  chimera::ReduceOp reduce = chimera::ReduceOp::Sum;
  return guardedCall("chimeraAllReduce", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(groupArgs(commHandle, axes, comm, set));
    Status local = chimera::detail::fromCDataType(datatype, type);
    if (local.isOk()) local = reduceOp(op, reduce);
    if (local.isOk()) local = checkCount(comm, count, type, set, false, "chimeraAllReduce count");
    CHIMERA_RETURN_IF_ERROR(refuseUnlessOk(comm, set, local));
    return comm->backend->allReduce(sendbuff, recvbuff, count, type, reduce, set, comm->stream);
  });
}

chimeraResult_t chimeraReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, chimeraDataType_t datatype,
                                     chimeraRedOp_t op, const char* axes, chimeraComm_t commHandle) {
  chimera::DataType type = chimera::DataType::F32;
  chimera::AxisSet set;
  chimera::ReduceOp reduce = chimera::ReduceOp::Sum;
  return guardedCall("chimeraReduceScatter", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(groupArgs(commHandle, axes, comm, set));
    Status local = chimera::detail::fromCDataType(datatype, type);
    if (local.isOk()) local = reduceOp(op, reduce);
    if (local.isOk()) local = checkCount(comm, recvcount, type, set, true, "chimeraReduceScatter recvcount");
    CHIMERA_RETURN_IF_ERROR(refuseUnlessOk(comm, set, local));
    return comm->backend->reduceScatter(sendbuff, recvbuff, recvcount, type, reduce, set, comm->stream);
  });
}

chimeraResult_t chimeraAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, chimeraDataType_t datatype,
                                 const char* axes, chimeraComm_t commHandle) {
  chimera::DataType type = chimera::DataType::F32;
  chimera::AxisSet set;
  return guardedCall("chimeraAllGather", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(groupArgs(commHandle, axes, comm, set));
    Status local = chimera::detail::fromCDataType(datatype, type);
    if (local.isOk()) local = checkCount(comm, sendcount, type, set, true, "chimeraAllGather sendcount");
    CHIMERA_RETURN_IF_ERROR(refuseUnlessOk(comm, set, local));
    return comm->backend->allGather(sendbuff, recvbuff, sendcount, type, set, comm->stream);
  });
}

chimeraResult_t chimeraAllToAll(const void* sendbuff, void* recvbuff, size_t countPerPeer, chimeraDataType_t datatype,
                                const char* axes, chimeraComm_t commHandle) {
  chimera::DataType type = chimera::DataType::F32;
  chimera::AxisSet set;
  return guardedCall("chimeraAllToAll", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(groupArgs(commHandle, axes, comm, set));
    Status local = chimera::detail::fromCDataType(datatype, type);
    if (local.isOk()) local = checkCount(comm, countPerPeer, type, set, true, "chimeraAllToAll countPerPeer");
    CHIMERA_RETURN_IF_ERROR(refuseUnlessOk(comm, set, local));
    return comm->backend->allToAll(sendbuff, recvbuff, countPerPeer, type, set, comm->stream);
  });
}

chimeraResult_t chimeraBroadcast(const void* sendbuff, void* recvbuff, size_t count, chimeraDataType_t datatype,
                                 int root, const char* axes, chimeraComm_t commHandle) {
  chimera::DataType type = chimera::DataType::F32;
  chimera::AxisSet set;
  return guardedCall("chimeraBroadcast", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(groupArgs(commHandle, axes, comm, set));
    Status local = chimera::detail::fromCDataType(datatype, type);
    if (local.isOk()) local = checkCount(comm, count, type, set, false, "chimeraBroadcast count");
    CHIMERA_RETURN_IF_ERROR(refuseUnlessOk(comm, set, local));
    return comm->backend->broadcast(sendbuff, recvbuff, count, type, root, set, comm->stream);
  });
}

// A send or recv whose C arguments (datatype, count) fail its own checks refuses its transfer
// (Backend::refuseTransfers), so its peer fails at once instead of waiting until its timeout.
chimeraResult_t chimeraSend(const void* sendbuff, size_t count, chimeraDataType_t datatype, int peer,
                            chimeraComm_t commHandle) {
  chimera::DataType type = chimera::DataType::F32;
  return guardedCall("chimeraSend", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
    Status local = chimera::detail::fromCDataType(datatype, type);
    if (local.isOk()) local = checkCount(comm, count, type, {}, false, "chimeraSend count");
    if (!local.isOk()) {
      const chimera::P2POp op{chimera::P2POp::Kind::Send, const_cast<void*>(sendbuff), count, type, peer};
      return comm->backend->refuseTransfers({&op, 1}, local, comm->stream);
    }
    return comm->backend->send(sendbuff, count, type, peer, comm->stream);
  });
}

chimeraResult_t chimeraRecv(void* recvbuff, size_t count, chimeraDataType_t datatype, int peer,
                            chimeraComm_t commHandle) {
  chimera::DataType type = chimera::DataType::F32;
  return guardedCall("chimeraRecv", [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
    Status local = chimera::detail::fromCDataType(datatype, type);
    if (local.isOk()) local = checkCount(comm, count, type, {}, false, "chimeraRecv count");
    if (!local.isOk()) {
      const chimera::P2POp op{chimera::P2POp::Kind::Recv, recvbuff, count, type, peer};
      return comm->backend->refuseTransfers({&op, 1}, local, comm->stream);
    }
    return comm->backend->recv(recvbuff, count, type, peer, comm->stream);
  });
}

chimeraResult_t chimeraRedistribute(const char* shape, chimeraDataType_t datatype, const char* from, const char* to,
                                    const void* input, size_t inputBytes, void* output, size_t outputBytes,
                                    chimeraComm_t commHandle) {
  auto run = [&]() -> Status {
    CommObject* comm = nullptr;
    CHIMERA_RETURN_IF_ERROR(lookup(commHandle, comm));
    CHIMERA_CHECK_ARG(shape != nullptr && from != nullptr && to != nullptr, "null shape or layout text");
    chimera::TensorSpec spec;
    CHIMERA_RETURN_IF_ERROR(chimera::detail::fromCDataType(datatype, spec.dtype));
    CHIMERA_RETURN_IF_ERROR(chimera::TensorSpec::parseShape(shape, spec.shape));
    chimera::Layout source;
    chimera::Layout target;
    CHIMERA_RETURN_IF_ERROR(chimera::Layout::parse(from, comm->mesh, source));
    CHIMERA_RETURN_IF_ERROR(chimera::Layout::parse(to, comm->mesh, target));
    if (!comm->executor) comm->executor = std::make_unique<chimera::Executor>(*comm->backend);
    return comm->executor->redistribute(spec, source, target, input, inputBytes, output, outputBytes, comm->stream);
  };
  return guardedCall("chimeraRedistribute", run);
}

}  // extern "C"
