// SPDX-License-Identifier: Apache-2.0
#include "exec/local_ops.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/box_pack.hpp"
#include "common/check.hpp"
#include "common/half.hpp"

namespace chimera::detail {
namespace {

template <typename T>
void scaleInteger(const void* input, void* output, std::size_t count, double factor) {
  const T* in = static_cast<const T*>(input);
  T* out = static_cast<T*>(output);
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  for (std::size_t i = 0; i < count; ++i) {
    const double v = std::trunc(static_cast<double>(in[i]) * factor);
    // hi may round up past the type's range (int64), so compare with >=.
    out[i] = v <= lo ? std::numeric_limits<T>::min() : (v >= hi ? std::numeric_limits<T>::max() : static_cast<T>(v));
  }
}

template <typename T>
void scaleFloat(const void* input, void* output, std::size_t count, T factor) {
  const T* in = static_cast<const T*>(input);
  T* out = static_cast<T*>(output);
  for (std::size_t i = 0; i < count; ++i) out[i] = in[i] * factor;
}

template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void scaleHalf(const void* input, void* output, std::size_t count, float factor) {
  const auto* in = static_cast<const std::uint16_t*>(input);
  auto* out = static_cast<std::uint16_t*>(output);
  for (std::size_t i = 0; i < count; ++i) out[i] = FromFloat(ToFloat(in[i]) * factor);
}

}  // namespace

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

Status hostScale(const void* input, void* output, std::size_t count, DataType dtype, double factor) {
  if (count == 0) return Status::ok();
  CHIMERA_CHECK_ARG(input != nullptr && output != nullptr, "scale of {} elements with a null pointer", count);
  switch (dtype) {
    case DataType::F32:
      scaleFloat<float>(input, output, count, static_cast<float>(factor));
      break;
    case DataType::F64:
      scaleFloat<double>(input, output, count, factor);
      break;
    case DataType::F16:
      scaleHalf<halfToFloat, floatToHalf>(input, output, count, static_cast<float>(factor));
      break;
    case DataType::BF16:
      scaleHalf<bf16ToFloat, floatToBf16>(input, output, count, static_cast<float>(factor));
      break;
    case DataType::I32:
    case DataType::I64:
    case DataType::U8:
      CHIMERA_CHECK_ARG(std::isfinite(factor), "scale factor {} is not finite for integer type {}", factor,
                        dataTypeName(dtype));
      if (dtype == DataType::I32) scaleInteger<std::int32_t>(input, output, count, factor);
      if (dtype == DataType::I64) scaleInteger<std::int64_t>(input, output, count, factor);
      if (dtype == DataType::U8) scaleInteger<std::uint8_t>(input, output, count, factor);
      break;
  }
  return Status::ok();
}

}  // namespace chimera::detail
