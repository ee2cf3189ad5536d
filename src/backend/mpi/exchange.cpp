// SPDX-License-Identifier: Apache-2.0
#include "backend/mpi/exchange.hpp"

#include <cstring>
#include <vector>

#include "backend/mpi/mpi_util.hpp"
#include "backend/mpi/ring.hpp"
#include "common/check.hpp"

namespace chimera::detail {
namespace {

constexpr int kAllToAllTag = 0x4141;  // 'AA'

}  // namespace

Status pairwiseAllToAll(const void* send, void* recv, std::size_t countPerPeer, DataType dtype,
                        const MpiGroup& group) {
  const int n = group.size;
  const int me = group.index;
  const std::size_t blockBytes = countPerPeer * dataTypeSize(dtype);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (blockBytes > 0) std::memcpy(out + me * blockBytes, in + me * blockBytes, blockBytes);
  const MPI_Datatype type = mpiDataType(dtype);
  const int count = static_cast<int>(countPerPeer);
  for (int step = 1; step < n; ++step) {
    const int to = (me + step) % n;
    const int from = (me - step + n) % n;
    CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Sendrecv(in + to * blockBytes, count, type, to, kAllToAllTag,
                                                   out + from * blockBytes, count, type, from, kAllToAllTag,
                                                   group.comm, MPI_STATUS_IGNORE),
                                      "MPI_Sendrecv (pairwise all-to-all)"));
  }
  return Status::ok();
}

Status scatterAllGatherBroadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                                 const MpiGroup& group) {
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
  const int rc = group.index == root
                     ? MPI_Scatterv(recv, counts.data(), displs.data(), type, MPI_IN_PLACE, 0, type, root, group.comm)
                     : MPI_Scatterv(nullptr, counts.data(), displs.data(), type, mine,
                                    counts[static_cast<std::size_t>(group.index)], type, root, group.comm);
  CHIMERA_RETURN_IF_ERROR(mpiStatus(rc, "MPI_Scatterv (broadcast)"));
  return ringAllGather(recv, split, dtype, group, kUnsegmented);
}

}  // namespace chimera::detail
