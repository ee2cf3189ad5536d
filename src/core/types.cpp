// SPDX-License-Identifier: Apache-2.0
// Implements the element types and reduction operators: sizes, names, parsing.
#include "chimera/types.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <limits>
#include <utility>

namespace chimera {
namespace {

struct DataTypeInfo {
  DataType type;
  std::size_t size;
  std::string_view name;   // nccl-tests spelling
  std::string_view alias;  // short spelling
};

constexpr std::array<DataTypeInfo, 7> kDataTypeInfo{{
    {DataType::F32, 4, "float", "f32"},
    {DataType::F64, 8, "double", "f64"},
    {DataType::F16, 2, "half", "f16"},
    {DataType::BF16, 2, "bfloat16", "bf16"},
    {DataType::I32, 4, "int32", "i32"},
    {DataType::I64, 8, "int64", "i64"},
    {DataType::U8, 1, "uint8", "u8"},
}};

constexpr std::array<std::pair<ReduceOp, std::string_view>, 5> kReduceOpNames{{
    {ReduceOp::Sum, "sum"},
    {ReduceOp::Prod, "prod"},
    {ReduceOp::Min, "min"},
    {ReduceOp::Max, "max"},
    {ReduceOp::Avg, "avg"},
}};

const DataTypeInfo& info(DataType type) { return kDataTypeInfo[static_cast<std::size_t>(type)]; }

}  // namespace

std::size_t dataTypeSize(DataType type) { return info(type).size; }

std::string_view dataTypeName(DataType type) { return info(type).name; }

Status parseDataType(std::string_view text, DataType& out) {
  for (const auto& entry : kDataTypeInfo) {
    if (text == entry.name || text == entry.alias) {
      out = entry.type;
      return Status::ok();
    }
  }
  if (text == "fp32") return out = DataType::F32, Status::ok();
  if (text == "fp16") return out = DataType::F16, Status::ok();
  return Status::invalidArgument(
      fmt::format("unknown data type '{}' (expected one of f32 f64 f16 bf16 i32 i64 u8)", text));
}

std::string_view reduceOpName(ReduceOp op) { return kReduceOpNames[static_cast<std::size_t>(op)].second; }

Status parseReduceOp(std::string_view text, ReduceOp& out) {
  for (const auto& [op, name] : kReduceOpNames) {
    if (text == name) {
      out = op;
      return Status::ok();
    }
  }
  return Status::invalidArgument(fmt::format("unknown reduce op '{}' (expected one of sum prod min max avg)", text));
}

bool reduceOpSupported(DataType /*type*/, ReduceOp /*op*/) { return true; }

}  // namespace chimera
