// SPDX-License-Identifier: Apache-2.0
// Argument checks, dtype and reduction mapping, staging (see staging.hpp).
#include "staging.hpp"

#include <c10/util/Exception.h>

namespace chimera::torch_ext {

namespace {
thread_local std::uint64_t gBackendResults = 0;
}  // namespace

void check(const char* op, const Status& status) {
  ++gBackendResults;
  TORCH_CHECK(status.isOk(), "chimera ", op, ": ", status.toString());
}

std::uint64_t backendResults() { return gBackendResults; }

void requireDenseOn(const char* op, const at::Tensor& t, const c10::Device& device) {
  TORCH_CHECK(t.defined(), "chimera ", op, ": undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "chimera ", op, ": only dense (strided) tensors are supported");
  TORCH_CHECK(t.device() == device, "chimera ", op, ": a tensor on ", t.device().str(), " where the op runs on ",
              device.str(), " (every tensor of an op on one device)");
}

int requireRoot(const char* op, std::int64_t root, int size) {
  TORCH_CHECK(root >= 0 && root < size, "chimera ", op, ": root ", root, " is not a rank of this group of ", size);
  return static_cast<int>(root);
}

void requireOne(const char* op, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 1, "chimera ", op, ": expects one tensor per call, got ", tensors.size());
}

at::Tensor firstOf(const std::vector<at::Tensor>& tensors) { return tensors.empty() ? at::Tensor() : tensors[0]; }

std::size_t bytesOf(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()) * t.element_size(); }

ReduceType reduceTypeOf(const char* op, at::ScalarType type) {
  switch (type) {
    case at::kFloat: return {DataType::F32, type};
    case at::kDouble: return {DataType::F64, type};
    case at::kHalf: return {DataType::F16, type};
    case at::kBFloat16: return {DataType::BF16, type};
    case at::kInt: return {DataType::I32, type};
    case at::kLong: return {DataType::I64, type};
    case at::kByte: return {DataType::U8, type};
    case at::kChar:
    case at::kShort: return {DataType::I32, at::kInt};
    default: break;
  }
  TORCH_CHECK(false, "chimera ", op, ": reductions of dtype ", c10::toString(type),
              " are not supported (float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8 are)");
}

ReduceOp reduceOpOf(const char* op, const c10d::ReduceOp& reduceOp, bool integral) {
  switch (reduceOp.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::Sum;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::Prod;
    case c10d::ReduceOp::MIN: return ReduceOp::Min;
    case c10d::ReduceOp::MAX: return ReduceOp::Max;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!integral, "chimera ", op, ": ReduceOp.AVG needs a floating-point tensor");
      return ReduceOp::Avg;
    default: break;
  }
  TORCH_CHECK(false, "chimera ", op, ": reduce op ", static_cast<int>(reduceOp.op_),
              " is not supported (SUM, AVG, PRODUCT, MIN, MAX are)");
}

Staged::Staged(const at::Tensor& t, at::ScalarType type, bool readIn) : original_(t) {
  if (t.is_contiguous() && t.scalar_type() == type) {
    buffer_ = t;
  } else if (readIn) {
    buffer_ = t.to(type).contiguous();
    if (buffer_.is_same(t)) buffer_ = t.clone(at::MemoryFormat::Contiguous);
  } else {
    buffer_ = at::empty(t.sizes(), t.options().dtype(type));
  }
}

void Staged::commit() {
  if (!buffer_.is_same(original_)) original_.copy_(buffer_);
}

}  // namespace chimera::torch_ext
