// SPDX-License-Identifier: Apache-2.0
// Every DataType and every ReduceOp, for the loops of tests, benchmarks and backends that
// cover them all (private).
#pragma once

#include "chimera/types.hpp"
#include "core/type_lists.hpp"

namespace chimera {

/// Every DataType, in declaration order.
inline constexpr DataType kAllDataTypes[] = {DataType::F32, DataType::F64, DataType::F16, DataType::BF16,
                                             DataType::I32, DataType::I64, DataType::U8};

/// Every ReduceOp, in declaration order.
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                                             ReduceOp::Avg};

}  // namespace chimera
