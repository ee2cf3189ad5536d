// SPDX-License-Identifier: Apache-2.0
// Implements the plain-MPI baseline's types and reduction ops (user ops for f16/bf16).
#include "mpi_baseline.hpp"

#include <fmt/format.h>

#include <climits>

#include "common/host_reduce.hpp"

namespace chimera::bench {
namespace {

/// MPI_User_function for 16-bit floats: inout[i] = op(inout[i], in[i]) (commutative).
template <DataType kType, ReduceOp kOp>
void reduceSixteenBit(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  detail::reduceInto(inout, in, static_cast<std::size_t>(*len), kType, kOp);
}

template <DataType kType>
MPI_User_function* sixteenBitFunction(ReduceOp op) {
  switch (op) {
    case ReduceOp::Prod: return &reduceSixteenBit<kType, ReduceOp::Prod>;
    case ReduceOp::Min: return &reduceSixteenBit<kType, ReduceOp::Min>;
    case ReduceOp::Max: return &reduceSixteenBit<kType, ReduceOp::Max>;
    case ReduceOp::Sum:
    case ReduceOp::Avg: break;
  }
  return &reduceSixteenBit<kType, ReduceOp::Sum>;
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
  MPI_User_function* function = dtype == DataType::F16 ? sixteenBitFunction<DataType::F16>(combined)
                                                       : sixteenBitFunction<DataType::BF16>(combined);
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
  detail::divideByCount(buffer, count, dtype, groupSize);
}

}  // namespace chimera::bench
