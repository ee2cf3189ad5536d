// SPDX-License-Identifier: Apache-2.0
// Implements the MPI backend: the Backend interface over host memory and MPI.
#include "mpi/mpi_backend_impl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "box/box_ops.hpp"
#include "common/host_reduce.hpp"
#include "common/log.hpp"
#include "core/check.hpp"
#include "core/checked_math.hpp"
#include "job/job_end.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/exchange.hpp"
#include "mpi/hierarchical.hpp"
#include "mpi/mpi_util.hpp"
#include "mpi/p2p_check.hpp"
#include "mpi/range_exchange.hpp"
#include "mpi/ring.hpp"

namespace chimera::detail {
namespace {

constexpr int kP2PTag = 0x5032;        // 'P2' (+ channel)
constexpr int kBoxTag = 0x6200;        // + channel: a box's address
constexpr int kBoxAnswerTag = 0x6300;  // + channel: its receiver's answer

// Smallest per-rank message (bytes) from which chimera's own algorithm beats the MPI
// library's, measured with 8 ranks on the 2-core development host (docs/performance.md).
// The library's AllToAll and Broadcast were never slower there, so Auto keeps them.
std::size_t pointToPointThreshold(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce: return std::size_t{1} << 20;
    case OpKind::ReduceScatter: return std::size_t{256} << 10;
    case OpKind::AllGather: return std::size_t{1} << 20;
    default:  // AllToAll, Broadcast
      break;
  }
  return std::numeric_limits<std::size_t>::max();
}

// bufferBytes for a call's buffers of `count` elements times `parts`, the result discarded.
Status checkBytes(std::size_t count, DataType dtype, int parts, const char* what) {
  std::size_t bytes = 0;
  return bufferBytes(count, dataTypeSize(dtype), static_cast<std::size_t>(parts), what, bytes);
}

}  // namespace

MpiBackend::MpiBackend(Mesh mesh, int rank, MPI_Comm world, MPI_Comm p2p, MPI_Comm notices, MpiBackendOptions options,
                       std::vector<int> hosts, PeerMemory peers)
    : mesh_(std::move(mesh)),
      rank_(rank),
      world_(world),
      p2p_(p2p),
      options_(options),
      notices_(notices, rank, mesh_.size(), options.checkArgs),
      p2pGroup_(worldGroup(p2p, rank, mesh_.size(), options.timeoutMs, "point-to-point transfers", &notices_)),
      groups_(world, mesh_, rank, options.timeoutMs, notices_),
      hosts_(std::move(hosts)),
      peers_(std::move(peers)),
      hierarchies_(hosts_) {}

MpiBackend::~MpiBackend() {
  if (!failure_.isOk()) {
    // Operations may still be pending on these; leave them to process exit.
    groups_.abandon();
    notices_.abandon();
    hierarchies_.abandon();
    scratch_.abandon();
    staging_.abandon();
    hierarchyStaging_.abandon();
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;
  MPI_Comm_free(&p2p_);
  // groups_ frees its sub-communicators in its own destructor, after this body; they do
  // not depend on world_ once created.
  MPI_Comm_free(&world_);
}

Status MpiBackend::prepare(AxisSet axes, const CallSignature& signature, const Status& local, const MpiGroup*& group) {
  CHIMERA_RETURN_IF_ERROR(groups_.get(axes, group));
  if (!options_.checkArgs) return local;
  return agreeOnCall(*group, signature, local, rank_, mesh_.axesName(axes));
}

Status MpiBackend::refuseCollective(AxisSet axes, const Status& local, Stream /*stream*/) {
  CHIMERA_CHECK_ARG(!local.isOk(), "refuseCollective: the local status must be an error");
  const MpiGroup* group = nullptr;
  return guarded([&] { return fmt::format("refusal of a collective ({})", local.message()); },
                 [&] { return prepare(axes, CallSignature{}, local, group); });
}

Status MpiBackend::agreeOnArguments(AxisSet axes, std::int64_t count, int root, const Status& local,
                                    Stream /*stream*/) {
  const MpiGroup* group = nullptr;
  return guarded([&] { return fmt::format("argument agreement of a composite call (count {}, root {})", count, root); },
                 [&] {
                   return prepare(axes, {OpKind::ManyToMany, count, DataType::U8, ReduceOp::Sum, root}, local, group);
                 });
}

Status MpiBackend::refuseTransfers(std::span<const P2POp> ops, const Status& local, Stream /*stream*/) {
  CHIMERA_CHECK_ARG(!local.isOk(), "refuseTransfers: the local status must be an error");
  std::vector<int> failedPeers;
  return guarded([&] { return fmt::format("refusal of {} point-to-point ops ({})", ops.size(), local.message()); },
                 [&] { return agreeOnP2P(ops, local, failedPeers); });
}

Status MpiBackend::announceFault(const Status& local) {
  if (!local.isOk()) notices_.announce(local);
  return local;
}

Status MpiBackend::checkStaging(const LibraryOutput& out) {
  if (out.ready()) return Status::ok();
  return Status::backendError("cannot allocate the staging of a library collective's output");
}

Status MpiBackend::unusable() const {
  return Status(failure_.code(), fmt::format("the MPI backend is unusable after an earlier failure (every later call "
                                             "fails, as after NCCL's abort): {}",
                                             failure_.message()));
}

Status MpiBackend::fail(std::string_view call, const Status& status) {
  failure_ = Status(status.code(), fmt::format("{}: {}", call, status.message()));
  if (options_.abortOnTimeout) endJob("mpi", rank_, failure_, std::chrono::milliseconds(options_.timeoutMs));
  CHIMERA_LOG_ERROR("mpi", "{}", failure_.toString());
  return failure_;
}

bool MpiBackend::usePointToPoint(OpKind kind, std::size_t bytes, int groupSize) const {
  switch (options_.algorithm) {
    case MpiAlgorithm::PointToPoint:
    case MpiAlgorithm::Ring:
    case MpiAlgorithm::Hierarchical: return true;
    case MpiAlgorithm::Library: return false;
    case MpiAlgorithm::Auto: break;
  }
  const bool chosen = bytes >= pointToPointThreshold(kind);
  CHIMERA_LOG_DEBUG("mpi", "{} of {} bytes over {} ranks: {}", opKindInfo(kind).call, bytes, groupSize,
                    chosen ? "point-to-point" : "MPI library");
  return chosen;
}

Status MpiBackend::chooseHierarchy(OpKind kind, std::size_t bytes, AxisSet axes, const MpiGroup& group,
                                   const HostHierarchy*& out) {
  out = nullptr;
  const HostLayout& layout = hierarchies_.layout(axes, group);
  bool chosen = false;
  switch (options_.algorithm) {
    case MpiAlgorithm::Hierarchical: chosen = layout.hosts() >= 2; break;
    case MpiAlgorithm::Auto: chosen = layout.hierarchical() && bytes >= pointToPointThreshold(kind); break;
    default: break;
  }
  if (!chosen) return Status::ok();
  CHIMERA_LOG_DEBUG("mpi", "{} of {} bytes over {}: hierarchical ({} hosts, {} lanes)", opKindInfo(kind).call, bytes,
                    group.label, layout.hosts(), layout.lanes);
  ++hierarchicalCalls_;
  return hierarchies_.get(axes, group, out);
}

Status MpiBackend::libraryAllReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                                    const MpiGroup& group) {
  const LibraryOutput out(staging_, recv, count * dataTypeSize(dtype), stagesOutput());
  CHIMERA_RETURN_IF_ERROR(checkStaging(out));
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(
      mpiStatus(MPI_Iallreduce(send == out.target() ? MPI_IN_PLACE : send, out.target(), static_cast<int>(count),
                               mpiDataType(dtype), mpiReduceOp(dtype, op), group.comm, &request),
                "MPI_Iallreduce"));
  CHIMERA_RETURN_IF_ERROR(waitOne(group, request, kWholeGroup, out.lends(), "MPI_Iallreduce"));
  out.deliver();
  if (op == ReduceOp::Avg) divideByCount(recv, count, dtype, group.size);
  return Status::ok();
}

Status MpiBackend::allReduceCall(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                                 AxisSet axes) {
  Status local = checkDataType(dtype);
  if (local.isOk()) local = checkReduceOp(dtype, op);
  if (local.isOk()) local = checkBytes(count, dtype, 1, "allReduce count");
  if (local.isOk()) local = checkBuffer(send, count, "allReduce send buffer");
  if (local.isOk()) local = checkBuffer(recv, count, "allReduce recv buffer");
  const MpiGroup* group = nullptr;
  CHIMERA_RETURN_IF_ERROR(
      prepare(axes, {OpKind::AllReduce, static_cast<std::int64_t>(count), dtype, op, 0}, local, group));
  if (count == 0) return Status::ok();
  const std::size_t bytes = count * dataTypeSize(dtype);
  const HostHierarchy* hierarchy = nullptr;
  CHIMERA_RETURN_IF_ERROR(chooseHierarchy(OpKind::AllReduce, bytes, axes, *group, hierarchy));
  if (hierarchy != nullptr)
    return hierarchicalAllReduce(send, recv, count, dtype, op, *group, *hierarchy, scratch_, hierarchyStaging_,
                                 options_.segmentBytes);
  if (!usePointToPoint(OpKind::AllReduce, bytes, group->size) && fitsOneCall(count))
    return libraryAllReduce(send, recv, count, dtype, op, *group);
  if (options_.algorithm != MpiAlgorithm::Ring)
    return pointToPointAllReduce(send, recv, count, dtype, op, *group, scratch_, options_.segmentBytes);
  const BlockSplit split{count, group->size};
  void* mine = static_cast<std::byte*>(recv) + split.offset(group->index) * dataTypeSize(dtype);
  CHIMERA_RETURN_IF_ERROR(ringReduceScatter(send, mine, split, dtype, op, *group, scratch_, options_.segmentBytes));
  if (op == ReduceOp::Avg) divideByCount(mine, split.size(group->index), dtype, group->size);
  return ringAllGather(recv, split, dtype, *group, options_.segmentBytes);
}

Status MpiBackend::libraryReduceScatter(const void* send, void* recv, std::size_t recvCount, DataType dtype,
                                        ReduceOp op, const MpiGroup& group) {
  // MPI forbids aliasing send and recv, and its MPI_IN_PLACE layout differs from NCCL's:
  // reduce an in-place call into scratch and copy the block back.
  const std::size_t bytes = recvCount * dataTypeSize(dtype);
  const auto* sendBytes = static_cast<const std::byte*>(send);
  const bool inPlace = recv == sendBytes + static_cast<std::size_t>(group.index) * bytes;
  const LibraryOutput out(staging_, recv, bytes, stagesOutput() && !inPlace);
  CHIMERA_RETURN_IF_ERROR(checkStaging(out));
  void* target = out.target();
  if (inPlace) {
    target = scratch_.get(bytes);
    if (target == nullptr) return Status::backendError(fmt::format("cannot allocate {} bytes of scratch", bytes));
  }
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(
      mpiStatus(MPI_Ireduce_scatter_block(send, target, static_cast<int>(recvCount), mpiDataType(dtype),
                                          mpiReduceOp(dtype, op), group.comm, &request),
                "MPI_Ireduce_scatter_block"));
  CHIMERA_RETURN_IF_ERROR(
      waitOne(group, request, kWholeGroup, inPlace ? Lends::Chimera : out.lends(), "MPI_Ireduce_scatter_block"));
  if (inPlace) std::memcpy(recv, target, bytes);
  out.deliver();
  if (op == ReduceOp::Avg) divideByCount(recv, recvCount, dtype, group.size);
  return Status::ok();
}

Status MpiBackend::reduceScatterCall(const void* send, void* recv, std::size_t recvCount, DataType dtype, ReduceOp op,
                                     AxisSet axes) {
  const MpiGroup* group = nullptr;
  CHIMERA_RETURN_IF_ERROR(groups_.get(axes, group));
  Status local = checkDataType(dtype);
  if (local.isOk()) local = checkReduceOp(dtype, op);
  if (local.isOk()) local = checkBytes(recvCount, dtype, group->size, "reduceScatter recvCount");
  if (local.isOk()) local = checkBuffer(send, recvCount, "reduceScatter send buffer");
  if (local.isOk()) local = checkBuffer(recv, recvCount, "reduceScatter recv buffer");
  CHIMERA_RETURN_IF_ERROR(
      prepare(axes, {OpKind::ReduceScatter, static_cast<std::int64_t>(recvCount), dtype, op, 0}, local, group));
  if (recvCount == 0) return Status::ok();
  const std::size_t total = recvCount * static_cast<std::size_t>(group->size);
  const HostHierarchy* hierarchy = nullptr;
  CHIMERA_RETURN_IF_ERROR(chooseHierarchy(OpKind::ReduceScatter, total * dataTypeSize(dtype), axes, *group, hierarchy));
  if (hierarchy != nullptr)
    return hierarchicalReduceScatter(send, recv, recvCount, dtype, op, *group, *hierarchy, scratch_, hierarchyStaging_,
                                     options_.segmentBytes);
  if (usePointToPoint(OpKind::ReduceScatter, total * dataTypeSize(dtype), group->size) || !fitsOneCall(recvCount)) {
    const BlockSplit split{total, group->size};
    CHIMERA_RETURN_IF_ERROR(
        options_.algorithm == MpiAlgorithm::Ring
            ? ringReduceScatter(send, recv, split, dtype, op, *group, scratch_, options_.segmentBytes)
            : directReduceScatter(send, recv, split, dtype, op, *group, scratch_, options_.segmentBytes));
    if (op == ReduceOp::Avg) divideByCount(recv, recvCount, dtype, group->size);
    return Status::ok();
  }
  return libraryReduceScatter(send, recv, recvCount, dtype, op, *group);
}

Status MpiBackend::allGatherCall(const void* send, void* recv, std::size_t sendCount, DataType dtype, AxisSet axes) {
  const MpiGroup* group = nullptr;
  CHIMERA_RETURN_IF_ERROR(groups_.get(axes, group));
  Status local = checkDataType(dtype);
  if (local.isOk()) local = checkBytes(sendCount, dtype, group->size, "allGather sendCount");
  if (local.isOk()) local = checkBuffer(send, sendCount, "allGather send buffer");
  if (local.isOk()) local = checkBuffer(recv, sendCount, "allGather recv buffer");
  CHIMERA_RETURN_IF_ERROR(
      prepare(axes, {OpKind::AllGather, static_cast<std::int64_t>(sendCount), dtype, ReduceOp::Sum, 0}, local, group));
  if (sendCount == 0) return Status::ok();
  const std::size_t es = dataTypeSize(dtype);
  const std::size_t total = sendCount * static_cast<std::size_t>(group->size);
  auto* mine = static_cast<std::byte*>(recv) + static_cast<std::size_t>(group->index) * sendCount * es;
  const bool inPlace = send == mine;
  const HostHierarchy* hierarchy = nullptr;
  CHIMERA_RETURN_IF_ERROR(chooseHierarchy(OpKind::AllGather, total * es, axes, *group, hierarchy));
  if (hierarchy != nullptr)
    return hierarchicalAllGather(send, recv, sendCount, dtype, *group, *hierarchy, options_.segmentBytes);
  if (usePointToPoint(OpKind::AllGather, total * es, group->size) || !fitsOneCall(total)) {
    if (!inPlace) std::memcpy(mine, send, sendCount * es);
    const BlockSplit split{total, group->size};
    if (options_.algorithm == MpiAlgorithm::Ring)
      return ringAllGather(recv, split, dtype, *group, options_.segmentBytes);
    return directAllGather(recv, split, dtype, *group);
  }
  const MPI_Datatype type = mpiDataType(dtype);
  const LibraryOutput out(staging_, recv, total * es, stagesOutput());
  CHIMERA_RETURN_IF_ERROR(checkStaging(out));
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(
      mpiStatus(MPI_Iallgather(inPlace && out.target() == recv ? MPI_IN_PLACE : send, static_cast<int>(sendCount), type,
                               out.target(), static_cast<int>(sendCount), type, group->comm, &request),
                "MPI_Iallgather"));
  CHIMERA_RETURN_IF_ERROR(waitOne(*group, request, kWholeGroup, out.lends(), "MPI_Iallgather"));
  out.deliver();
  return Status::ok();
}

Status MpiBackend::allToAllCall(const void* send, void* recv, std::size_t countPerPeer, DataType dtype, AxisSet axes) {
  const MpiGroup* group = nullptr;
  CHIMERA_RETURN_IF_ERROR(groups_.get(axes, group));
  Status local = checkDataType(dtype);
  if (local.isOk()) local = checkBytes(countPerPeer, dtype, group->size, "allToAll countPerPeer");
  if (local.isOk()) local = checkBuffer(send, countPerPeer, "allToAll send buffer");
  if (local.isOk()) local = checkBuffer(recv, countPerPeer, "allToAll recv buffer");
  if (local.isOk() && countPerPeer > 0 && send == recv)
    local = Status::invalidArgument("allToAll is out-of-place only, but send == recv");
  CHIMERA_RETURN_IF_ERROR(prepare(
      axes, {OpKind::AllToAll, static_cast<std::int64_t>(countPerPeer), dtype, ReduceOp::Sum, 0}, local, group));
  if (countPerPeer == 0) return Status::ok();
  const std::size_t total = countPerPeer * static_cast<std::size_t>(group->size);
  if (usePointToPoint(OpKind::AllToAll, total * dataTypeSize(dtype), group->size) || !fitsOneCall(total))
    return pairwiseAllToAll(send, recv, countPerPeer, dtype, *group, options_.maxMessageCount);
  const MPI_Datatype type = mpiDataType(dtype);
  const int count = static_cast<int>(countPerPeer);
  const LibraryOutput out(staging_, recv, total * dataTypeSize(dtype), stagesOutput());
  CHIMERA_RETURN_IF_ERROR(checkStaging(out));
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(
      mpiStatus(MPI_Ialltoall(send, count, type, out.target(), count, type, group->comm, &request), "MPI_Ialltoall"));
  CHIMERA_RETURN_IF_ERROR(waitOne(*group, request, kWholeGroup, out.lends(), "MPI_Ialltoall"));
  out.deliver();
  return Status::ok();
}

Status MpiBackend::allToAllVCall(const void* send, std::span<const std::size_t> sendCounts,
                                 std::span<const std::size_t> sendOffsets, void* recv,
                                 std::span<const std::size_t> recvCounts, std::span<const std::size_t> recvOffsets,
                                 DataType dtype, AxisSet axes) {
  const MpiGroup* group = nullptr;
  CHIMERA_RETURN_IF_ERROR(groups_.get(axes, group));
  const auto n = static_cast<std::size_t>(group->size);
  const auto me = static_cast<std::size_t>(group->index);
  Status local = checkDataType(dtype);
  if (local.isOk() &&
      (sendCounts.size() != n || sendOffsets.size() != n || recvCounts.size() != n || recvOffsets.size() != n))
    local = Status::invalidArgument(
        fmt::format("allToAllV over {}: counts and offsets need {} entries (one per member)", mesh_.axesName(axes), n));
  if (local.isOk() && sendCounts[me] != recvCounts[me])
    local =
        Status::invalidArgument(fmt::format("allToAllV over {}: this member sends itself {} elements but receives {}",
                                            mesh_.axesName(axes), sendCounts[me], recvCounts[me]));
  RangeTransfers transfers;
  transfers.sends.resize(n);
  transfers.receives.resize(n);
  for (std::size_t j = 0; j < n && local.isOk(); ++j) {
    if (sendCounts[j] > 0) local = checkBuffer(send, sendCounts[j], "allToAllV send buffer");
    if (local.isOk() && recvCounts[j] > 0) local = checkBuffer(recv, recvCounts[j], "allToAllV recv buffer");
    if (j == me) continue;
    appendRange(transfers.sends[j], {sendOffsets[j], sendCounts[j]});
    appendRange(transfers.receives[j], {recvOffsets[j], recvCounts[j]});
  }
  // The counts differ between members by design: the agreement compares the call and dtype only.
  CHIMERA_RETURN_IF_ERROR(prepare(axes, {OpKind::AllToAll, -1, dtype, ReduceOp::Sum, 0}, local, group));
  // Point-to-point straight into `recv`, never staged: a receive pending at a Timeout is
  // cancelled and settled (bounded_wait.hpp), which a library collective's output cannot be, so
  // the output costs no second copy.
  const std::size_t es = dataTypeSize(dtype);
  if (sendCounts[me] > 0)
    std::memcpy(static_cast<std::byte*>(recv) + recvOffsets[me] * es,
                static_cast<const std::byte*>(send) + sendOffsets[me] * es, sendCounts[me] * es);
  return exchangeRanges(send, recv, transfers, dtype, *group);
}

Status MpiBackend::broadcastCall(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                                 AxisSet axes) {
  const MpiGroup* group = nullptr;
  CHIMERA_RETURN_IF_ERROR(groups_.get(axes, group));
  Status local = checkDataType(dtype);
  if (local.isOk() && (root < 0 || root >= group->size))
    local = Status::invalidArgument(fmt::format("broadcast root {} is not a group index of axes {} (size {})", root,
                                                mesh_.axesName(axes), group->size));
  if (local.isOk()) local = checkBytes(count, dtype, 1, "broadcast count");
  if (local.isOk() && group->index == root) local = checkBuffer(send, count, "broadcast send buffer (root)");
  if (local.isOk()) local = checkBuffer(recv, count, "broadcast recv buffer");
  CHIMERA_RETURN_IF_ERROR(
      prepare(axes, {OpKind::Broadcast, static_cast<std::int64_t>(count), dtype, ReduceOp::Sum, root}, local, group));
  if (count == 0) return Status::ok();
  const std::size_t es = dataTypeSize(dtype);
  if (usePointToPoint(OpKind::Broadcast, count * es, group->size) && fitsOneCall(count))
    return scatterAllGatherBroadcast(send, recv, count, dtype, root, *group, stagesOutput() ? &staging_ : nullptr);
  if (group->index == root && send != recv) std::memcpy(recv, send, count * es);
  return forEachMessage(count, es, [&](std::size_t offset, int n) {
    const LibraryOutput out(staging_, static_cast<std::byte*>(recv) + offset, n * es, stagesOutput());
    CHIMERA_RETURN_IF_ERROR(checkStaging(out));
    if (group->index == root) out.load(0, n * es);
    MPI_Request request = MPI_REQUEST_NULL;
    CHIMERA_RETURN_IF_ERROR(
        mpiStatus(MPI_Ibcast(out.target(), n, mpiDataType(dtype), root, group->comm, &request), "MPI_Ibcast"));
    CHIMERA_RETURN_IF_ERROR(waitOne(*group, request, kWholeGroup, out.lends(), "MPI_Ibcast"));
    out.deliver();
    return Status::ok();
  });
}

Status MpiBackend::checkPeer(int peer, std::size_t count, DataType dtype, const void* buf) const {
  CHIMERA_RETURN_IF_ERROR(checkDataType(dtype));
  CHIMERA_RETURN_IF_ERROR(checkBytes(count, dtype, 1, "point-to-point count"));
  CHIMERA_CHECK_ARG(peer >= 0 && peer < mesh_.size(), "peer {} is not a world rank (world size {})", peer,
                    mesh_.size());
  return checkBuffer(buf, count, "point-to-point buffer");
}

Status MpiBackend::agreeOnP2P(std::span<const P2POp> ops, const Status& local, std::vector<int>& failedPeers) {
  failedPeers.clear();
  if (!options_.checkArgs) return local;
  return agreeOnTransfers(p2pGroup_, ops, local, failedPeers);
}

Status MpiBackend::send(const void* buf, std::size_t count, DataType dtype, int peer, Stream /*stream*/) {
  return guarded([&] { return fmt::format("send of {} {} to rank {}", count, dataTypeName(dtype), peer); },
                 [&] {
                   return blockingP2P({P2POp::Kind::Send, const_cast<void*>(buf), count, dtype, peer});
                 });
}

Status MpiBackend::recv(void* buf, std::size_t count, DataType dtype, int peer, Stream /*stream*/) {
  return guarded([&] { return fmt::format("recv of {} {} from rank {}", count, dataTypeName(dtype), peer); },
                 [&] {
                   return blockingP2P({P2POp::Kind::Recv, buf, count, dtype, peer});
                 });
}

Status MpiBackend::groupedP2P(std::span<const P2POp> ops, Stream /*stream*/) {
  return guarded([&] { return fmt::format("groupedP2P of {} ops", ops.size()); }, [&] { return groupedP2PCall(ops); });
}

Status MpiBackend::allReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, AxisSet axes,
                             Stream /*stream*/) {
  return guarded([&] { return fmt::format("allReduce of {} {}", count, dataTypeName(dtype)); },
                 [&] { return allReduceCall(send, recv, count, dtype, op, axes); });
}

Status MpiBackend::reduceScatter(const void* send, void* recv, std::size_t recvCount, DataType dtype, ReduceOp op,
                                 AxisSet axes, Stream /*stream*/) {
  return guarded([&] { return fmt::format("reduceScatter of {} {} per rank", recvCount, dataTypeName(dtype)); },
                 [&] { return reduceScatterCall(send, recv, recvCount, dtype, op, axes); });
}

Status MpiBackend::allGather(const void* send, void* recv, std::size_t sendCount, DataType dtype, AxisSet axes,
                             Stream /*stream*/) {
  return guarded([&] { return fmt::format("allGather of {} {} per rank", sendCount, dataTypeName(dtype)); },
                 [&] { return allGatherCall(send, recv, sendCount, dtype, axes); });
}

Status MpiBackend::allToAll(const void* send, void* recv, std::size_t countPerPeer, DataType dtype, AxisSet axes,
                            Stream /*stream*/) {
  return guarded([&] { return fmt::format("allToAll of {} {} per peer", countPerPeer, dataTypeName(dtype)); },
                 [&] { return allToAllCall(send, recv, countPerPeer, dtype, axes); });
}

Status MpiBackend::allToAllV(const void* send, std::span<const std::size_t> sendCounts,
                             std::span<const std::size_t> sendOffsets, void* recv,
                             std::span<const std::size_t> recvCounts, std::span<const std::size_t> recvOffsets,
                             DataType dtype, AxisSet axes, Stream stream) {
  (void)stream;
  return guarded(
      [&] { return fmt::format("allToAllV of {}", dataTypeName(dtype)); },
      [&] { return allToAllVCall(send, sendCounts, sendOffsets, recv, recvCounts, recvOffsets, dtype, axes); });
}

Status MpiBackend::broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root, AxisSet axes,
                             Stream /*stream*/) {
  return guarded([&] { return fmt::format("broadcast of {} {} from root {}", count, dataTypeName(dtype), root); },
                 [&] { return broadcastCall(send, recv, count, dtype, root, axes); });
}

Status MpiBackend::blockingP2P(const P2POp& op) {
  const bool sending = op.kind == P2POp::Kind::Send;
  Status local = checkPeer(op.peer, op.count, op.dtype, op.buffer);
  if (local.isOk() && op.peer == rank_) {
    local = Status::invalidArgument(
        fmt::format("{} self (rank {}) would block; use groupedP2P", sending ? "send to" : "recv from", op.peer));
  }
  std::vector<int> failedPeers;
  CHIMERA_RETURN_IF_ERROR(agreeOnP2P({&op, 1}, local, failedPeers));
  return forEachMessage(op.count, dataTypeSize(op.dtype), [&](std::size_t offset, int n) {
    auto* at = static_cast<std::byte*>(op.buffer) + offset;
    const MPI_Datatype type = mpiDataType(op.dtype);
    MPI_Request request = MPI_REQUEST_NULL;
    CHIMERA_RETURN_IF_ERROR(sending ? mpiStatus(MPI_Isend(at, n, type, op.peer, kP2PTag, p2p_, &request), "MPI_Isend")
                                    : mpiStatus(MPI_Irecv(at, n, type, op.peer, kP2PTag, p2p_, &request), "MPI_Irecv"));
    return waitOne(p2pGroup_, request, op.peer, sending ? Lends::Chimera : Lends::Caller, sending ? "send" : "recv");
  });
}

Status MpiBackend::groupedP2PCall(std::span<const P2POp> ops) {
  Status local = Status::ok();
  // The boxes' state is made only for a call that moves boxes: a plain call allocates nothing more.
  const bool anyBox = std::any_of(ops.begin(), ops.end(), [](const P2POp& op) { return op.box != nullptr; });
  std::vector<TensorBox> boxes(anyBox ? ops.size() : 0);
  for (std::size_t i = 0; i < ops.size() && local.isOk(); ++i) {
    const P2POp& op = ops[i];
    Status status = checkPeer(op.peer, op.count, op.dtype, op.buffer);
    if (status.isOk() && op.box != nullptr) status = checkBoxOp(op, boxes[i]);
    if (!status.isOk()) local = Status(status.code(), fmt::format("groupedP2P op {}: {}", i, status.message()));
  }
  std::vector<int> failedPeers;
  const Status agreed = agreeOnP2P(ops, local, failedPeers);
  if (!local.isOk() || (!agreed.isOk() && failedPeers.empty())) return agreed;
  // A mismatch or a refusal drops the transfers with those peers alone: the others run, so that
  // no third rank waits for this one until its timeout; the call then returns the mismatch.
  std::vector<P2POp> kept;
  if (!failedPeers.empty()) {
    std::vector<TensorBox> keptBoxes;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (std::find(failedPeers.begin(), failedPeers.end(), ops[i].peer) != failedPeers.end()) continue;
      kept.push_back(ops[i]);
      if (anyBox) keptBoxes.push_back(boxes[i]);
    }
    ops = kept;
    boxes = std::move(keptBoxes);
  }
  const std::size_t boxSlots = boxes.size();
  // An op larger than one message is posted as several, in order: messages between two ranks
  // on one communicator and tag match in the order they were posted. A box goes out as its
  // address; its receiver reads it once every address is in, and answers with a word (0: read)
  // that the sender waits for before its tensor may change.
  // Addresses and answers are chimera's: both sets keep them for as long as MPI may write them.
  auto addressStore = std::make_shared<std::vector<BoxAddress>>(boxSlots);
  auto answerStore = std::make_shared<std::vector<int>>(boxSlots, 0);
  std::vector<BoxAddress>& addresses = *addressStore;
  std::vector<int>& answers = *answerStore;
  RequestSet requests, arrivals;
  requests.reserve(ops.size());
  requests.keep(addressStore);
  requests.keep(answerStore);
  arrivals.keep(addressStore);
  arrivals.keep(answerStore);
  // This rank's tensors may be read by its peers until the lease goes (before returning).
  const bool sendsBoxes = std::any_of(
      ops.begin(), ops.end(), [](const P2POp& op) { return op.box != nullptr && op.kind == P2POp::Kind::Send; });
  std::optional<PeerMemory::Lease> lease;
  if (sendsBoxes) lease.emplace(peers_);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const int tag = kP2PTag + op.channel;
    const bool sending = op.kind == P2POp::Kind::Send;
    Status posted = Status::ok();
    if (op.box != nullptr) {
      if (sending) {
        addresses[i] = {reinterpret_cast<std::uint64_t>(op.buffer), dataTypeSize(op.dtype), boxes[i]};
        if (lease) lease->stamp(addresses[i]);
      }
      posted = mpiStatus(sending ? MPI_Isend(&addresses[i], sizeof(BoxAddress), MPI_BYTE, op.peer, kBoxTag + op.channel,
                                             p2p_, &requests.add(op.peer))
                                 : MPI_Irecv(&addresses[i], sizeof(BoxAddress), MPI_BYTE, op.peer, kBoxTag + op.channel,
                                             p2p_, &arrivals.add(op.peer)),
                         fmt::format("groupedP2P op {} (box address)", i));
      if (posted.isOk() && sending)
        posted = mpiStatus(
            MPI_Irecv(&answers[i], 1, MPI_INT, op.peer, kBoxAnswerTag + op.channel, p2p_, &requests.add(op.peer)),
            fmt::format("groupedP2P op {} (box answer)", i));
    } else {
      posted = forEachMessage(op.count, dataTypeSize(op.dtype), [&](std::size_t offset, int n) {
        auto* at = static_cast<std::byte*>(op.buffer) + offset;
        MPI_Request& request = requests.add(op.peer, sending ? Lends::Chimera : Lends::Caller);
        const int rc = sending ? MPI_Isend(at, n, mpiDataType(op.dtype), op.peer, tag, p2p_, &request)
                               : MPI_Irecv(at, n, mpiDataType(op.dtype), op.peer, tag, p2p_, &request);
        if (rc == MPI_SUCCESS) return Status::ok();
        return mpiStatus(rc, fmt::format("groupedP2P op {} (MPI_Isend/MPI_Irecv)", i));
      });
    }
    if (!posted.isOk()) {
      // Complete what was posted (bounded) so no request outlives the call, then report the failure.
      (void)arrivals.waitAll(p2pGroup_, "groupedP2P (after a failed post)");
      (void)requests.waitAll(p2pGroup_, "groupedP2P (after a failed post)");
      return posted;
    }
  }
  CHIMERA_RETURN_IF_ERROR(arrivals.waitAll(p2pGroup_, "groupedP2P (box addresses)"));
  Status read = Status::ok();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    if (op.box == nullptr || op.kind != P2POp::Kind::Recv) continue;
    const Status one = peers_.read(op.peer, addresses[i], op.buffer, dataTypeSize(op.dtype), boxes[i]);
    answers[i] = one.isOk() ? 0 : 1;
    if (read.isOk() && !one.isOk()) read = Status(one.code(), fmt::format("groupedP2P op {}: {}", i, one.message()));
    CHIMERA_RETURN_IF_ERROR(
        mpiStatus(MPI_Isend(&answers[i], 1, MPI_INT, op.peer, kBoxAnswerTag + op.channel, p2p_, &requests.add(op.peer)),
                  fmt::format("groupedP2P op {} (box answer)", i)));
  }
  CHIMERA_RETURN_IF_ERROR(requests.waitAll(p2pGroup_, "groupedP2P"));
  if (!read.isOk()) return read;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].box != nullptr && ops[i].kind == P2POp::Kind::Send && answers[i] != 0)
      return Status::mismatch(fmt::format(
          "groupedP2P op {}: rank {} could not read the box this rank sent it from this rank's memory (see its error)",
          i, ops[i].peer));
  }
  return agreed;
}

Status MpiBackend::checkBoxOp(const P2POp& op, TensorBox& out) const {
  CHIMERA_CHECK_ARG(movesBoxes(op.peer), "a box for rank {}, whose memory this backend does not read (movesBoxes)",
                    op.peer);
  CHIMERA_RETURN_IF_ERROR(toTensorBox(op.shape, *op.box, out));
  CHIMERA_CHECK_ARG(static_cast<std::size_t>(boxVolume(out)) == op.count, "box {} holds {} elements, the op {}",
                    op.box->toString(), boxVolume(out), op.count);
  return Status::ok();
}

Status MpiBackend::allocate(std::size_t bytes, void** out) {
  CHIMERA_CHECK_ARG(out != nullptr, "allocate: out pointer is null");
  CHIMERA_CHECK_ARG(bytes > 0, "allocate: 0 bytes requested");
  return memory_.allocate(bytes, out);
}

void MpiBackend::deallocate(void* ptr) { memory_.release(ptr); }

Status MpiBackend::createGroups(std::span<const AxisSet> groups) { return groups_.createAll(groups); }

Status MpiBackend::copy(void* dst, const void* src, std::size_t bytes, Stream /*stream*/) {
  if (bytes == 0) return Status::ok();
  CHIMERA_CHECK_ARG(dst != nullptr && src != nullptr, "copy of {} bytes with a null pointer", bytes);
  std::memmove(dst, src, bytes);
  return Status::ok();
}

Status MpiBackend::packBox(const void* tensor, std::span<const std::int64_t> shape, const Box& box, void* packed,
                           DataType dtype, Stream /*stream*/) {
  return hostPackBox(tensor, shape, box, packed, dtype);
}

Status MpiBackend::unpackBox(const void* packed, void* tensor, std::span<const std::int64_t> shape, const Box& box,
                             DataType dtype, Stream /*stream*/) {
  return hostUnpackBox(packed, tensor, shape, box, dtype);
}

Status MpiBackend::scale(const void* input, void* output, std::size_t count, DataType dtype, double factor,
                         Stream /*stream*/) {
  return hostScale(input, output, count, dtype, factor);
}

}  // namespace chimera::detail
