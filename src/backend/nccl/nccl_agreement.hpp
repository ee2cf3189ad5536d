// SPDX-License-Identifier: Apache-2.0
// Cross-rank argument agreement of the NCCL backend (CHIMERA_CHECK_ARGS=1): before a
// collective, the members reduce (MIN) their call signature, its negation (so MIN also gives
// MAX) and a validity flag, and all return the same verdict instead of some of them hanging in
// a mismatched collective. Host-side encoding and verdict; the reduction itself is one
// ncclAllReduce in NcclBackend.
#pragma once

#include <cstdint>
#include <string_view>

#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::detail {

/// Which collective a call is (part of the signature, so different calls are caught too).
enum class NcclCollective : std::uint8_t { AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast };

/// What every member of a group must pass identically; unused fields stay at their defaults.
struct NcclCallSignature {
  NcclCollective kind = NcclCollective::AllReduce;
  std::int64_t count = 0;
  DataType dtype = DataType::F32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
};

/// Signature fields plus the validity flag.
inline constexpr int kAgreementFields = 6;
/// Values reduced per agreement: the fields, then their negations.
inline constexpr int kAgreementValues = 2 * kAgreementFields;

/// Writes the signature, the flag (1 = valid) and their negations into `values`.
void encodeAgreement(const NcclCallSignature& signature, bool valid, std::int64_t* values);

/// The verdict from the element-wise MIN over the group of encoded vectors: `local` when it
/// is an error; InvalidArgument when another member reported bad arguments; Mismatch naming
/// each field whose values differ (min and max); else ok. `group` names the group in messages.
[[nodiscard]] Status agreementVerdict(const std::int64_t* reduced, const Status& local, std::string_view group);

}  // namespace chimera::detail
