// SPDX-License-Identifier: Apache-2.0
// Implements communication programs: a plan turned into rounds of priced steps.
#include "chimera/planning/comm_program.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>

#include "core/check.hpp"

namespace chimera {

Status parseStepKind(std::string_view text, OpKind& out) {
  CHIMERA_CHECK_ARG(findOpKind(text, kOpInProgram, out), "unknown step kind '{}' (expected {})", text,
                    opKindKeywords(kOpInProgram));
  return Status::ok();
}

CommStep CommStep::collective(OpKind kind, std::vector<std::vector<int>> groups, std::uint64_t bytesPerRank) {
  CommStep step;
  step.kind = kind;
  step.groups = std::move(groups);
  step.bytesPerRank = bytesPerRank;
  return step;
}

CommStep CommStep::manyToMany(std::vector<Transfer> transfers) {
  CommStep step;
  step.kind = OpKind::ManyToMany;
  step.transfers = std::move(transfers);
  return step;
}

std::string CommStep::toString() const {
  if (kind == OpKind::ManyToMany) {
    std::uint64_t total = 0;
    for (const Transfer& t : transfers) total += t.bytes;
    return fmt::format("manytomany({} transfers, {} B)", transfers.size(), total);
  }
  std::string text(opKindName(kind));
  for (const auto& group : groups) text += fmt::format("[{}]", fmt::join(group, ","));
  return text + fmt::format(" L={}", bytesPerRank);
}

Status validateStep(const CommStep& step, int worldSize) {
  const std::string what = step.toString();
  CHIMERA_CHECK_ARG(opKindUsedIn(step.kind, kOpInProgram),
                    "{}: {} is not a step of a communication program (expected {})", what, opKindName(step.kind),
                    opKindKeywords(kOpInProgram));
  if (step.kind == OpKind::ManyToMany) {
    CHIMERA_CHECK_ARG(step.groups.empty(), "{}: a many-to-many step has transfers, not groups", what);
    for (std::size_t i = 0; i < step.transfers.size(); ++i) {
      const Transfer& t = step.transfers[i];
      CHIMERA_CHECK_ARG(t.src >= 0 && t.src < worldSize && t.dst >= 0 && t.dst < worldSize,
                        "{}: transfer {} ({} -> {}) names a rank outside the {} ranks of the topology", what, i, t.src,
                        t.dst, worldSize);
    }
    return Status::ok();
  }
  CHIMERA_CHECK_ARG(step.transfers.empty(), "{}: a collective step has groups, not transfers", what);
  CHIMERA_CHECK_ARG(!step.groups.empty(), "{}: a collective step needs at least one group", what);
  std::vector<bool> seen(static_cast<std::size_t>(worldSize > 0 ? worldSize : 0), false);
  for (const auto& group : step.groups) {
    CHIMERA_CHECK_ARG(!group.empty(), "{}: empty group", what);
    CHIMERA_CHECK_ARG(group.size() == step.groups.front().size(),
                      "{}: concurrent groups must have the same size ({} vs {})", what, group.size(),
                      step.groups.front().size());
    for (const int rank : group) {
      CHIMERA_CHECK_ARG(rank >= 0 && rank < worldSize, "{}: rank {} outside the {} ranks of the topology", what, rank,
                        worldSize);
      CHIMERA_CHECK_ARG(!seen[static_cast<std::size_t>(rank)], "{}: rank {} appears twice in one step", what, rank);
      seen[static_cast<std::size_t>(rank)] = true;
    }
  }
  return Status::ok();
}

}  // namespace chimera
