// SPDX-License-Identifier: Apache-2.0
// Implements the host pack/unpack of tensor boxes on the shared box index math.
#include "box/box_pack.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <span>
#include <string>

#include "core/check.hpp"

namespace chimera::detail {
namespace {

enum class Direction { Pack, Unpack };

Status checkArgs(const void* a, const void* b, const TensorBox& box, std::size_t elementSize) {
  CHIMERA_RETURN_IF_ERROR(validateBox(box));
  if (elementSize == 0) return Status::invalidArgument("element size must be >= 1 byte");
  if (a == nullptr || b == nullptr) {
    return Status::invalidArgument(fmt::format("null buffer for box {}", describeBox(box)));
  }
  return Status::ok();
}

// One memcpy per run; the run offsets come from the shared index math.
void copyRuns(const std::byte* src, std::byte* dst, const TensorBox& box, std::size_t elementSize,
              Direction direction) {
  const BoxRuns runs = boxRuns(box);
  const std::size_t runBytes = static_cast<std::size_t>(runs.runLength) * elementSize;
  for (std::int64_t run = 0; run < runs.numRuns; ++run) {
    const std::size_t tensorByte = static_cast<std::size_t>(runOffset(runs, run)) * elementSize;
    const std::size_t packedByte = static_cast<std::size_t>(run) * runBytes;
    if (direction == Direction::Pack) {
      std::memcpy(dst + packedByte, src + tensorByte, runBytes);
    } else {
      std::memcpy(dst + tensorByte, src + packedByte, runBytes);
    }
  }
}

}  // namespace

std::string describeBox(const TensorBox& box) {
  const int n = box.ndims < 0 ? 0 : (box.ndims > kMaxBoxDims ? kMaxBoxDims : box.ndims);
  const auto count = static_cast<std::size_t>(n);
  return fmt::format("[{}] at [{}] of [{}]", fmt::join(std::span(box.extent, count), "x"),
                     fmt::join(std::span(box.offset, count), ","), fmt::join(std::span(box.dims, count), "x"));
}

Status validateBox(const TensorBox& box) {
  if (const char* error = boxError(box)) {
    if (box.ndims < 1 || box.ndims > kMaxBoxDims) {
      return Status::invalidArgument(fmt::format("box has {} dimensions: {}", box.ndims, error));
    }
    return Status::invalidArgument(fmt::format("box {}: {}", describeBox(box), error));
  }
  return Status::ok();
}

Status packBoxHost(const void* tensor, void* packed, const TensorBox& box, std::size_t elementSize) {
  CHIMERA_RETURN_IF_ERROR(checkArgs(tensor, packed, box, elementSize));
  copyRuns(static_cast<const std::byte*>(tensor), static_cast<std::byte*>(packed), box, elementSize, Direction::Pack);
  return Status::ok();
}

Status unpackBoxHost(const void* packed, void* tensor, const TensorBox& box, std::size_t elementSize) {
  CHIMERA_RETURN_IF_ERROR(checkArgs(packed, tensor, box, elementSize));
  copyRuns(static_cast<const std::byte*>(packed), static_cast<std::byte*>(tensor), box, elementSize, Direction::Unpack);
  return Status::ok();
}

}  // namespace chimera::detail
