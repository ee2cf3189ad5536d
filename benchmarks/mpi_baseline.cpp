// SPDX-License-Identifier: Apache-2.0
#include "mpi_baseline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "element_codec.hpp"

namespace chimera::bench {
namespace {

float combine(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
    case ReduceOp::Sum:
    case ReduceOp::Avg: break;
  }
  return a + b;
}

/// MPI_User_function for 16-bit floats: inout[i] = op(in[i], inout[i]).
template <typename T, ReduceOp kOp>
void reduceSixteenBit(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = encodeElement<T>(combine(kOp, static_cast<float>(decodeElement(a[i])), static_cast<float>(decodeElement(b[i]))));
  }
}

template <typename T>
MPI_User_function* sixteenBitFunction(ReduceOp op) {
  switch (op) {
    case ReduceOp::Prod: return &reduceSixteenBit<T, ReduceOp::Prod>;
    case ReduceOp::Min: return &reduceSixteenBit<T, ReduceOp::Min>;
    case ReduceOp::Max: return &reduceSixteenBit<T, ReduceOp::Max>;
    case ReduceOp::Sum:
    case ReduceOp::Avg: break;
  }
  return &reduceSixteenBit<T, ReduceOp::Sum>;
}

MPI_Op predefinedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::Prod: return MPI_PROD;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Sum:
    case ReduceOp::Avg: break;
  }
  return MPI_SUM;
}

}  // namespace

MPI_Datatype mpiDatatype(DataType dtype) {
  switch (dtype) {
    case DataType::F32: return MPI_FLOAT;
    case DataType::F64: return MPI_DOUBLE;
    case DataType::F16:
    case DataType::BF16: return MPI_UINT16_T;
    case DataType::I32: return MPI_INT32_T;
    case DataType::I64: return MPI_INT64_T;
    case DataType::U8: break;
  }
  return MPI_UINT8_T;
}

Status mpiCount(std::size_t count, int& out) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    return Status::unsupported(fmt::format("count {} exceeds MPI's int range", count));
  }
  out = static_cast<int>(count);
  return Status::ok();
}

MpiOpTable::~MpiOpTable() {
  for (auto& [key, op] : userOps_) MPI_Op_free(&op);
}

Status MpiOpTable::get(DataType dtype, ReduceOp op, MPI_Op& out) {
  if (dtype != DataType::F16 && dtype != DataType::BF16) {
    out = predefinedOp(op);
    return Status::ok();
  }
  const ReduceOp combined = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  const auto key = std::make_pair(dtype, combined);
  if (const auto found = userOps_.find(key); found != userOps_.end()) {
    out = found->second;
    return Status::ok();
  }
  MPI_User_function* function =
      dtype == DataType::F16 ? sixteenBitFunction<Half>(combined) : sixteenBitFunction<BFloat16>(combined);
  MPI_Op created = MPI_OP_NULL;
  if (MPI_Op_create(function, /*commute=*/1, &created) != MPI_SUCCESS) {
    return Status::backendError(
        fmt::format("MPI_Op_create failed for {} {}", dataTypeName(dtype), reduceOpName(combined)));
  }
  userOps_.emplace(key, created);
  out = created;
  return Status::ok();
}

void finishAverage(void* buffer, std::size_t count, DataType dtype, int groupSize) {
  dispatchDataType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::Type;
    T* data = static_cast<T*>(buffer);
    for (std::size_t i = 0; i < count; ++i) {
      if constexpr (std::is_integral_v<T>) {
        data[i] = static_cast<T>(static_cast<std::int64_t>(data[i]) / groupSize);
      } else if constexpr (std::is_floating_point_v<T>) {
        data[i] = data[i] / static_cast<T>(groupSize);
      } else {
        data[i] = encodeElement<T>(decodeElement(data[i]) / groupSize);
      }
    }
  });
}

}  // namespace chimera::bench
