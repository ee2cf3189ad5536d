// SPDX-License-Identifier: Apache-2.0
// Implements the MPI backend's argument checks: local validation and cross-rank agreement.
#include "mpi/arg_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "core/check.hpp"
#include "core/type_lists.hpp"
#include "mpi/word_agreement.hpp"

namespace chimera::detail {
namespace {

constexpr int kAgreementTag = 0x4143;  // 'AC'

}  // namespace

Status checkDataType(DataType dtype) {
  CHIMERA_CHECK_ARG(std::find(std::begin(kAllDataTypes), std::end(kAllDataTypes), dtype) != std::end(kAllDataTypes),
                    "unknown dtype value {}", static_cast<int>(dtype));
  return Status::ok();
}

Status checkReduceOp(DataType dtype, ReduceOp op) {
  CHIMERA_CHECK_ARG(std::find(std::begin(kAllReduceOps), std::end(kAllReduceOps), op) != std::end(kAllReduceOps),
                    "unknown reduce op value {}", static_cast<int>(op));
  if (!reduceOpSupported(dtype, op))
    return Status::unsupported(
        fmt::format("reduce op {} is not supported on dtype {}", reduceOpName(op), dataTypeName(dtype)));
  return Status::ok();
}

Status checkBuffer(const void* ptr, std::size_t count, const char* what) {
  CHIMERA_CHECK_ARG(ptr != nullptr || count == 0, "{} is null but count is {}", what, count);
  return Status::ok();
}

Status agreeOnCall(const MpiGroup& group, const CallSignature& signature, const Status& local, int rank,
                   std::string_view groupName) {
  if (group.size <= 1) return local;
  const GroupMin min =
      groupMin(group, kAgreementTag, fmt::format("argument agreement check of {}", opKindInfo(signature.kind).call));
  return detail::agreeOnCall(signature, local, rank, groupName, min);
}

}  // namespace chimera::detail
