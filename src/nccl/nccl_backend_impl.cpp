// SPDX-License-Identifier: Apache-2.0
// Implements the NCCL backend: the Backend interface on device buffers over NCCL.
#include "nccl/nccl_backend_impl.hpp"

#include "job/job_end.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/agreement.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "core/check.hpp"
#include "kernels/cuda_check.hpp"
#include "nccl/deadline_poll.hpp"
#include "nccl/nccl_check.hpp"

namespace chimera::detail {
namespace {

constexpr const char* kLog = "nccl";

Status ncclDataType(DataType dtype, ncclDataType_t& out) {
  switch (dtype) {
    case DataType::F32: out = ncclFloat32; return Status::ok();
    case DataType::F64: out = ncclFloat64; return Status::ok();
    case DataType::F16: out = ncclFloat16; return Status::ok();
    case DataType::BF16: out = ncclBfloat16; return Status::ok();
    case DataType::I32: out = ncclInt32; return Status::ok();
    case DataType::I64: out = ncclInt64; return Status::ok();
    case DataType::U8: out = ncclUint8; return Status::ok();
  }
  return Status::invalidArgument(fmt::format("unknown DataType value {}", static_cast<int>(dtype)));
}

Status ncclReduceOp(DataType dtype, ReduceOp op, ncclRedOp_t& out) {
  switch (op) {
    case ReduceOp::Sum: out = ncclSum; break;
    case ReduceOp::Prod: out = ncclProd; break;
    case ReduceOp::Min: out = ncclMin; break;
    case ReduceOp::Max: out = ncclMax; break;
    case ReduceOp::Avg: out = ncclAvg; break;
    default: return Status::invalidArgument(fmt::format("unknown ReduceOp value {}", static_cast<int>(op)));
  }
  if (!reduceOpSupported(dtype, op)) {
    return Status::unsupported(fmt::format("{} is not supported on {}", reduceOpName(op), dataTypeName(dtype)));
  }
  return Status::ok();
}

Status checkBuffer(const void* ptr, std::size_t count, const char* what) {
  CHIMERA_CHECK_ARG(ptr != nullptr || count == 0, "{} is null but count is {}", what, count);
  return Status::ok();
}

Status checkOutOfPlace(const void* send, const void* recv, std::size_t count) {
  CHIMERA_CHECK_ARG(count == 0 || send != recv, "allToAll is out-of-place only (send == recv == {})", send);
  return Status::ok();
}

// The first failed check; the checks are cheap and evaluated in order.
Status firstError(std::initializer_list<Status> checks) {
  for (const Status& check : checks) {
    if (!check.isOk()) return check;
  }
  return Status::ok();
}

cudaStream_t cudaStreamOf(Stream stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

Status ncclStatus(ncclResult_t result, const char* what) {
  std::string message = fmt::format("{} failed: {}", what, ncclGetErrorString(result));
  if (const char* detail = ncclLastError(); *detail != '\0') {
    message += fmt::format(" ({})", detail);
  }
  if (result == ncclInvalidArgument || result == ncclInvalidUsage) return Status::invalidArgument(std::move(message));
  return Status::backendError(std::move(message));
}

Status awaitNccl(std::span<const ncclComm_t> comms, std::chrono::milliseconds timeout, std::string_view what) {
  Status failure;
  const PollState state = pollUntilSettled(
      [&] {
        bool pending = false;
        for (ncclComm_t comm : comms) {
          ncclResult_t result = ncclSuccess;
          const ncclResult_t queried = ncclCommGetAsyncError(comm, &result);
          if (queried != ncclSuccess) {
            failure = ncclStatus(queried, "ncclCommGetAsyncError");
            return PollState::Failed;
          }
          if (result == ncclInProgress) {
            pending = true;
          } else if (result != ncclSuccess) {
            failure = ncclStatus(result, std::string(what).c_str());
            return PollState::Failed;
          }
        }
        return pending ? PollState::Pending : PollState::Done;
      },
      timeout);
  if (state == PollState::Done) return Status::ok();
  if (state == PollState::Failed) return failure;
  return Status::timeout(fmt::format("{} did not complete within CHIMERA_TIMEOUT_MS={} ms", what, timeout.count()));
}

NcclBackend::NcclBackend(const Mesh& mesh, int rank, int device, ncclComm_t world, const NcclApi& api,
                         NcclBackendOptions options)
    : mesh_(mesh), rank_(rank), device_(device), world_(world), api_(api), options_(options) {}

NcclBackend::~NcclBackend() {
  if (cudaSetDevice(device_) != cudaSuccess) CHIMERA_LOG_WARN(kLog, "cudaSetDevice({}) failed in teardown", device_);
  if (agreementHost_ != nullptr) cudaFreeHost(agreementHost_);
  if (agreementDevice_ != nullptr) cudaFree(agreementDevice_);
  if (countsHost_ != nullptr) cudaFreeHost(countsHost_);
  if (countsDevice_ != nullptr) cudaFree(countsDevice_);
  if (!abortReason_.empty()) return;  // abortAll already released the communicators
  // Finalize (flush, non-blocking) every communicator, wait for all within the timeout, then
  // destroy: a dead peer makes the wait time out and the communicators are aborted instead
  // of ncclCommDestroy blocking forever.
  const std::vector<ncclComm_t> comms = communicators();
  Status finalized;
  for (ncclComm_t comm : comms) {
    const ncclResult_t result = api_.commFinalize(comm);
    if (result != ncclSuccess && result != ncclInProgress && finalized.isOk()) {
      finalized = ncclStatus(result, "ncclCommFinalize");
    }
  }
  if (finalized.isOk()) finalized = awaitNccl(comms, options_.timeout, "ncclCommFinalize");
  if (!finalized.isOk()) {
    CHIMERA_LOG_WARN(kLog, "rank {}: {}; aborting the communicators", rank_, finalized.message());
    abortReason_ = finalized.message();
    abortAll();
    return;
  }
  for (ncclComm_t comm : comms) {
    if (ncclCommDestroy(comm) != ncclSuccess) CHIMERA_LOG_WARN(kLog, "rank {}: ncclCommDestroy failed", rank_);
  }
}

std::vector<ncclComm_t> NcclBackend::communicators() const {
  std::vector<ncclComm_t> comms;
  for (const auto& [bits, comm] : groups_) comms.push_back(comm);
  comms.push_back(world_);
  return comms;
}

Status splitCommunicator(const NcclApi& api, ncclComm_t parent, int color, int key, std::chrono::milliseconds timeout,
                         std::string_view what, ncclComm_t& out) {
  out = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  auto handle = std::make_unique<ncclComm_t>(nullptr);
  const ncclResult_t result = api.commSplit(parent, color, key, handle.get(), &config);
  if (result != ncclSuccess && result != ncclInProgress) return ncclStatus(result, std::string(what).c_str());
  if (Status status = awaitNccl(std::span<const ncclComm_t>(&parent, 1), timeout, what); !status.isOk()) {
    (void)handle.release();  // NCCL may still fill it in
    return status;
  }
  out = *handle;
  if (out == nullptr) return Status::backendError(fmt::format("{} gave no communicator", what));
  return awaitNccl(std::span<const ncclComm_t>(&out, 1), timeout, what);
}

Status NcclBackend::settle(ncclResult_t result, std::span<const ncclComm_t> comms, std::string_view what) {
  if (result != ncclSuccess && result != ncclInProgress) return ncclStatus(result, std::string(what).c_str());
  return failAll(awaitNccl(comms, options_.timeout, what));
}

Status NcclBackend::failAll(Status status) {
  if (status.isOk()) return status;
  abortReason_ = status.message();
  CHIMERA_LOG_ERROR(kLog, "rank {}: {}; aborting its NCCL communicators", rank_, abortReason_);
  abortAll();
  const Status failed(status.code(), fmt::format("NCCL {}; communicators aborted", abortReason_));
  if (options_.abortOnTimeout) endJob(kLog, rank_, failed, options_.timeout);
  return failed;
}

Status NcclBackend::usable() const {
  if (abortReason_.empty()) return Status::ok();
  return Status::backendError(fmt::format("NCCL communicators were aborted: {}", abortReason_));
}

void NcclBackend::abortAll() {
  const std::vector<ncclComm_t> comms = communicators();
  const bool grouped = api_.features.groupedAbort && ncclGroupStart() == ncclSuccess;
  for (ncclComm_t comm : comms) {
    if (const ncclResult_t result = ncclCommAbort(comm); result != ncclSuccess && result != ncclInProgress) {
      CHIMERA_LOG_WARN(kLog, "rank {}: ncclCommAbort failed: {}", rank_, ncclGetErrorString(result));
    }
  }
  if (grouped) {
    if (const ncclResult_t result = ncclGroupEnd(); result != ncclSuccess && result != ncclInProgress) {
      CHIMERA_LOG_WARN(kLog, "rank {}: ncclGroupEnd of the aborts failed: {}", rank_, ncclGetErrorString(result));
    }
  }
  groups_.clear();
  world_ = nullptr;
}

Status NcclBackend::group(AxisSet axes, Stream stream, ncclComm_t& out) {
  CHIMERA_RETURN_IF_ERROR(usable());
  CHIMERA_CHECK_ARG(!axes.empty(), "empty axis set (mesh {})", mesh_.toString());
  CHIMERA_CHECK_ARG((axes.bits() & ~mesh_.allAxes().bits()) == 0, "axis set bits {:#x} name axes outside mesh {}",
                    axes.bits(), mesh_.toString());
  if (axes == mesh_.allAxes()) {
    out = world_;
    return Status::ok();
  }
  if (const auto it = groups_.find(axes.bits()); it != groups_.end()) {
    out = it->second;
    return Status::ok();
  }
  const AxisSet one[] = {axes};
  CHIMERA_RETURN_IF_ERROR(createGroupsOn(one, stream));
  out = groups_.at(axes.bits());
  return Status::ok();
}

Status NcclBackend::createGroups(std::span<const AxisSet> groups) { return createGroupsOn(groups, nullptr); }

Status NcclBackend::createGroupsOn(std::span<const AxisSet> groups, Stream stream) {
  CHIMERA_RETURN_IF_ERROR(usable());
  std::vector<AxisSet> missing;
  for (const AxisSet axes : groups) {
    CHIMERA_CHECK_ARG(!axes.empty(), "empty axis set (mesh {})", mesh_.toString());
    CHIMERA_CHECK_ARG((axes.bits() & ~mesh_.allAxes().bits()) == 0, "axis set bits {:#x} name axes outside mesh {}",
                      axes.bits(), mesh_.toString());
    if (axes == mesh_.allAxes() || groups_.count(axes.bits()) != 0) continue;
    if (std::find(missing.begin(), missing.end(), axes) == missing.end()) missing.push_back(axes);
  }
  if (missing.empty()) return Status::ok();
  CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CHIMERA_CUDA_RETURN(cudaStreamIsCapturing(cudaStreamOf(stream), &capture));
  CHIMERA_CHECK_ARG(capture == cudaStreamCaptureStatusNone,
                    "group {} has no communicator yet and the stream is being captured: create the groups "
                    "(Backend::createGroups, or one call on each group) before capturing",
                    mesh_.axesName(missing.front()));
  // A split is collective over the world: nothing may still be queued on it.
  CHIMERA_RETURN_IF_ERROR(synchronize(stream));
  for (const AxisSet axes : missing) {
    // Coloured by the rank's group along `axes`, keyed by its index inside it: comm rank ==
    // group index. Non-blocking like the world.
    ncclComm_t comm = nullptr;
    const Status split =
        splitCommunicator(api_, world_, mesh_.groupColor(rank_, axes), mesh_.groupIndex(rank_, axes), options_.timeout,
                          fmt::format("ncclCommSplit for group {}", mesh_.axesName(axes)), comm);
    if (comm != nullptr) groups_.emplace(axes.bits(), comm);
    CHIMERA_RETURN_IF_ERROR(failAll(split));
    CHIMERA_LOG_DEBUG(kLog, "created NCCL communicator for group {} ({} ranks)", mesh_.axesName(axes),
                      mesh_.groupSize(axes));
  }
  return Status::ok();
}

bool NcclBackend::hasGroup(AxisSet axes) const {
  return axes == mesh_.allAxes() || mesh_.groupSize(axes) == 1 || groups_.contains(axes.bits());
}

Status NcclBackend::agree(ncclComm_t comm, AxisSet axes, const CallSignature& signature, const Status& local,
                          Stream stream) {
  if (!options_.checkArgs) return local;
  // The agreement's reduction: a MIN ncclAllReduce of the words, staged through pinned memory.
  const GroupMin min = [&](std::span<std::int64_t> words) -> Status {
    const std::size_t bytes = words.size() * sizeof(std::int64_t);
    if (bytes > agreementBytes_) {
      CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
      if (agreementHost_ != nullptr) cudaFreeHost(agreementHost_);
      if (agreementDevice_ != nullptr) cudaFree(agreementDevice_);
      agreementHost_ = nullptr;
      agreementDevice_ = nullptr;
      agreementBytes_ = 0;
      CHIMERA_CUDA_RETURN(cudaMallocHost(reinterpret_cast<void**>(&agreementHost_), bytes));
      CHIMERA_CUDA_RETURN(cudaMalloc(reinterpret_cast<void**>(&agreementDevice_), bytes));
      agreementBytes_ = bytes;
    }
    std::memcpy(agreementHost_, words.data(), bytes);
    const cudaStream_t s = cudaStreamOf(stream);
    CHIMERA_CUDA_RETURN(cudaMemcpyAsync(agreementDevice_, agreementHost_, bytes, cudaMemcpyHostToDevice, s));
    CHIMERA_RETURN_IF_ERROR(
        settle(ncclAllReduce(agreementDevice_, agreementDevice_, words.size(), ncclInt64, ncclMin, comm, s), comm,
               "ncclAllReduce of the argument agreement"));
    CHIMERA_CUDA_RETURN(cudaMemcpyAsync(agreementHost_, agreementDevice_, bytes, cudaMemcpyDeviceToHost, s));
    CHIMERA_RETURN_IF_ERROR(synchronize(stream));
    std::memcpy(words.data(), agreementHost_, bytes);
    return Status::ok();
  };
  return agreeOnCall(signature, local, rank_, mesh_.axesName(axes), min);
}

Status NcclBackend::allReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                              AxisSet axes, Stream stream) {
  ncclComm_t comm = nullptr;
  CHIMERA_RETURN_IF_ERROR(group(axes, stream, comm));
  ncclDataType_t type{};
  ncclRedOp_t redOp{};
  const Status local = firstError({ncclDataType(dtype, type), ncclReduceOp(dtype, op, redOp),
                                   checkBuffer(send, count, "send buffer"), checkBuffer(recv, count, "recv buffer")});
  const CallSignature signature{OpKind::AllReduce, static_cast<std::int64_t>(count), dtype, op, 0};
  CHIMERA_RETURN_IF_ERROR(agree(comm, axes, signature, local, stream));
  if (count == 0) return Status::ok();
  return settle(ncclAllReduce(send, recv, count, type, redOp, comm, cudaStreamOf(stream)), comm, "ncclAllReduce");
  return Status::ok();
}

Status NcclBackend::reduceScatter(const void* send, void* recv, std::size_t recvCount, DataType dtype, ReduceOp op,
                                  AxisSet axes, Stream stream) {
  ncclComm_t comm = nullptr;
  CHIMERA_RETURN_IF_ERROR(group(axes, stream, comm));
  ncclDataType_t type{};
  ncclRedOp_t redOp{};
  const Status local =
      firstError({ncclDataType(dtype, type), ncclReduceOp(dtype, op, redOp),
                  checkBuffer(send, recvCount, "send buffer"), checkBuffer(recv, recvCount, "recv buffer")});
  const CallSignature signature{OpKind::ReduceScatter, static_cast<std::int64_t>(recvCount), dtype, op, 0};
  CHIMERA_RETURN_IF_ERROR(agree(comm, axes, signature, local, stream));
  if (recvCount == 0) return Status::ok();
  return settle(ncclReduceScatter(send, recv, recvCount, type, redOp, comm, cudaStreamOf(stream)), comm,
                "ncclReduceScatter");
  return Status::ok();
}

Status NcclBackend::refuseCollective(AxisSet axes, const Status& local, Stream stream) {
  CHIMERA_CHECK_ARG(!local.isOk(), "refuseCollective: the local status must be an error");
  ncclComm_t comm = nullptr;
  CHIMERA_RETURN_IF_ERROR(group(axes, stream, comm));
  return agree(comm, axes, CallSignature{}, local, stream);
}

Status NcclBackend::agreeOnArguments(AxisSet axes, std::int64_t count, int root, const Status& local, Stream stream) {
  ncclComm_t comm = nullptr;
  CHIMERA_RETURN_IF_ERROR(group(axes, stream, comm));
  return agree(comm, axes, CallSignature{OpKind::ManyToMany, count, DataType::U8, ReduceOp::Sum, root}, local, stream);
}

Status NcclBackend::allGather(const void* send, void* recv, std::size_t sendCount, DataType dtype, AxisSet axes,
                              Stream stream) {
  ncclComm_t comm = nullptr;
  CHIMERA_RETURN_IF_ERROR(group(axes, stream, comm));
  ncclDataType_t type{};
  const Status local = firstError({ncclDataType(dtype, type), checkBuffer(send, sendCount, "send buffer"),
                                   checkBuffer(recv, sendCount, "recv buffer")});
  const CallSignature signature{OpKind::AllGather, static_cast<std::int64_t>(sendCount), dtype};
  CHIMERA_RETURN_IF_ERROR(agree(comm, axes, signature, local, stream));
  if (sendCount == 0) return Status::ok();
  return settle(ncclAllGather(send, recv, sendCount, type, comm, cudaStreamOf(stream)), comm, "ncclAllGather");
  return Status::ok();
}

Status NcclBackend::allToAll(const void* send, void* recv, std::size_t countPerPeer, DataType dtype, AxisSet axes,
                             Stream stream) {
  ncclComm_t comm = nullptr;
  CHIMERA_RETURN_IF_ERROR(group(axes, stream, comm));
  ncclDataType_t type{};
  const Status local =
      firstError({ncclDataType(dtype, type), checkBuffer(send, countPerPeer, "send buffer"),
                  checkBuffer(recv, countPerPeer, "recv buffer"), checkOutOfPlace(send, recv, countPerPeer)});
  const CallSignature signature{OpKind::AllToAll, static_cast<std::int64_t>(countPerPeer), dtype};
  CHIMERA_RETURN_IF_ERROR(agree(comm, axes, signature, local, stream));
  if (countPerPeer == 0) return Status::ok();
  if (api_.allToAll != nullptr && !options_.groupedAllToAll) {
    return settle(api_.allToAll(send, recv, countPerPeer, type, comm, cudaStreamOf(stream)), comm, "ncclAlltoAll");
  }
  return allToAllGrouped(send, recv, countPerPeer, dtype, comm, stream);
}

Status NcclBackend::allToAllGrouped(const void* send, void* recv, std::size_t countPerPeer, DataType dtype,
                                    ncclComm_t comm, Stream stream) {
  ncclDataType_t type{};
  CHIMERA_RETURN_IF_ERROR(ncclDataType(dtype, type));
  int members = 0;
  CHIMERA_NCCL_RETURN(ncclCommCount(comm, &members));
  const std::size_t blockBytes = countPerPeer * dataTypeSize(dtype);
  const auto* sendBytes = static_cast<const std::byte*>(send);
  auto* recvBytes = static_cast<std::byte*>(recv);
  CHIMERA_NCCL_RETURN(ncclGroupStart());
  Status status;
  for (int peer = 0; peer < members && status.isOk(); ++peer) {
    const std::size_t offset = static_cast<std::size_t>(peer) * blockBytes;
    const ncclResult_t sent = ncclSend(sendBytes + offset, countPerPeer, type, peer, comm, cudaStreamOf(stream));
    const ncclResult_t received =
        sent == ncclSuccess ? ncclRecv(recvBytes + offset, countPerPeer, type, peer, comm, cudaStreamOf(stream)) : sent;
    if (received != ncclSuccess) status = ncclStatus(received, "ncclSend/ncclRecv of allToAll");
  }
  // The group must be closed even after a failed enqueue.
  const ncclResult_t ended = ncclGroupEnd();
  if (!status.isOk()) {
    (void)settle(ended, comm, "ncclGroupEnd of allToAll");
    return status;
  }
  return settle(ended, comm, "ncclGroupEnd of allToAll");
}

Status NcclBackend::allToAllV(const void* send, std::span<const std::size_t> sendCounts,
                              std::span<const std::size_t> sendOffsets, void* recv,
                              std::span<const std::size_t> recvCounts, std::span<const std::size_t> recvOffsets,
                              DataType dtype, AxisSet axes, Stream stream) {
  ncclComm_t comm = nullptr;
  CHIMERA_RETURN_IF_ERROR(group(axes, stream, comm));
  const auto members = static_cast<std::size_t>(mesh_.groupSize(axes));
  ncclDataType_t type{};
  Status local = ncclDataType(dtype, type);
  if (local.isOk() && (sendCounts.size() != members || sendOffsets.size() != members || recvCounts.size() != members ||
                       recvOffsets.size() != members))
    local = Status::invalidArgument(fmt::format(
        "allToAllV over {}: counts and offsets need {} entries (one per member)", mesh_.axesName(axes), members));
  for (std::size_t j = 0; j < members && local.isOk(); ++j) {
    local =
        firstError({checkBuffer(send, sendCounts[j], "send buffer"), checkBuffer(recv, recvCounts[j], "recv buffer")});
  }
  // The counts differ between members by design: the agreement compares the call and dtype only.
  const CallSignature signature{OpKind::AllToAll, -1, dtype};
  CHIMERA_RETURN_IF_ERROR(agree(comm, axes, signature, local, stream));
  const std::size_t es = dataTypeSize(dtype);
  CHIMERA_NCCL_RETURN(ncclGroupStart());
  Status status;
  for (std::size_t peer = 0; peer < members && status.isOk(); ++peer) {
    const int p = static_cast<int>(peer);
    ncclResult_t result = ncclSuccess;
    if (sendCounts[peer] > 0)
      result = ncclSend(static_cast<const std::byte*>(send) + sendOffsets[peer] * es, sendCounts[peer], type, p, comm,
                        cudaStreamOf(stream));
    if (result == ncclSuccess && recvCounts[peer] > 0)
      result = ncclRecv(static_cast<std::byte*>(recv) + recvOffsets[peer] * es, recvCounts[peer], type, p, comm,
                        cudaStreamOf(stream));
    if (result != ncclSuccess) status = ncclStatus(result, "ncclSend/ncclRecv of allToAllV");
  }
  // The group must be closed even after a failed enqueue.
  const ncclResult_t ended = ncclGroupEnd();
  if (!status.isOk()) {
    (void)settle(ended, comm, "ncclGroupEnd of allToAllV");
    return status;
  }
  return settle(ended, comm, "ncclGroupEnd of allToAllV");
}

Status NcclBackend::exchangeCounts(std::span<const std::int32_t> send, std::span<std::int32_t> recv, AxisSet axes,
                                   Stream stream) {
  const auto members = static_cast<std::size_t>(mesh_.groupSize(axes));
  CHIMERA_CHECK_ARG(!send.empty() && send.size() % members == 0 && recv.size() == send.size(),
                    "exchangeCounts over {}: {} and {} counts for {} members (the same number for each)",
                    mesh_.axesName(axes), send.size(), recv.size(), members);
  const std::size_t total = send.size();
  const std::size_t bytes = 2 * total * sizeof(std::int32_t);
  if (bytes > countsBytes_) {
    CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
    if (countsHost_ != nullptr) cudaFreeHost(countsHost_);
    if (countsDevice_ != nullptr) cudaFree(countsDevice_);
    countsHost_ = nullptr;
    countsDevice_ = nullptr;
    countsBytes_ = 0;
    CHIMERA_CUDA_RETURN(cudaMallocHost(reinterpret_cast<void**>(&countsHost_), bytes));
    CHIMERA_CUDA_RETURN(cudaMalloc(reinterpret_cast<void**>(&countsDevice_), bytes));
    countsBytes_ = bytes;
  }
  std::memcpy(countsHost_, send.data(), total * sizeof(std::int32_t));
  const cudaStream_t s = cudaStreamOf(stream);
  CHIMERA_CUDA_RETURN(
      cudaMemcpyAsync(countsDevice_, countsHost_, total * sizeof(std::int32_t), cudaMemcpyHostToDevice, s));
  CHIMERA_RETURN_IF_ERROR(allToAll(countsDevice_, countsDevice_ + total, total / members, DataType::I32, axes, stream));
  // The one host copy of a routed dispatch: the counts size the data exchange that follows.
  CHIMERA_CUDA_RETURN(cudaMemcpyAsync(countsHost_ + total, countsDevice_ + total, total * sizeof(std::int32_t),
                                      cudaMemcpyDeviceToHost, s));
  CHIMERA_RETURN_IF_ERROR(synchronize(stream));
  std::memcpy(recv.data(), countsHost_ + total, total * sizeof(std::int32_t));
  return Status::ok();
}

Status NcclBackend::broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root, AxisSet axes,
                              Stream stream) {
  ncclComm_t comm = nullptr;
  CHIMERA_RETURN_IF_ERROR(group(axes, stream, comm));
  ncclDataType_t type{};
  const int members = mesh_.groupSize(axes);
  const bool isRoot = mesh_.groupIndex(rank_, axes) == root;
  const Status local =
      firstError({ncclDataType(dtype, type), checkBuffer(recv, count, "recv buffer"),
                  isRoot ? checkBuffer(send, count, "root's send buffer") : Status::ok(),
                  root >= 0 && root < members
                      ? Status::ok()
                      : Status::invalidArgument(fmt::format("broadcast root {} outside group {} of {} ranks", root,
                                                            mesh_.axesName(axes), members))});
  const CallSignature signature{OpKind::Broadcast, static_cast<std::int64_t>(count), dtype, ReduceOp::Sum, root};
  CHIMERA_RETURN_IF_ERROR(agree(comm, axes, signature, local, stream));
  if (count == 0) return Status::ok();
  return settle(ncclBroadcast(send, recv, count, type, root, comm, cudaStreamOf(stream)), comm, "ncclBroadcast");
  return Status::ok();
}

Status NcclBackend::send(const void* buf, std::size_t count, DataType dtype, int peer, Stream stream) {
  // A Send op only reads its buffer; P2POp holds one pointer type for both kinds.
  const P2POp op{P2POp::Kind::Send, const_cast<void*>(buf), count, dtype, peer};
  CHIMERA_CHECK_ARG(peer != rank_, "send to self (rank {}) would never match a receive: use groupedP2P", peer);
  return groupedP2P(std::span<const P2POp>(&op, 1), stream);
}

Status NcclBackend::recv(void* buf, std::size_t count, DataType dtype, int peer, Stream stream) {
  const P2POp op{P2POp::Kind::Recv, buf, count, dtype, peer};
  CHIMERA_CHECK_ARG(peer != rank_, "receive from self (rank {}) would never match a send: use groupedP2P", peer);
  return groupedP2P(std::span<const P2POp>(&op, 1), stream);
}

Status NcclBackend::groupedP2P(std::span<const P2POp> ops, Stream stream) {
  CHIMERA_RETURN_IF_ERROR(usable());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    ncclDataType_t type{};
    CHIMERA_RETURN_IF_ERROR(ncclDataType(op.dtype, type));
    CHIMERA_CHECK_ARG(op.kind == P2POp::Kind::Send || op.kind == P2POp::Kind::Recv, "op {}: unknown kind {}", i,
                      static_cast<int>(op.kind));
    CHIMERA_CHECK_ARG(op.peer >= 0 && op.peer < mesh_.size(), "op {}: peer {} outside 0..{}", i, op.peer,
                      mesh_.size() - 1);
    CHIMERA_CHECK_ARG(op.buffer != nullptr || op.count == 0, "op {}: buffer is null but count is {}", i, op.count);
    CHIMERA_CHECK_ARG(op.box == nullptr, "op {}: a box (P2POp::box), which the NCCL backend does not move (movesBoxes)",
                      i);
  }
  CHIMERA_NCCL_RETURN(ncclGroupStart());
  Status status;
  for (std::size_t i = 0; i < ops.size() && status.isOk(); ++i) {
    const P2POp& op = ops[i];
    if (op.count == 0) continue;
    ncclDataType_t type{};
    status = ncclDataType(op.dtype, type);
    if (!status.isOk()) break;
    const ncclResult_t result = op.kind == P2POp::Kind::Send
                                    ? ncclSend(op.buffer, op.count, type, op.peer, world_, cudaStreamOf(stream))
                                    : ncclRecv(op.buffer, op.count, type, op.peer, world_, cudaStreamOf(stream));
    if (result != ncclSuccess) status = ncclStatus(result, op.kind == P2POp::Kind::Send ? "ncclSend" : "ncclRecv");
  }
  // The group must be closed even after a failed enqueue.
  const ncclResult_t ended = ncclGroupEnd();
  if (!status.isOk()) {
    (void)settle(ended, world_, "ncclGroupEnd of groupedP2P");
    return status;
  }
  return settle(ended, world_, "ncclGroupEnd of groupedP2P");
}

Status NcclBackend::allocateHost(std::size_t bytes, void** out) {
  CHIMERA_CHECK_ARG(out != nullptr, "allocateHost: null output pointer");
  CHIMERA_CHECK_ARG(bytes > 0, "allocateHost: 0 bytes requested");
  CHIMERA_CUDA_RETURN(cudaMallocHost(out, bytes));
  return Status::ok();
}

void NcclBackend::deallocateHost(void* ptr) {
  if (ptr != nullptr && cudaFreeHost(ptr) != cudaSuccess) {
    CHIMERA_LOG_WARN(kLog, "cudaFreeHost({}) failed: {}", ptr, cudaGetErrorString(cudaGetLastError()));
  }
}

// Polls instead of cudaStreamSynchronize: a blocking wait on a stream whose NCCL kernel
// waits for a dead peer would never return. Between polls NCCL is asked for asynchronous
// errors; either an error or no completion by the deadline aborts every communicator.
Status NcclBackend::synchronize(Stream stream) {
  CHIMERA_RETURN_IF_ERROR(usable());
  CHIMERA_CUDA_RETURN(cudaSetDevice(device_));
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  auto pause = std::chrono::microseconds(1);
  while (true) {
    const cudaError_t query = cudaStreamQuery(cudaStreamOf(stream));
    if (query == cudaSuccess) return Status::ok();
    if (query != cudaErrorNotReady) return cudaStatus(query, "cudaStreamQuery");
    std::vector<std::pair<std::uint32_t, ncclComm_t>> comms(groups_.begin(), groups_.end());
    comms.emplace_back(mesh_.allAxes().bits(), world_);
    for (const auto& [bits, comm] : comms) {  // copied: abortAll clears groups_
      ncclResult_t asyncError = ncclSuccess;
      CHIMERA_NCCL_RETURN(ncclCommGetAsyncError(comm, &asyncError));
      if (asyncError != ncclSuccess && asyncError != ncclInProgress) {
        const Status error = ncclStatus(asyncError, "asynchronous NCCL operation");
        abortReason_ = fmt::format("group {}: {}", mesh_.axesName(AxisSet::fromBits(bits)), error.message());
        abortAll();
        if (options_.abortOnTimeout) endJob(kLog, rank_, Status::backendError(abortReason_), options_.timeout);
        return Status::backendError(abortReason_);
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      abortReason_ = fmt::format("stream did not complete within CHIMERA_TIMEOUT_MS={} ms", options_.timeout.count());
      CHIMERA_LOG_ERROR(kLog, "rank {}: {}; aborting its NCCL communicators", rank_, abortReason_);
      abortAll();
      const Status failed = Status::timeout(fmt::format("NCCL {}; communicators aborted", abortReason_));
      if (options_.abortOnTimeout) endJob(kLog, rank_, failed, options_.timeout);
      return failed;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace chimera::detail
