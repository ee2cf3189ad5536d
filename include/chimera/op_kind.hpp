// SPDX-License-Identifier: Apache-2.0
// Operation kinds (stable API): the one list of the collectives and local ops chimera knows,
// with what each one is. Adding a collective means adding one enumerator and one row of
// kOpKinds; every layer (chains, plans, communication programs, backends, the benchmark)
// takes its names, flags and subsets from here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace chimera {

/// Every operation kind, in the order of kOpKinds.
enum class OpKind : std::uint8_t {
  AllReduce,
  ReduceScatter,
  AllGather,
  AllToAll,
  Broadcast,
  Send,
  Slice,
  ManyToMany,
  LocalCopy,
  Scale,
};

/// Where an operation kind appears; OpKindInfo::uses is a bit set of these.
enum OpUse : std::uint8_t {
  kOpInChain = 1u << 0,    ///< an op a framework issues on a tensor (ChainOp)
  kOpInPlan = 1u << 1,     ///< a step of a plan (PlanStep)
  kOpInProgram = 1u << 2,  ///< a step of a communication program the cost model prices (CommStep)
  kOpOnBackend = 1u << 3,  ///< a collective over a group that every Backend implements
};

/// What one operation kind is.
struct OpKindInfo {
  OpKind kind;
  std::string_view keyword;  ///< text form in chains, plans, programs and JSON ("allreduce")
  std::string_view call;     ///< the Backend call that runs it, as messages name it ("allReduce")
  bool reduces;              ///< takes a ReduceOp (partial sums in, reduced values out)
  bool inPlace;              ///< the Backend call has an in-place form (Backend documents each)
  std::uint8_t uses;         ///< OpUse bits
};

/// The table: one row per OpKind, in enumerator order.
inline constexpr OpKindInfo kOpKinds[] = {
    {OpKind::AllReduce, "allreduce", "allReduce", true, true, kOpInChain | kOpInPlan | kOpInProgram | kOpOnBackend},
    {OpKind::ReduceScatter, "reducescatter", "reduceScatter", true, true,
     kOpInChain | kOpInPlan | kOpInProgram | kOpOnBackend},
    {OpKind::AllGather, "allgather", "allGather", false, true, kOpInChain | kOpInPlan | kOpInProgram | kOpOnBackend},
    {OpKind::AllToAll, "alltoall", "allToAll", false, false, kOpInChain | kOpInPlan | kOpInProgram | kOpOnBackend},
    {OpKind::Broadcast, "broadcast", "broadcast", false, true, kOpInChain | kOpInPlan | kOpInProgram | kOpOnBackend},
    {OpKind::Send, "send", "send", false, false, kOpInChain | kOpInPlan},
    {OpKind::Slice, "slice", "slice", false, false, kOpInChain},
    {OpKind::ManyToMany, "manytomany", "groupedP2P", false, false, kOpInPlan | kOpInProgram},
    {OpKind::LocalCopy, "localcopy", "copy", false, false, kOpInPlan},
    {OpKind::Scale, "scale", "scale", false, false, kOpInPlan},
};

/// Number of operation kinds.
inline constexpr std::size_t kOpKindCount = std::size(kOpKinds);

/// The row of `kind`.
constexpr const OpKindInfo& opKindInfo(OpKind kind) { return kOpKinds[static_cast<std::size_t>(kind)]; }
/// The text keyword of `kind` ("allreduce").
constexpr std::string_view opKindName(OpKind kind) { return opKindInfo(kind).keyword; }
/// Whether `kind` appears where `use` says.
constexpr bool opKindUsedIn(OpKind kind, OpUse use) { return (opKindInfo(kind).uses & use) != 0; }

/// The number of kinds used in `use`.
constexpr std::size_t opKindCountIn(OpUse use) {
  std::size_t count = 0;
  for (const OpKindInfo& info : kOpKinds) count += (info.uses & use) != 0 ? 1 : 0;
  return count;
}

/// The kinds used in `Use`, in table order (e.g. `opKindsIn<kOpInProgram>()`).
template <OpUse Use>
constexpr std::array<OpKind, opKindCountIn(Use)> opKindsIn() {
  std::array<OpKind, opKindCountIn(Use)> kinds{};
  std::size_t i = 0;
  for (const OpKindInfo& info : kOpKinds) {
    if ((info.uses & Use) != 0) kinds[i++] = info.kind;
  }
  return kinds;
}

/// The kind used in `use` whose keyword is `text`; false (and `out` untouched) when none is.
bool findOpKind(std::string_view text, OpUse use, OpKind& out);
/// The keywords of the kinds used in `use`, in table order, for messages
/// ("allreduce, reducescatter, allgather, alltoall, broadcast or manytomany").
std::string opKindKeywords(OpUse use);

namespace detail {
constexpr bool opKindsInOrder() {
  for (std::size_t i = 0; i < kOpKindCount; ++i) {
    if (static_cast<std::size_t>(kOpKinds[i].kind) != i) return false;
  }
  return true;
}
static_assert(opKindsInOrder(), "kOpKinds must list every OpKind in enumerator order");
}  // namespace detail

}  // namespace chimera
