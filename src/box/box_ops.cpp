// SPDX-License-Identifier: Apache-2.0
// Implements the backends' host box operations: Box to TensorBox, pack/unpack by DataType.
#include "box/box_ops.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "box/box_pack.hpp"
#include "core/check.hpp"

namespace chimera::detail {

Status toTensorBox(std::span<const std::int64_t> shape, const Box& box, TensorBox& out) {
  const std::size_t n = shape.size();
  CHIMERA_CHECK_ARG(n >= 1 && n <= static_cast<std::size_t>(kMaxBoxDims), "tensor of {} dimensions (1..{} allowed)", n,
                    kMaxBoxDims);
  CHIMERA_CHECK_ARG(box.offset.size() == n && box.extent.size() == n,
                    "box {} has {} dimensions, the tensor [{}] has {}", box.toString(), box.extent.size(),
                    fmt::join(shape, "x"), n);
  out = TensorBox{};
  out.ndims = static_cast<int>(n);
  for (std::size_t d = 0; d < n; ++d) {
    out.dims[d] = shape[d];
    out.offset[d] = box.offset[d];
    out.extent[d] = box.extent[d];
  }
  return validateBox(out);
}

Status hostPackBox(const void* tensor, std::span<const std::int64_t> shape, const Box& box, void* packed,
                   DataType dtype) {
  TensorBox tensorBox;
  CHIMERA_RETURN_IF_ERROR(toTensorBox(shape, box, tensorBox));
  return packBoxHost(tensor, packed, tensorBox, dataTypeSize(dtype));
}

Status hostUnpackBox(const void* packed, void* tensor, std::span<const std::int64_t> shape, const Box& box,
                     DataType dtype) {
  TensorBox tensorBox;
  CHIMERA_RETURN_IF_ERROR(toTensorBox(shape, box, tensorBox));
  return unpackBoxHost(packed, tensor, tensorBox, dataTypeSize(dtype));
}

}  // namespace chimera::detail
