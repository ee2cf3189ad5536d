// SPDX-License-Identifier: Apache-2.0
// nccl-tests' in-place measurement: where an in-place call's input and result live inside
// one buffer (NCCL's conventions, as include/chimera/backend.hpp documents them for our
// Backend), how the input is written there before a checked run, and how the result is
// checked where the call must have left it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "buffer_check.hpp"
#include "collective.hpp"

namespace chimera::bench {

/// Element offsets of one rank's in-place call inside a single buffer. The call gets
/// send = buffer + sendOffset and recv = buffer + recvOffset (in elements).
struct InPlaceLayout {
  /// Elements of the buffer: the larger of the send and receive counts.
  std::size_t bufferCount = 0;
  /// Where the call's send pointer points; the input occupies [sendOffset, sendOffset + sendCount).
  std::size_t sendOffset = 0;
  /// Elements of input.
  std::size_t sendCount = 0;
  /// Where the call's recv pointer points; the result occupies [recvOffset, recvOffset + recvCount).
  std::size_t recvOffset = 0;
  /// Elements of result.
  std::size_t recvCount = 0;
};

/// Whether our backend has an in-place form of `collective`: AllReduce, ReduceScatter,
/// AllGather, Broadcast. AllToAll is out-of-place only (NCCL has no in-place AllToAll either),
/// and a SendRecv ring has no single buffer that is both sent and received.
bool hasInPlaceForm(Collective collective);

/// The in-place layout of the group member `groupIndex` for a row of `shape`:
/// AllReduce, Broadcast: send == recv (offset 0); ReduceScatter: recv = send + g*recvCount;
/// AllGather: send = recv + g*sendCount. Empty when !hasInPlaceForm(collective).
std::optional<InPlaceLayout> inPlaceLayout(Collective collective, const BufferShape& shape, int groupIndex);

/// Address of element `offset` of a buffer of `dtype` elements.
void* elementAt(void* buffer, DataType dtype, std::size_t offset);
/// Address of element `offset` of a buffer of `dtype` elements.
const void* elementAt(const void* buffer, DataType dtype, std::size_t offset);

/// Prepares a checked in-place run: the whole buffer is poisoned (0xFF), then input element
/// i (`valueAt(i)`, i < sendCount) is written to buffer[sendOffset + i]. Everything outside
/// the input slot then reads as wrong unless the call writes it.
template <typename ValueFn>
void writeInPlaceInput(void* buffer, DataType dtype, const InPlaceLayout& layout, ValueFn&& valueAt) {
  poisonBuffer(buffer, layout.bufferCount * dataTypeSize(dtype));
  fillBuffer(elementAt(buffer, dtype, layout.sendOffset), dtype, layout.sendCount, valueAt);
}

/// Number of result elements i < recvCount where buffer[recvOffset + i] differs from
/// `expectedAt(i)`: the result is read where the in-place call must have written it.
template <typename ExpectedFn>
std::uint64_t countInPlaceMismatches(const void* buffer, DataType dtype, const InPlaceLayout& layout,
                                     ExpectedFn&& expectedAt) {
  return countMismatches(elementAt(buffer, dtype, layout.recvOffset), dtype, layout.recvCount, expectedAt);
}

}  // namespace chimera::bench
