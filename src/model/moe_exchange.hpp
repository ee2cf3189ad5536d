// SPDX-License-Identifier: Apache-2.0
// The communication of one MoE dispatch or combine in every expert group of a pipeline
// stage (private to the whole-model analysis): as a framework's dispatcher issues it and as
// chimera's routed exchange, each a program the cost model prices (docs/model.md).
#pragma once

#include <cstdint>
#include <vector>

#include "chimera/planning/comm_program.hpp"
#include "chimera/planning/training_model.hpp"

namespace chimera::detail {

/// One routed exchange in every expert group of one stage.
struct MoeExchange {
  /// World ranks of each expert group (n = ep x tp each); the first rank of a group is the
  /// most loaded one (it receives `imbalance` x the mean rows).
  std::vector<std::vector<int>> groups;
  std::int64_t tokens = 0;    ///< T: tokens each rank owns
  std::int64_t rowBytes = 0;  ///< one token row: hidden x element size
  int experts = 0;
  int topK = 1;
  double imbalance = 1;
  bool combine = false;        ///< false: owners -> expert ranks; true: expert ranks -> owners
  bool countExchange = false;  ///< the forward dispatch first agrees on per-expert counts
  /// The host (node) of every world rank; empty: every rank on one host. Where an expert
  /// group spans hosts, moeHostProgram prices its exchange once per destination host.
  std::vector<int> hosts;
};

/// The exchange as `dispatcher` issues it: AllToAll, one row per (token, expert) in a
/// many-to-many (after an AllToAll of 4 E bytes of counts per rank when `countExchange`);
/// AllGather, an AllGather of the tokens and their routing (dispatch) or a ReduceScatter of
/// the expert outputs (combine).
CommProgram moeDispatcherProgram(const MoeExchange& exchange, MoeDispatcher dispatcher);

/// chimera's routed exchange: each token once per destination rank (D / n of T rows to
/// each rank, weighted by the load), after the same count exchange.
CommProgram moeRoutedProgram(const MoeExchange& exchange);

/// chimera's routed exchange once per destination host (docs/moe.md, rule 6), where `hosts`
/// puts the ranks of an expert group on several hosts (empty otherwise): the rows for the
/// source's own host straight, and one row per token and other host to the forwarder there
/// (the member with the source's place on its own host, modulo that host's size), which fans
/// them out to its host's ranks; the combine the reverse, each forwarder's sum crossing back
/// once. After the same count exchange.
CommProgram moeHostProgram(const MoeExchange& exchange);

/// Bytes all ranks send to other ranks in `program`.
std::int64_t programBytes(const CommProgram& program);

}  // namespace chimera::detail
