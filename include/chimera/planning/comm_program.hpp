// SPDX-License-Identifier: Apache-2.0
// Communication programs (unstable tier): a plan as rounds of steps with byte counts and
// peers, the form the cost model prices.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/op_kind.hpp"
#include "chimera/status.hpp"

namespace chimera {

/// What one communication step does is an OpKind used in programs (`opKindUsedIn(kind,
/// kOpInProgram)`, op_kind.hpp): the collectives (AllReduce, ReduceScatter, AllGather,
/// AllToAll, Broadcast, whose root is the first rank listed in each group) run over groups of
/// world ranks; ManyToMany is a list of point-to-point transfers issued together (NCCL: one
/// ncclGroupStart/End of sends and receives).

/// Parses the kind of a step as opKindName prints it ("allreduce", ..., "manytomany"), among
/// the program's kinds. InvalidArgument naming the text when unknown.
[[nodiscard]] Status parseStepKind(std::string_view text, OpKind& out);

/// One point-to-point transfer of a many-to-many step. A transfer from a rank to itself is a
/// local copy and costs nothing in the model.
struct Transfer {
  int src = 0;              ///< sending world rank
  int dst = 0;              ///< receiving world rank
  std::uint64_t bytes = 0;  ///< payload size
};

/// One step of a communication program, on world ranks. It is the unit the cost model
/// prices; it does not depend on the planner's data structures, so any producer of
/// programs (planner, benchmark, test) can describe its communication with it.
struct CommStep {
  OpKind kind = OpKind::AllReduce;
  /// Collectives: the groups that run the collective concurrently, each an ordered list of
  /// world ranks (the ring order; for Broadcast the first rank is the root). No rank may
  /// appear twice in one step. Empty for ManyToMany.
  std::vector<std::vector<int>> groups;
  /// Collectives: L, the bytes each rank holds before the op (AllGather: its own shard;
  /// ReduceScatter/AllReduce/AllToAll: the full local buffer; Broadcast: the root's buffer).
  std::uint64_t bytesPerRank = 0;
  /// ManyToMany: the transfers issued together. Empty for collectives. A ManyToMany with
  /// no transfers to other ranks is local work only (a copy or a scale).
  std::vector<Transfer> transfers;
  /// Bytes the busiest rank passes through its memory around the step (pack, unpack,
  /// local copy, scale: each pass reads and writes them), priced at the device's memory
  /// bandwidth.
  std::uint64_t localBytes = 0;
  /// Local kernels the busiest rank launches around the step (pack, unpack, copy, scale).
  int localLaunches = 0;
  /// Ranks that make local passes around the step at once; 0 = every rank of the topology.
  /// On a host whose ranks share cores, fewer ranks passing at once each run faster
  /// (localPassSeconds).
  int localRanks = 0;

  /// A collective `kind` (not ManyToMany) over `groups` with `bytesPerRank` = L.
  static CommStep collective(OpKind kind, std::vector<std::vector<int>> groups, std::uint64_t bytesPerRank);
  /// A many-to-many step.
  static CommStep manyToMany(std::vector<Transfer> transfers);

  /// "allreduce[0,1,2,3] L=16777216" / "manytomany(4 transfers, 16777216 B)"; for logs and explain output.
  std::string toString() const;
};

/// A sequence of steps run one after the other; its time is the sum of its steps' times.
using CommProgram = std::vector<CommStep>;

/// Checks `step` against a world of `worldSize` ranks: kind/fields consistent, every rank
/// in [0, worldSize), no rank twice in one step's groups, no empty group, all groups of a
/// step the same size. InvalidArgument
/// naming the step and the offending value otherwise.
[[nodiscard]] Status validateStep(const CommStep& step, int worldSize);

}  // namespace chimera
