// SPDX-License-Identifier: Apache-2.0
// Implements the MPI backend's argument checks: local validation and cross-rank agreement.
#include "backend/mpi/arg_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <string>

#include "backend/mpi/word_agreement.hpp"
#include "backend/mpi/mpi_util.hpp"
#include "core/check.hpp"
#include "core/type_lists.hpp"

namespace chimera::detail {
namespace {

// Fields of the agreement vector; the last entry is the validity flag (1 valid, 0 not).
constexpr std::array<const char*, 5> kFieldNames = {"collective", "count", "dtype", "op", "root"};
constexpr std::size_t kFields = kFieldNames.size() + 1;
constexpr int kAgreementTag = 0x4143;  // 'AC'

std::string describe(std::size_t field, long long value) {
  switch (field) {
    case 0:
      return collectiveKindName(static_cast<CollectiveKind>(value));
    case 2:
      if (checkDataType(static_cast<DataType>(value)).isOk())
        return std::string(dataTypeName(static_cast<DataType>(value)));
      break;
    case 3:
      if (value >= 0 && value < static_cast<long long>(std::size(kAllReduceOps)))
        return std::string(reduceOpName(static_cast<ReduceOp>(value)));
      break;
    default:
      break;
  }
  return std::to_string(value);
}

}  // namespace

const char* collectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce:
      return "allReduce";
    case CollectiveKind::ReduceScatter:
      return "reduceScatter";
    case CollectiveKind::AllGather:
      return "allGather";
    case CollectiveKind::AllToAll:
      return "allToAll";
    case CollectiveKind::Broadcast:
      return "broadcast";
  }
  return "unknown collective";
}

Status checkDataType(DataType dtype) {
  CHIMERA_CHECK_ARG(std::find(std::begin(kAllDataTypes), std::end(kAllDataTypes), dtype) != std::end(kAllDataTypes),
                    "unknown dtype value {}", static_cast<int>(dtype));
  return Status::ok();
}

Status checkReduceOp(DataType dtype, ReduceOp op) {
  CHIMERA_CHECK_ARG(std::find(std::begin(kAllReduceOps), std::end(kAllReduceOps), op) != std::end(kAllReduceOps),
                    "unknown reduce op value {}", static_cast<int>(op));
  if (!reduceOpSupported(dtype, op))
    return Status::unsupported(fmt::format("reduce op {} is not supported on dtype {}", reduceOpName(op),
                                           dataTypeName(dtype)));
  return Status::ok();
}

Status checkBuffer(const void* ptr, std::size_t count, const char* what) {
  CHIMERA_CHECK_ARG(ptr != nullptr || count == 0, "{} is null but count is {}", what, count);
  return Status::ok();
}

Status agreeOnCall(const MpiGroup& group, const CallSignature& signature, const Status& local) {
  const std::array<long long, kFields> mine = {static_cast<long long>(signature.kind),
                                               static_cast<long long>(signature.count),
                                               static_cast<long long>(signature.dtype),
                                               static_cast<long long>(signature.op),
                                               signature.root,
                                               local.isOk() ? 1 : 0};
  WordRange range;
  CHIMERA_RETURN_IF_ERROR(agreeOnWords(group, mine, kAgreementTag,
                                       fmt::format("argument agreement check of {}", collectiveKindName(signature.kind)),
                                       range));
  if (!local.isOk()) return local;
  std::string differences;
  for (std::size_t i = 0; i + 1 < kFields; ++i) {
    const long long low = range.low[i];
    const long long high = range.high[i];
    if (low == high) continue;
    if (!differences.empty()) differences += "; ";
    differences += fmt::format("{} differs (min {}, max {})", kFieldNames[i], describe(i, low), describe(i, high));
  }
  if (!differences.empty())
    return Status::mismatch(fmt::format("ranks of a group of {} disagree on the arguments of {}: {}", group.size,
                                        collectiveKindName(signature.kind), differences));
  if (range.low[kFields - 1] == 0)
    return Status::invalidArgument(fmt::format("another rank of the group passed invalid arguments to {}",
                                               collectiveKindName(signature.kind)));
  return Status::ok();
}

}  // namespace chimera::detail
