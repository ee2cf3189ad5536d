// SPDX-License-Identifier: Apache-2.0
// DLPack views of caller tensors; see tensor_view.hpp.
#include "tensor_view.hpp"

#include <fmt/format.h>

#include "errors.hpp"

namespace chimera::python {
namespace {

namespace dl = nb::dlpack;

std::string shapeText(const nb::ndarray<>& array) {
  std::string out = "(";
  for (std::size_t d = 0; d < array.ndim(); ++d) out += fmt::format("{}{}", d ? ", " : "", array.shape(d));
  return out + (array.ndim() == 1 ? ",)" : ")");
}

std::string stridesText(const nb::ndarray<>& array) {
  std::string out = "(";
  for (std::size_t d = 0; d < array.ndim(); ++d) out += fmt::format("{}{}", d ? ", " : "", array.stride(d));
  return out + (array.ndim() == 1 ? ",)" : ")");
}

std::string dtypeText(dl::dtype t) {
  const char* kind = "?";
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Int: kind = "int"; break;
    case dl::dtype_code::UInt: kind = "uint"; break;
    case dl::dtype_code::Float: kind = "float"; break;
    case dl::dtype_code::Bfloat: kind = "bfloat"; break;
    case dl::dtype_code::Complex: kind = "complex"; break;
    case dl::dtype_code::Bool: kind = "bool"; break;
    default: break;
  }
  return t.lanes == 1 ? fmt::format("{}{}", kind, t.bits) : fmt::format("{}{}x{}", kind, t.bits, t.lanes);
}

bool chimeraDataType(dl::dtype t, DataType& out) {
  if (t.lanes != 1) return false;
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Float:
      if (t.bits == 32)
        out = DataType::F32;
      else if (t.bits == 64)
        out = DataType::F64;
      else if (t.bits == 16)
        out = DataType::F16;
      else
        return false;
      return true;
    case dl::dtype_code::Bfloat:
      if (t.bits != 16) return false;
      out = DataType::BF16;
      return true;
    case dl::dtype_code::Int:
      if (t.bits == 32)
        out = DataType::I32;
      else if (t.bits == 64)
        out = DataType::I64;
      else
        return false;
      return true;
    case dl::dtype_code::UInt:
      if (t.bits != 8) return false;
      out = DataType::U8;
      return true;
    default: return false;
  }
}

const char* deviceName(int type) {
  switch (type) {
    case nb::device::cpu::value: return "cpu";
    case nb::device::cuda::value: return "cuda";
    case nb::device::cuda_host::value: return "cuda_host";
    case nb::device::cuda_managed::value: return "cuda_managed";
    case nb::device::rocm::value: return "rocm";
    case nb::device::metal::value: return "metal";
    default: return "another device";
  }
}

bool inSpace(int type, MemorySpace space) {
  if (space == MemorySpace::Host) return type == nb::device::cpu::value || type == nb::device::cuda_host::value;
  return type == nb::device::cuda::value || type == nb::device::cuda_managed::value;
}

}  // namespace

TensorView viewTensor(const nb::ndarray<>& array, const char* call, const char* name, MemorySpace space) {
  TensorView view;
  const int device = array.device_type();
  if (!inSpace(device, space)) {
    raiseValueError(fmt::format("{}: tensor '{}' must be in {} memory for this backend, but it is on {} (device {})",
                                call, name, space == MemorySpace::Host ? "host (cpu)" : "CUDA device",
                                deviceName(device), array.device_id()));
  }
  if (!chimeraDataType(array.dtype(), view.dtype)) {
    raiseValueError(fmt::format(
        "{}: tensor '{}' has dtype {}, which chimera does not communicate (float32, float64, float16, bfloat16, "
        "int32, int64, uint8)",
        call, name, dtypeText(array.dtype())));
  }
  // Row-major contiguity; extents of 1 may carry any stride (torch and NumPy disagree there).
  std::int64_t expected = 1;
  bool contiguous = true;
  for (std::size_t d = array.ndim(); d-- > 0;) {
    const auto extent = static_cast<std::int64_t>(array.shape(d));
    if (extent != 1 && array.stride(d) != expected) contiguous = false;
    expected *= extent;
  }
  if (!contiguous && expected != 0) {
    raiseValueError(
        fmt::format("{}: tensor '{}' must be C-contiguous (chimera never copies silently), but shape {} has strides {} "
                    "(in elements); pass tensor.contiguous() / numpy.ascontiguousarray(...)",
                    call, name, shapeText(array), stridesText(array)));
  }
  view.data = array.data();
  view.elements = array.size();
  view.bytes = array.nbytes();
  view.shape.reserve(array.ndim());
  for (std::size_t d = 0; d < array.ndim(); ++d) view.shape.push_back(static_cast<std::int64_t>(array.shape(d)));
  return view;
}

TensorView viewObject(nb::handle obj, const char* call, const char* name, MemorySpace space) {
  nb::ndarray<> array;
  // convert=false: nanobind would otherwise copy (e.g. a list, or a tensor it can't view) silently.
  if (!nb::try_cast(obj, array, false)) {
    raiseValueError(
        fmt::format("{}: tensor '{}' must be a writable array exporting DLPack (torch.Tensor, numpy.ndarray, ...), "
                    "got {}",
                    call, name, nb::str(obj.type()).c_str()));
  }
  return viewTensor(array, call, name, space);
}

std::string describe(const TensorView& view) {
  std::string out = "shape (";
  for (std::size_t d = 0; d < view.shape.size(); ++d) out += fmt::format("{}{}", d ? ", " : "", view.shape[d]);
  return out +
         fmt::format("{}) {} ({} bytes)", view.shape.size() == 1 ? "," : "", dataTypeName(view.dtype), view.bytes);
}

void expectBytes(const TensorView& view, std::size_t expected, const char* call, const char* name,
                 const std::string& why) {
  if (view.bytes == expected) return;
  raiseValueError(
      fmt::format("{}: tensor '{}' must hold {} bytes ({}), but it is {}", call, name, expected, why, describe(view)));
}

void expectDtype(const TensorView& view, DataType expected, const char* call, const char* name,
                 const std::string& why) {
  if (view.dtype == expected) return;
  raiseValueError(fmt::format("{}: tensor '{}' must have dtype {} ({}), but it is {}", call, name,
                              dataTypeName(expected), why, describe(view)));
}

}  // namespace chimera::python
