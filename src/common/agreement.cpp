// SPDX-License-Identifier: Apache-2.0
// Implements backend-neutral cross-rank agreement: ranges of words, signatures, call arguments.
#include "common/agreement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <string>

#include "core/type_lists.hpp"

namespace chimera::detail {
namespace {

// Call agreement words: the signature fields, then the rank if its arguments are invalid
// (kNoRefusal if they are valid), whose MIN is the lowest rank that refused the call.
constexpr std::array<const char*, 5> kCallFields = {"collective", "count", "dtype", "op", "root"};
constexpr std::int64_t kNoRefusal = std::numeric_limits<std::int64_t>::max();

std::string describe(std::size_t field, std::int64_t value) {
  if (field == 0 && value >= 0 && value < static_cast<std::int64_t>(kOpKindCount)) {
    return std::string(opKindInfo(static_cast<OpKind>(value)).call);
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

Status agreeOnRange(std::span<const std::int64_t> words, const GroupMin& min, WordRange& out) {
  const std::size_t n = words.size();
  // Not a reused buffer: the reduction may itself agree (a backend that checks the arguments
  // of the allReduce it runs for an Executor or a Session), which would reuse it under us.
  std::vector<std::int64_t> values(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    values[i] = words[i];
    values[n + i] = -words[i];
  }
  if (n != 0) {
    if (Status s = min(values); !s.isOk()) return s;
  }
  out.low.assign(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n));
  out.high.resize(n);
  for (std::size_t i = 0; i < n; ++i) out.high[i] = -values[n + i];
  return Status::ok();
}

Status agreeOnSignature(std::int64_t hash, bool failed, int rank, std::span<const std::uint8_t> flags,
                        const GroupMin& min, SignatureVerdict& out) {
  std::vector<std::int64_t> words{hash, failed ? rank : kNoRefusal};
  words.insert(words.end(), flags.begin(), flags.end());
  WordRange range;
  if (Status s = agreeOnRange(words, min, range); !s.isOk()) return s;
  out.lowHash = range.low[0];
  out.highHash = range.high[0];
  out.anyFailed = range.low[1] != kNoRefusal;
  out.failedRank = out.anyFailed ? range.low[1] : -1;
  out.flags.resize(flags.size());
  for (std::size_t i = 0; i < flags.size(); ++i) out.flags[i] = range.high[2 + i] != 0 ? 1 : 0;
  return Status::ok();
}

Status agreeOnCall(const CallSignature& signature, const Status& local, int rank, std::string_view group,
                   const GroupMin& min) {
  const std::array<std::int64_t, kCallFields.size() + 1> words = {
      static_cast<std::int64_t>(signature.kind), signature.count, static_cast<std::int64_t>(signature.dtype),
      static_cast<std::int64_t>(signature.op),   signature.root,  local.isOk() ? kNoRefusal : rank};
  WordRange range;
  if (Status s = agreeOnRange(words, min, range); !s.isOk()) return s;
  if (!local.isOk()) return local;
  const std::string_view call = opKindInfo(signature.kind).call;
  // A refusing member's signature says nothing (Backend::refuseCollective passes none): its
  // refusal is the verdict, whatever the fields.
  if (const std::int64_t refused = range.low[kCallFields.size()]; refused != kNoRefusal) {
    return Status::mismatch(
        fmt::format("rank {}: rank {} of group {} refused the call ({}): its own arguments are "
                    "invalid (InvalidArgument there); no member ran it",
                    rank, refused, group, call));
  }
  std::string differences;
  for (std::size_t i = 0; i < kCallFields.size(); ++i) {
    if (range.agreed(i)) continue;
    differences += fmt::format("{}{} differs (min {}, max {})", differences.empty() ? "" : ", ", kCallFields[i],
                               describe(i, range.low[i]), describe(i, range.high[i]));
  }
  if (!differences.empty()) {
    return Status::mismatch(fmt::format("rank {}: members of group {} disagree on the arguments of {}: {}", rank, group,
                                        call, differences));
  }
  return Status::ok();
}

Status transfersRefused(int peer, int self) {
  return Status::mismatch(
      fmt::format("point-to-point: rank {} refused its transfers with rank {} (its own arguments are invalid: "
                  "InvalidArgument there); nothing moved between them",
                  peer, self));
}

std::vector<std::int64_t> standInWords(int words, int rank) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(std::max(words, 1)), kStandInNeutral);
  out.back() = rank;
  return out;
}

Status stoodIn(std::string_view round, int rank, std::string_view fault) {
  return Status::mismatch(fmt::format(
      "{}: rank {} failed this call before it knew the call's group and stood in for it, so every member fails it{}",
      round, rank, fault.empty() ? std::string() : fmt::format(" ({})", fault)));
}

Status agreeOnNewGroups(const NewGroups& groups, const Status& local, int rank, const GroupMin& min) {
  SignatureVerdict verdict;
  if (Status s = agreeOnSignature(groups.hash, !local.isOk(), rank, {}, min, verdict); !s.isOk()) return s;
  if (!local.isOk()) return local;
  if (verdict.anyFailed) {
    return Status::invalidArgument(
        fmt::format("createGroups: rank {} passed axes mesh {} does not have; no {} were created", verdict.failedRank,
                    groups.mesh, groups.what));
  }
  if (verdict.sameHash()) return Status::ok();
  return Status::mismatch(fmt::format(
      "rank {} of mesh {}: the ranks create different {} at once (this rank: [{}]); every rank must create the same "
      "groups together (Backend::createGroups at setup); none was created",
      rank, groups.mesh, groups.what, groups.names));
}

}  // namespace chimera::detail
