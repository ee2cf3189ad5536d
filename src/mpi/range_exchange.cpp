// SPDX-License-Identifier: Apache-2.0
// Implements the direct exchanges over lists of element ranges.
#include "mpi/range_exchange.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "common/host_reduce.hpp"
#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::detail {
namespace {

constexpr int kReduceRangesTag = 0x5252;    // 'RR'
constexpr int kExchangeRangesTag = 0x5845;  // 'XE'

std::byte* at(void* base, std::size_t elements, std::size_t elementSize) {
  return static_cast<std::byte*>(base) + elements * elementSize;
}
const std::byte* at(const void* base, std::size_t elements, std::size_t elementSize) {
  return static_cast<const std::byte*>(base) + elements * elementSize;
}

// One segment a receiver reduces: `count` elements at `offset` from member `from`.
struct Arrival {
  std::size_t offset = 0;
  std::size_t count = 0;
  int from = 0;
  bool first = false;  // the first copy of its segment: reduced with this member's own
};

// Calls post(offset, count) for each piece of at most `most` elements of every range of `list`.
template <typename Post>
Status forEachPiece(const RangeList& list, std::size_t most, Post post) {
  for (const ElementRange& range : list) {
    for (std::size_t begin = 0; begin < range.count; begin += most) {
      CHIMERA_RETURN_IF_ERROR(post(range.offset + begin, std::min(most, range.count - begin)));
    }
  }
  return Status::ok();
}

}  // namespace

void appendRange(RangeList& list, ElementRange range) {
  if (range.count == 0) return;
  if (!list.empty() && list.back().offset + list.back().count == range.offset) {
    list.back().count += range.count;
    return;
  }
  list.push_back(range);
}

Status reduceRanges(const void* send, void* out, std::span<const RangeList> parts, DataType dtype, ReduceOp op,
                    const MpiGroup& group, ScratchBuffer& scratch, std::size_t segmentBytes) {
  const int n = group.size;
  const int me = group.index;
  const std::size_t es = dataTypeSize(dtype);
  const RangeList& mine = parts[static_cast<std::size_t>(me)];
  if (n == 1) {
    if (out != send) {
      for (const ElementRange& r : mine) std::memcpy(at(out, r.offset, es), at(send, r.offset, es), r.count * es);
    }
    return Status::ok();
  }
  const std::size_t segElems = std::max<std::size_t>(1, std::min(segmentBytes / es, kMaxMpiCount));
  const MPI_Datatype type = mpiDataType(dtype);
  // Segment-major over the peers (me+1, me+2, ...), so that every receiver gets its first
  // segment early; the order of one pair's messages is the order of its ranges.
  std::vector<std::vector<ElementRange>> pieces(static_cast<std::size_t>(n));
  std::size_t most = 0;
  for (int i = 1; i < n; ++i) {
    auto& list = pieces[static_cast<std::size_t>(i)];
    (void)forEachPiece(parts[static_cast<std::size_t>((me + i) % n)], segElems,
                       [&](std::size_t offset, std::size_t count) {
                         list.push_back({offset, count});
                         return Status::ok();
                       });
    most = std::max(most, list.size());
  }
  RequestSet sends;
  for (std::size_t k = 0; k < most; ++k) {
    for (int i = 1; i < n; ++i) {
      const auto& list = pieces[static_cast<std::size_t>(i)];
      if (k >= list.size()) continue;
      const int to = (me + i) % n;
      CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Isend(at(send, list[k].offset, es), static_cast<int>(list[k].count), type,
                                                  to, kReduceRangesTag, group.comm, &sends.add(to)),
                                        "MPI_Isend (reduce over ranges)"));
    }
  }
  std::vector<Arrival> arrivals;
  std::size_t slotElems = 0;
  (void)forEachPiece(mine, segElems, [&](std::size_t offset, std::size_t count) {
    for (int i = 1; i < n; ++i) arrivals.push_back({offset, count, (me - i + n) % n, i == 1});
    slotElems = std::max(slotElems, count);
    return Status::ok();
  });
  if (!arrivals.empty()) {
    auto* slots = static_cast<std::byte*>(scratch.get(2 * slotElems * es));
    if (slots == nullptr) return Status::backendError("cannot allocate the scratch of a reduction over ranges");
    std::array<std::byte*, 2> slot = {slots, slots + slotElems * es};
    std::array<RequestSet, 2> pending;
    auto post = [&](std::size_t t) {
      const Arrival& a = arrivals[t];
      return mpiStatus(MPI_Irecv(slot[t & 1], static_cast<int>(a.count), type, a.from, kReduceRangesTag, group.comm,
                                 &pending[t & 1].add(a.from)),
                       "MPI_Irecv (reduce over ranges)");
    };
    CHIMERA_RETURN_IF_ERROR(post(0));
    if (arrivals.size() > 1) CHIMERA_RETURN_IF_ERROR(post(1));
    for (std::size_t t = 0; t < arrivals.size(); ++t) {
      CHIMERA_RETURN_IF_ERROR(pending[t & 1].waitAll(group, "reduce over ranges"));
      const Arrival& a = arrivals[t];
      if (a.first) {
        reduceTo(at(out, a.offset, es), slot[t & 1], at(send, a.offset, es), a.count, dtype, op);
      } else {
        reduceInto(at(out, a.offset, es), slot[t & 1], a.count, dtype, op);
      }
      if (t + 2 < arrivals.size()) CHIMERA_RETURN_IF_ERROR(post(t + 2));
    }
  }
  return sends.waitAll(group, "reduce over ranges (sends)");
}

Status postRanges(const void* from, void* to, const RangeTransfers& transfers, DataType dtype, const MpiGroup& group,
                  int tag, Lends receives, RequestSet& set) {
  const int n = group.size;
  const int me = group.index;
  const std::size_t es = dataTypeSize(dtype);
  const MPI_Datatype type = mpiDataType(dtype);
  for (int i = 1; i < n && !transfers.receives.empty(); ++i) {
    const int peer = (me - i + n) % n;
    CHIMERA_RETURN_IF_ERROR(forEachPiece(transfers.receives[static_cast<std::size_t>(peer)], kMaxMpiCount,
                                         [&](std::size_t offset, std::size_t count) {
                                           return mpiStatus(MPI_Irecv(at(to, offset, es), static_cast<int>(count), type,
                                                                      peer, tag, group.comm, &set.add(peer, receives)),
                                                            "MPI_Irecv (exchange of ranges)");
                                         }));
  }
  for (int i = 1; i < n && !transfers.sends.empty(); ++i) {
    const int peer = (me + i) % n;
    CHIMERA_RETURN_IF_ERROR(forEachPiece(
        transfers.sends[static_cast<std::size_t>(peer)], kMaxMpiCount, [&](std::size_t offset, std::size_t count) {
          return mpiStatus(
              MPI_Isend(at(from, offset, es), static_cast<int>(count), type, peer, tag, group.comm, &set.add(peer)),
              "MPI_Isend (exchange of ranges)");
        }));
  }
  return Status::ok();
}

Status exchangeRanges(const void* from, void* to, const RangeTransfers& transfers, DataType dtype,
                      const MpiGroup& group) {
  RequestSet requests;
  CHIMERA_RETURN_IF_ERROR(postRanges(from, to, transfers, dtype, group, kExchangeRangesTag, Lends::Caller, requests));
  return requests.waitAll(group, "exchange of ranges");
}

}  // namespace chimera::detail
