// SPDX-License-Identifier: Apache-2.0
// Implements the bandwidth-optimal ring collectives over MPI point-to-point.
#include "mpi/ring.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/host_reduce.hpp"
#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::detail {
namespace {

constexpr int kRingTag = 0x5249;  // 'RI'

int wrap(int value, int n) { return ((value % n) + n) % n; }

std::byte* at(void* base, std::size_t elements, std::size_t elementSize) {
  return static_cast<std::byte*>(base) + elements * elementSize;
}
const std::byte* at(const void* base, std::size_t elements, std::size_t elementSize) {
  return static_cast<const std::byte*>(base) + elements * elementSize;
}

// Elements of segment `segment` inside a block of `blockSize` elements.
std::size_t segmentLength(std::size_t blockSize, std::size_t segment, std::size_t segmentElems) {
  const std::size_t begin = segment * segmentElems;
  return begin >= blockSize ? 0 : std::min(segmentElems, blockSize - begin);
}

std::size_t segmentElements(std::size_t segmentBytes, std::size_t elementSize) {
  return std::max<std::size_t>(1, std::min(segmentBytes / elementSize, kMaxMpiCount));
}

Status exchange(const void* sendBuf, std::size_t sendCount, void* recvBuf, std::size_t recvCount, DataType dtype,
                const MpiGroup& group) {
  const int right = wrap(group.index + 1, group.size);
  const int left = wrap(group.index - 1, group.size);
  const MPI_Datatype type = mpiDataType(dtype);
  RequestSet step;
  CHIMERA_RETURN_IF_ERROR(mpiStatus(
      MPI_Irecv(recvBuf, static_cast<int>(recvCount), type, left, kRingTag, group.comm, &step.add(left, Lends::Caller)),
      "MPI_Irecv (ring step)"));
  CHIMERA_RETURN_IF_ERROR(
      mpiStatus(MPI_Isend(sendBuf, static_cast<int>(sendCount), type, right, kRingTag, group.comm, &step.add(right)),
                "MPI_Isend (ring step)"));
  return step.waitAll(group, "ring AllGather step");
}

}  // namespace

std::size_t BlockSplit::offset(int i) const {
  const auto index = static_cast<std::size_t>(i);
  const std::size_t base = count / static_cast<std::size_t>(parts);
  const std::size_t extra = count % static_cast<std::size_t>(parts);
  return index * base + std::min(index, extra);
}

std::size_t BlockSplit::size(int i) const {
  const std::size_t base = count / static_cast<std::size_t>(parts);
  return base + (static_cast<std::size_t>(i) < count % static_cast<std::size_t>(parts) ? 1 : 0);
}

Status ringReduceScatter(const void* send, void* out, BlockSplit split, DataType dtype, ReduceOp op,
                         const MpiGroup& group, ScratchBuffer& scratch, std::size_t segmentBytes) {
  const int n = group.size;
  const int me = group.index;
  const std::size_t es = dataTypeSize(dtype);
  if (n == 1) {
    if (out != send && split.count > 0) std::memcpy(out, send, split.count * es);
    return Status::ok();
  }
  if (split.count == 0) return Status::ok();
  const std::size_t segElems = segmentElements(segmentBytes, es);
  const std::size_t largest = split.size(0);
  const std::size_t slotElems = std::min(segElems, largest);
  // Scratch: two running-sum blocks (the one being sent, the one being built) and one
  // receive slot of a segment, small enough to stay in cache until it is reduced.
  void* base = scratch.get((2 * largest + slotElems) * es);
  if (base == nullptr) return Status::backendError("cannot allocate ring ReduceScatter scratch");
  std::byte* sums[2] = {static_cast<std::byte*>(base), static_cast<std::byte*>(base) + largest * es};
  std::byte* slot = sums[1] + largest * es;
  const MPI_Datatype type = mpiDataType(dtype);
  const int right = wrap(me + 1, n);
  const int left = wrap(me - 1, n);
  RequestSet sends;
  sends.reserve((largest + segElems - 1) / segElems);
  const std::byte* outgoing = nullptr;  // this rank's running sum of the block it sends next
  for (int step = 0; step < n - 1; ++step) {
    const int sendBlock = wrap(me - step - 1, n);
    const int recvBlock = wrap(me - step - 2, n);
    if (step == 0) outgoing = at(send, split.offset(sendBlock), es);
    // Every segment of the step goes out at once: one synchronisation per step, however
    // many segments. Receives are posted one at a time so that each segment is copied in
    // right before it is reduced.
    const std::size_t sendLen = split.size(sendBlock);
    const std::size_t sendSegments = (sendLen + segElems - 1) / segElems;
    for (std::size_t k = 0; k < sendSegments; ++k) {
      const std::size_t len = segmentLength(sendLen, k, segElems);
      CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Isend(outgoing + k * segElems * es, static_cast<int>(len), type, right,
                                                  kRingTag, group.comm, &sends.add(right)),
                                        "MPI_Isend (ring ReduceScatter)"));
    }
    std::byte* target = step == n - 2 ? static_cast<std::byte*>(out) : sums[step & 1];  // recvBlock == me last
    const std::byte* mine = at(send, split.offset(recvBlock), es);
    const std::size_t recvLen = split.size(recvBlock);
    for (std::size_t k = 0; k * segElems < recvLen; ++k) {
      const std::size_t len = segmentLength(recvLen, k, segElems);
      MPI_Request receive = MPI_REQUEST_NULL;
      CHIMERA_RETURN_IF_ERROR(
          mpiStatus(MPI_Irecv(slot, static_cast<int>(len), type, left, kRingTag, group.comm, &receive),
                    "MPI_Irecv (ring ReduceScatter)"));
      CHIMERA_RETURN_IF_ERROR(waitOne(group, receive, left, Lends::Chimera, "ring ReduceScatter"));
      reduceTo(target + k * segElems * es, slot, mine + k * segElems * es, len, dtype, op);
    }
    CHIMERA_RETURN_IF_ERROR(sends.waitAll(group, "ring ReduceScatter (sends)"));
    outgoing = target;
  }
  return Status::ok();
}

Status ringAllGather(void* buf, BlockSplit split, DataType dtype, const MpiGroup& group, std::size_t segmentBytes) {
  const int n = group.size;
  const int me = group.index;
  if (n == 1) return Status::ok();
  const std::size_t es = dataTypeSize(dtype);
  const std::size_t segElems = segmentElements(segmentBytes, es);
  const std::size_t segments = (split.size(0) + segElems - 1) / segElems;
  for (std::size_t seg = 0; seg < segments; ++seg) {
    const std::size_t segOffset = seg * segElems;
    for (int step = 0; step < n - 1; ++step) {
      const int sendBlock = wrap(me - step, n);
      const int recvBlock = wrap(me - step - 1, n);
      CHIMERA_RETURN_IF_ERROR(exchange(at(buf, split.offset(sendBlock) + segOffset, es),
                                       segmentLength(split.size(sendBlock), seg, segElems),
                                       at(buf, split.offset(recvBlock) + segOffset, es),
                                       segmentLength(split.size(recvBlock), seg, segElems), dtype, group));
    }
  }
  return Status::ok();
}

}  // namespace chimera::detail
