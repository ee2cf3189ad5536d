// SPDX-License-Identifier: Apache-2.0
// Implements the point-to-point AllToAll and Broadcast alternatives of the MPI backend.
#include "mpi/exchange.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/host_reduce.hpp"
#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/library_output.hpp"
#include "mpi/mpi_util.hpp"
#include "mpi/ring.hpp"

namespace chimera::detail {
namespace {

constexpr int kAllToAllTag = 0x4141;       // 'AA'
constexpr int kReduceScatterTag = 0x5253;  // 'RS'
constexpr int kAllGatherTag = 0x4147;      // 'AG'

}  // namespace

Status pairwiseAllToAll(const void* send, void* recv, std::size_t countPerPeer, DataType dtype, const MpiGroup& group,
                        std::size_t maxMessageCount) {
  const int n = group.size;
  const int me = group.index;
  const std::size_t es = dataTypeSize(dtype);
  const std::size_t blockBytes = countPerPeer * es;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (blockBytes > 0) std::memcpy(out + me * blockBytes, in + me * blockBytes, blockBytes);
  const MPI_Datatype type = mpiDataType(dtype);
  const std::size_t piece = std::max<std::size_t>(1, std::min(maxMessageCount, kMaxMpiCount));
  RequestSet step;
  for (int s = 1; s < n; ++s) {
    const int to = (me + s) % n;
    const int from = (me - s + n) % n;
    for (std::size_t begin = 0; begin < countPerPeer; begin += piece) {
      const int count = static_cast<int>(std::min(piece, countPerPeer - begin));
      CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Irecv(out + from * blockBytes + begin * es, count, type, from, kAllToAllTag,
                                                  group.comm, &step.add(from, Lends::Caller)),
                                        "MPI_Irecv (pairwise all-to-all)"));
      CHIMERA_RETURN_IF_ERROR(mpiStatus(
          MPI_Isend(in + to * blockBytes + begin * es, count, type, to, kAllToAllTag, group.comm, &step.add(to)),
          "MPI_Isend (pairwise all-to-all)"));
      CHIMERA_RETURN_IF_ERROR(step.waitAll(group, "pairwise AllToAll step"));
    }
  }
  return Status::ok();
}

Status directReduceScatter(const void* send, void* out, BlockSplit split, DataType dtype, ReduceOp op,
                           const MpiGroup& group, ScratchBuffer& scratch, std::size_t segmentBytes) {
  const int n = group.size;
  const int me = group.index;
  const std::size_t es = dataTypeSize(dtype);
  if (n == 1 || split.count == 0) {
    if (out != send && split.count > 0) std::memcpy(out, send, split.count * es);
    return Status::ok();
  }
  const std::size_t segElems = std::max<std::size_t>(1, std::min(segmentBytes / es, kMaxMpiCount));
  const std::size_t segments = (split.size(0) + segElems - 1) / segElems;
  auto* slot = static_cast<std::byte*>(scratch.get(std::min(segElems, split.size(0)) * es));
  if (slot == nullptr) return Status::backendError("cannot allocate ReduceScatter scratch");
  const auto* in = static_cast<const std::byte*>(send);
  auto* result = static_cast<std::byte*>(out);
  const MPI_Datatype type = mpiDataType(dtype);
  // Segment-major, peers staggered (me+1, me+2, ...) so that no member is everyone's first.
  RequestSet sends;
  sends.reserve(segments * static_cast<std::size_t>(n - 1));
  for (std::size_t k = 0; k < segments; ++k) {
    for (int i = 1; i < n; ++i) {
      const int to = (me + i) % n;
      const std::size_t begin = k * segElems;
      const std::size_t size = split.size(to);
      if (begin >= size) continue;
      CHIMERA_RETURN_IF_ERROR(
          mpiStatus(MPI_Isend(in + (split.offset(to) + begin) * es, static_cast<int>(std::min(segElems, size - begin)),
                              type, to, kReduceScatterTag, group.comm, &sends.add(to)),
                    "MPI_Isend (direct ReduceScatter)"));
    }
  }
  const std::size_t mySize = split.size(me);
  const std::byte* mine = in + split.offset(me) * es;
  for (std::size_t begin = 0; begin < mySize; begin += segElems) {
    const std::size_t len = std::min(segElems, mySize - begin);
    for (int i = 1; i < n; ++i) {
      const int from = (me - i + n) % n;
      MPI_Request receive = MPI_REQUEST_NULL;
      CHIMERA_RETURN_IF_ERROR(
          mpiStatus(MPI_Irecv(slot, static_cast<int>(len), type, from, kReduceScatterTag, group.comm, &receive),
                    "MPI_Irecv (direct ReduceScatter)"));
      CHIMERA_RETURN_IF_ERROR(waitOne(group, receive, from, Lends::Chimera, "direct ReduceScatter"));
      if (i == 1) {
        reduceTo(result + begin * es, slot, mine + begin * es, len, dtype, op);
      } else {
        reduceInto(result + begin * es, slot, len, dtype, op);
      }
    }
  }
  return sends.waitAll(group, "direct ReduceScatter (sends)");
}

Status directAllGather(void* buf, BlockSplit split, DataType dtype, const MpiGroup& group) {
  const int n = group.size;
  const int me = group.index;
  if (n == 1 || split.count == 0) return Status::ok();
  if (split.size(0) > kMaxMpiCount) return ringAllGather(buf, split, dtype, group, kUnsegmented);
  const std::size_t es = dataTypeSize(dtype);
  auto* bytes = static_cast<std::byte*>(buf);
  const MPI_Datatype type = mpiDataType(dtype);
  RequestSet requests;
  requests.reserve(2 * static_cast<std::size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    const int from = (me - i + n) % n;
    CHIMERA_RETURN_IF_ERROR(
        mpiStatus(MPI_Irecv(bytes + split.offset(from) * es, static_cast<int>(split.size(from)), type, from,
                            kAllGatherTag, group.comm, &requests.add(from, Lends::Caller)),
                  "MPI_Irecv (direct AllGather)"));
  }
  for (int i = 1; i < n; ++i) {
    const int to = (me + i) % n;
    CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Isend(bytes + split.offset(me) * es, static_cast<int>(split.size(me)), type,
                                                to, kAllGatherTag, group.comm, &requests.add(to)),
                                      "MPI_Isend (direct AllGather)"));
  }
  return requests.waitAll(group, "direct AllGather");
}

Status pointToPointAllReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                             const MpiGroup& group, ScratchBuffer& scratch, std::size_t segmentBytes) {
  const BlockSplit split{count, group.size};
  const std::size_t es = dataTypeSize(dtype);
  void* mine = static_cast<std::byte*>(recv) + split.offset(group.index) * es;
  CHIMERA_RETURN_IF_ERROR(directReduceScatter(send, mine, split, dtype, op, group, scratch, segmentBytes));
  if (op == ReduceOp::Avg) divideByCount(mine, split.size(group.index), dtype, group.size);
  return directAllGather(recv, split, dtype, group);
}

Status scatterAllGatherBroadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                                 const MpiGroup& group, ScratchBuffer* staging) {
  const BlockSplit split{count, group.size};
  const std::size_t es = dataTypeSize(dtype);
  if (group.index == root && send != recv && count > 0) std::memcpy(recv, send, count * es);
  std::vector<int> counts(static_cast<std::size_t>(group.size));
  std::vector<int> displs(static_cast<std::size_t>(group.size));
  for (int i = 0; i < group.size; ++i) {
    counts[static_cast<std::size_t>(i)] = static_cast<int>(split.size(i));
    displs[static_cast<std::size_t>(i)] = static_cast<int>(split.offset(i));
  }
  const MPI_Datatype type = mpiDataType(dtype);
  auto* mine = static_cast<std::byte*>(recv) + split.offset(group.index) * es;
  ScratchBuffer unused;
  const LibraryOutput out(staging != nullptr ? *staging : unused, mine, split.size(group.index) * es,
                          staging != nullptr && group.index != root);
  if (!out.ready()) return Status::backendError("cannot allocate the staging of a broadcast's scatter");
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc =
      group.index == root
          ? MPI_Iscatterv(recv, counts.data(), displs.data(), type, MPI_IN_PLACE, 0, type, root, group.comm, &request)
          : MPI_Iscatterv(nullptr, counts.data(), displs.data(), type, out.target(),
                          counts[static_cast<std::size_t>(group.index)], type, root, group.comm, &request);
  CHIMERA_RETURN_IF_ERROR(mpiStatus(rc, "MPI_Iscatterv (broadcast)"));
  CHIMERA_RETURN_IF_ERROR(waitOne(group, request, kWholeGroup, out.lends(), "MPI_Iscatterv (broadcast)"));
  out.deliver();
  return ringAllGather(recv, split, dtype, group, kUnsegmented);
}

}  // namespace chimera::detail
