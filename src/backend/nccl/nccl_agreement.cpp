// SPDX-License-Identifier: Apache-2.0
// Implements the NCCL backend's cross-rank argument agreement (CHIMERA_CHECK_ARGS).
#include "backend/nccl/nccl_agreement.hpp"
#include "core/type_lists.hpp"

#include <fmt/format.h>

#include <array>
#include <string>

namespace chimera::detail {
namespace {

constexpr std::array<const char*, kAgreementFields - 1> kFieldNames = {"collective", "count", "dtype", "op", "root"};

std::string describe(int field, std::int64_t value) {
  constexpr std::array<const char*, 5> kCollectives = {"allReduce", "reduceScatter", "allGather", "allToAll",
                                                       "broadcast"};
  if (field == 0 && value >= 0 && value < static_cast<std::int64_t>(kCollectives.size())) {
    return kCollectives[static_cast<std::size_t>(value)];
  }
  if (field == 2 && value >= 0 && value < static_cast<std::int64_t>(std::size(kAllDataTypes))) {
    return std::string(dataTypeName(static_cast<DataType>(value)));
  }
  if (field == 3 && value >= 0 && value < static_cast<std::int64_t>(std::size(kAllReduceOps))) {
    return std::string(reduceOpName(static_cast<ReduceOp>(value)));
  }
  return std::to_string(value);
}

}  // namespace

void encodeAgreement(const NcclCallSignature& signature, bool valid, std::int64_t* values) {
  values[0] = static_cast<std::int64_t>(signature.kind);
  values[1] = signature.count;
  values[2] = static_cast<std::int64_t>(signature.dtype);
  values[3] = static_cast<std::int64_t>(signature.op);
  values[4] = signature.root;
  values[5] = valid ? 1 : 0;
  for (int i = 0; i < kAgreementFields; ++i) values[kAgreementFields + i] = -values[i];
}

Status agreementVerdict(const std::int64_t* reduced, const Status& local, std::string_view group) {
  if (!local.isOk()) return local;
  if (reduced[kAgreementFields - 1] == 0) {
    return Status::invalidArgument(fmt::format("another member of group {} passed invalid arguments", group));
  }
  std::string differences;
  for (int field = 0; field < kAgreementFields - 1; ++field) {
    const std::int64_t low = reduced[field];
    const std::int64_t high = -reduced[kAgreementFields + field];
    if (low == high) continue;
    differences += fmt::format("{}{} (min {}, max {})", differences.empty() ? "" : ", ", kFieldNames[field],
                               describe(field, low), describe(field, high));
  }
  if (differences.empty()) return Status::ok();
  return Status::mismatch(fmt::format("members of group {} disagree on {}", group, differences));
}

}  // namespace chimera::detail
