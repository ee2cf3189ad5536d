// SPDX-License-Identifier: Apache-2.0
// The fusion rules of the routed exchange (unstable tier): the program as frameworks issue it
// and the fused one, as communication programs priced by the cost model, for a routing of
// expected (not actual) counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chimera/mesh.hpp"
#include "chimera/planning/comm_program.hpp"
#include "chimera/planning/cost_model.hpp"
#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera {

/// How the tokens of a routed exchange are placed over the token axes.
enum class TokenPlacement : std::uint8_t {
  Owned,       ///< each rank owns its rows (flat, or "tp=S0" / "sp=S0" shards)
  Replicated,  ///< "tp=R": every rank of the token axes holds the same rows and routing
  Partial,     ///< "tp=P": partial sums over the token axes, routing replicated
  Stage,       ///< "pp=@k": held by pipeline stage k (the token axis), experts and owners on stage k+1
};

/// A routed exchange to price: shapes, group and layout, never counts.
struct RoutedRequest {
  Mesh mesh;
  AxisSet group;      ///< the dispatch group (R ranks)
  AxisSet tokenAxes;  ///< the axes of the token layout (empty for owned rows; the pipeline axis for Stage)
  TokenPlacement placement = TokenPlacement::Owned;
  int stage = 0;            ///< Stage: k, the stage that holds the tokens (k + 1 < stages)
  std::int64_t tokens = 0;  ///< T, rows per rank (per replica group for R and P, per stage-k rank for Stage)
  std::int64_t hidden = 0;  ///< H
  DataType dtype = DataType::F32;
  DataType weightDtype = DataType::F32;
  std::int64_t experts = 0;  ///< E
  int topK = 0;              ///< K
  /// Expected distinct destination ranks per token; 0: the uniform-routing expectation.
  double distinctRanks = 0;
  /// The host of every world rank (Backend::hostOfRank); empty: every rank on one host. Rule 6
  /// (once per destination host) is priced only where the dispatch group spans hosts.
  std::vector<int> hosts;
};

/// One priced program of a routed exchange (dispatch + combine, forward).
struct RoutedCandidate {
  std::string name;                ///< "per (token, expert)", "once per rank, replicas split"
  CommProgram program;             ///< its steps, with expected transfers
  std::uint64_t bytesPerRank = 0;  ///< expected bytes the busiest rank sends
  double seconds = 0;              ///< predicted time (bytes alone: the busiest rank's bytes)
};

/// The decision for one routed exchange: each rule, the program as issued and the chosen one.
struct RoutedDecision {
  RoutedCandidate
      baseline;  ///< per (token, expert), every replica dispatching its copy, a stage's tokens handed off first
  RoutedCandidate fused;           ///< the cheapest program with the rules that pay
  bool oncePerRank = false;        ///< rule 1 taken: send a token once per destination rank
  bool splitReplicas = false;      ///< rule 2/3 taken: replicas dispatch disjoint parts (after a ReduceScatter for P)
  bool straightFromStage = false;  ///< rule 5 taken: stage k sends straight to stage k+1's experts, no hand-off
  bool oncePerHost = false;        ///< rule 6 taken: a token crosses once per destination host, then fans out there
  std::vector<std::string> explanation;  ///< one line per rule: the two prices and the verdict
};

/// Expected distinct destination ranks of a token under uniform top-K routing over E experts
/// in contiguous blocks of E/R on R ranks: R (1 - C(E - E/R, K) / C(E, K)).
double expectedDistinctRanks(std::int64_t experts, int ranks, int topK);
/// The probability that a token routed uniformly to K of E experts picks one of `held` given
/// experts (the E/R x n experts of a host of n ranks): 1 - C(E - held, K) / C(E, K).
double expectedHit(std::int64_t experts, std::int64_t held, int topK);

/// Prices the rules for `request` with `model` (null: bytes alone) and decides each one: a rule
/// is taken only when the program with it is predicted strictly cheaper than without.
/// InvalidArgument for a request that does not fit the mesh (E % R, K > E, token axes partly
/// inside the group; for Stage: a token axis inside the group, or k + 1 not a stage).
[[nodiscard]] Status planRouted(const RoutedRequest& request, const CostModel* model, RoutedDecision& out);

}  // namespace chimera
