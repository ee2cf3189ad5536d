// SPDX-License-Identifier: Apache-2.0
// Whole-model analysis: every collective of one training iteration of a transformer under
// a hybrid-parallel configuration, each planned as a chain (baseline vs fused, priced on a
// topology), plus compute from a roofline of the topology's device, giving the predicted
// iteration time with and without fusion. Used by the chimera-model tool (docs/model.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/planning/topology.hpp"
#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera {

/// How a framework moves MoE tokens to their experts without chimera: the baseline the
/// routed exchange is compared with.
enum class MoeDispatcher {
  /// One row per (token, expert) in an uneven all-to-all over the expert group, after a
  /// count exchange (Megatron-core's alltoall dispatcher, torchtitan): K f rows per token.
  AllToAll,
  /// AllGather of every token over the expert group, each rank keeps its experts' rows;
  /// combine is a ReduceScatter (Megatron-core's allgather dispatcher): n - 1 rows per token.
  AllGather,
};

/// "alltoall" / "allgather".
std::string_view moeDispatcherName(MoeDispatcher dispatcher);
/// Parses a name as printed by moeDispatcherName. InvalidArgument naming the text otherwise.
[[nodiscard]] Status parseMoeDispatcher(std::string_view text, MoeDispatcher& out);

/// A GPT-style decoder-only transformer. Dense unless `experts` > 0: then every
/// `moeEvery`-th layer (1-based: layers moeEvery, 2*moeEvery, ...) replaces its MLP by
/// `experts` expert MLPs with top-`topK` routing.
struct ModelConfig {
  std::string name;
  int layers = 0;                   ///< transformer layers (>= 1)
  int hidden = 0;                   ///< model width h (>= 1)
  int heads = 0;                    ///< attention heads (>= 1, divides hidden)
  int seqLength = 0;                ///< tokens per sequence s (>= 1)
  int ffnHidden = 0;                ///< MLP width (0: 4 h)
  int microBatch = 1;               ///< sequences per micro-batch b (>= 1)
  DataType dtype = DataType::BF16;  ///< activations, weights and gradients
  int experts = 0;                  ///< experts per MoE layer (0: dense model)
  int topK = 1;                     ///< experts each token is routed to (<= experts)
  int moeEvery = 1;                 ///< every moeEvery-th layer is an MoE layer (>= 1)
  /// Load imbalance of the routing: the most loaded rank of an expert group receives
  /// `imbalance` x the mean rows (1 = balanced, at most the group's rank count). The
  /// exchanges and the expert compute are bound by that rank.
  double imbalance = 1.0;
  MoeDispatcher dispatcher = MoeDispatcher::AllToAll;  ///< the baseline dispatcher
};

/// The routing of the model's MoE layers and what one rank sends per dispatch under each
/// dispatcher (means over the ranks; combine sends the same back).
struct MoeRouting {
  int experts = 0;                  ///< experts per MoE layer
  int topK = 0;                     ///< experts per token
  int ranks = 0;                    ///< n: ranks of one expert group (ep x tp), experts in blocks of experts / n
  double distinctRanks = 0;         ///< D: expectedDistinctRanks(experts, n, topK) (routed_plan.hpp)
  double imbalance = 1;             ///< max / mean rows a rank receives
  std::int64_t tokensPerRank = 0;   ///< T: tokens each rank owns at the dispatch (its sequence shard)
  std::int64_t perExpertBytes = 0;  ///< one row per (token, expert): T K (n-1)/n rows
  std::int64_t allGatherBytes = 0;  ///< AllGather dispatcher: (n-1) T rows
  std::int64_t routedBytes = 0;     ///< chimera's routed exchange, once per destination rank: T D (n-1)/n rows
};

/// How the model is split over the GPUs: mesh `dp x pp x ep x tp` (row-major, tp
/// innermost, so a TP group is consecutive ranks inside a node). Megatron-style sequence
/// parallelism runs on the TP group, so `sp` is 1 (off) or equal to `tp`. Expert groups
/// of `ep` ranks split the experts of every MoE layer; the pipeline runs 1F1B over
/// `microbatches` micro-batches.
struct ParallelConfig {
  int dp = 1;
  int tp = 1;
  int sp = 1;
  int pp = 1;
  int ep = 1;
  int microbatches = 1;
  /// Ranks = dp * pp * ep * tp.
  int ranks() const { return dp * pp * ep * tp; }
};

/// One kind of collective of the iteration (a chain on one tensor), how often it runs and
/// what the planner made of it.
struct ModelCollective {
  std::string where;               ///< "layer 3 attention (forward)", "stage 0 -> 1 hand-off (backward)", ...
  int layer = -1;                  ///< transformer layer, -1 for pipeline hand-offs and data-parallel reduction
  std::string mesh;                ///< the mesh text
  std::string from;                ///< start layout
  std::string chain;               ///< the chain as a framework issues it
  std::string consume;             ///< what the next computation reads
  std::string shape;               ///< logical tensor shape
  int count = 0;                   ///< times it runs per iteration (micro-batches)
  std::int64_t baselineBytes = 0;  ///< bytes all ranks send per run, chain as written
  std::int64_t fusedBytes = 0;     ///< bytes all ranks send per run, planner's choice
  double baselineSeconds = 0;      ///< predicted time per run, chain as written
  double fusedSeconds = 0;         ///< predicted time per run, the plan chosen (never above baseline)
  bool fused = false;              ///< the planner's decision
  std::string plan;                ///< the chosen plan, one step per line
};

/// Per-layer totals over one iteration (all micro-batches, forward and backward).
struct ModelLayer {
  int layer = 0;
  int stage = 0;
  bool moe = false;
  double computeSeconds = 0;       ///< roofline compute of this layer on one GPU
  double baselineCommSeconds = 0;  ///< its collectives, chains as written
  double fusedCommSeconds = 0;     ///< its collectives as planned
  std::int64_t baselineBytes = 0;  ///< bytes all ranks send for this layer
  std::int64_t fusedBytes = 0;
};

/// The analysis of one training iteration.
struct ModelReport {
  ModelConfig model;
  ParallelConfig parallel;
  std::string topology;
  std::vector<ModelCollective> collectives;
  std::vector<ModelLayer> layers;
  MoeRouting moe;                  ///< the MoE layers' routing (experts 0: a dense model)
  double computeSeconds = 0;       ///< critical path compute: (m + pp - 1) x the slowest stage's per-micro-batch time
  double baselineCommSeconds = 0;  ///< communication on the critical path, chains as written
  double fusedCommSeconds = 0;     ///< the same, as planned
  double baselineIterationSeconds = 0;
  double fusedIterationSeconds = 0;
  std::int64_t baselineBytes = 0;  ///< every rank's bytes of the iteration, chains as written
  std::int64_t fusedBytes = 0;
  /// baselineIterationSeconds / fusedIterationSeconds.
  double endToEndSpeedup() const {
    return fusedIterationSeconds > 0 ? baselineIterationSeconds / fusedIterationSeconds : 0;
  }
  /// baselineCommSeconds / fusedCommSeconds.
  double communicationSpeedup() const { return fusedCommSeconds > 0 ? baselineCommSeconds / fusedCommSeconds : 0; }
};

/// The built-in model names: "gpt2-medium" (24 layers, h 1024, 16 heads, s 1024, micro-batch
/// 8) and "gpt-moe" (the same with 8 experts, top-2, in every second layer).
std::vector<std::string> modelPresetNames();

/// A built-in model by name, else a JSON file (format "chimera-model-1": fields name,
/// layers, hidden, heads, seq_length, and optional ffn_hidden, micro_batch, dtype, experts,
/// top_k, moe_every, imbalance, dispatcher; unknown fields are rejected). InvalidArgument naming the field or the
/// file otherwise.
[[nodiscard]] Status loadModelConfig(std::string_view nameOrPath, ModelConfig& out);

/// Parses "dp=2,tp=4,sp=4,pp=2,ep=1,microbatches=8" (unlisted keys keep 1).
[[nodiscard]] Status parseParallelConfig(std::string_view text, ParallelConfig& out);

/// Checks the model and the split against each other: positive sizes, heads and hidden
/// and the sequence divisible by tp, layers by pp, experts by ep x tp, sp in {1, tp}, the
/// imbalance in [1, ep x tp], and the topology covering the ranks. InvalidArgument naming
/// the problem.
[[nodiscard]] Status validateModel(const ModelConfig& model, const ParallelConfig& parallel, const Topology& topology);

/// Lists every collective of one training iteration (Megatron TP/SP patterns in attention
/// and MLP, pipeline hand-offs forward and backward, MoE dispatch and combine, the
/// data-parallel gradient reduction), plans each chain on `topology` (an MoE dispatch or
/// combine: the model's dispatcher vs chimera's routed exchange, both priced as programs on
/// the topology) and adds compute from the device's roofline (the topology must give the device's peak FLOP/s and
/// memory bandwidth). Model: no overlap of communication with compute; 1F1B critical path.
[[nodiscard]] Status analyzeModel(const ModelConfig& model, const ParallelConfig& parallel, const Topology& topology,
                                  ModelReport& out);

}  // namespace chimera
