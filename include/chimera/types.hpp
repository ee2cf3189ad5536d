// SPDX-License-Identifier: Apache-2.0
// Element types and reduction operators (stable API), with their names as the tools and
// nccl-tests spell them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera {

/// Element type of a buffer. Matches the types NCCL reduces natively.
enum class DataType : std::uint8_t {
  F32,
  F64,
  F16,
  BF16,
  I32,
  I64,
  U8,
};

/// Size of one element in bytes.
std::size_t dataTypeSize(DataType type);
/// Short name as nccl-tests prints it: "float", "double", "half", "bfloat16", "int32", "int64", "uint8".
std::string_view dataTypeName(DataType type);
/// Parses a dtype name. Accepts the short names ("f32", "bf16", "i32", "u8", ...) and the
/// nccl-tests names ("float", "half", "bfloat16", "int32", "uint8", ...).
/// Returns InvalidArgument naming the text when it is not a known type.
[[nodiscard]] Status parseDataType(std::string_view text, DataType& out);

/// Reduction operator of a collective.
enum class ReduceOp : std::uint8_t {
  Sum,
  Prod,
  Min,
  Max,
  Avg,  ///< sum divided by the group size
};

/// Name: "sum", "prod", "min", "max", "avg".
std::string_view reduceOpName(ReduceOp op);
/// Parses a reduce-op name (as printed by reduceOpName). InvalidArgument on unknown text.
[[nodiscard]] Status parseReduceOp(std::string_view text, ReduceOp& out);

/// Whether `op` is supported on `type`. Every op is defined on every type here; avg on
/// integer types truncates toward zero like NCCL's. Kept as the single place to say "no".
bool reduceOpSupported(DataType type, ReduceOp op);

}  // namespace chimera
