// SPDX-License-Identifier: Apache-2.0
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

Status parseSize(std::string_view text, std::size_t& out) {
  if (text.empty()) return Status::invalidArgument("empty size");
  std::size_t value = 0;
  std::size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const auto digit = static_cast<std::size_t>(text[i] - '0');
    if (value > (std::numeric_limits<std::size_t>::max() - digit) / 10)
      return Status::invalidArgument(fmt::format("size '{}' overflows", text));
    value = value * 10 + digit;
  }
  if (i == 0) return Status::invalidArgument(fmt::format("malformed size '{}' (expected e.g. 4096, 64K, 32M, 1G)", text));
  std::size_t scale = 1;
  if (i < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[i]))) {
      case 'K': scale = std::size_t{1} << 10; break;
      case 'M': scale = std::size_t{1} << 20; break;
      case 'G': scale = std::size_t{1} << 30; break;
      default:
        return Status::invalidArgument(fmt::format("malformed size '{}' (expected e.g. 4096, 64K, 32M, 1G)", text));
    }
    ++i;
    if (i < text.size() && (text[i] == 'B' || text[i] == 'b')) ++i;
    if (i != text.size())
      return Status::invalidArgument(fmt::format("malformed size '{}' (expected e.g. 4096, 64K, 32M, 1G)", text));
  }
  if (value > std::numeric_limits<std::size_t>::max() / scale)
    return Status::invalidArgument(fmt::format("size '{}' overflows", text));
  out = value * scale;
  return Status::ok();
}

std::string formatSize(std::size_t bytes) {
  constexpr std::array<std::pair<std::size_t, char>, 3> kUnits{
      {{std::size_t{1} << 30, 'G'}, {std::size_t{1} << 20, 'M'}, {std::size_t{1} << 10, 'K'}}};
  for (const auto& [unit, suffix] : kUnits) {
    if (bytes >= unit && bytes % unit == 0) return fmt::format("{}{}", bytes / unit, suffix);
  }
  return fmt::format("{}", bytes);
}

}  // namespace chimera
