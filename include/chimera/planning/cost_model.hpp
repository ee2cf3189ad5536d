// SPDX-License-Identifier: Apache-2.0
// The cost model (unstable tier): prices a communication program on a topology from
// per-step latency, bandwidth, launch, pack and contention terms.
#pragma once

#include <string>

#include "chimera/planning/comm_program.hpp"
#include "chimera/planning/topology.hpp"
#include "chimera/status.hpp"

namespace chimera {

/// Predicted time of one step, split into the terms of the alpha-beta model.
struct StepCost {
  double seconds = 0;          ///< total: latency + transfer + reduce + overhead + local
  double latencySeconds = 0;   ///< alpha terms: one per ring step / message round
  double transferSeconds = 0;  ///< bandwidth terms: the busiest shared resource of each round
  double reduceSeconds = 0;    ///< local reductions (AllReduce, ReduceScatter)
  /// Fixed costs: the step's launch and synchronisation, its extra peers, its local kernels.
  double overheadSeconds = 0;
  double localSeconds = 0;  ///< pack / unpack / copy passes at the device's memory bandwidth
  /// The resource that limited the bandwidth term ("cpu link domain 0->1", "gpu 3 tx",
  /// "memory bus"); empty when nothing was transferred.
  std::string bottleneck;
  /// Bytes the step moves between domains (between hosts on a host network, nodes, NUMA
  /// domains) as its algorithm runs, all ranks together: what crosses the slow link.
  double crossBytes = 0;
};

/// Which of two programs to run, and why.
struct FusionDecision {
  bool fuse = false;           ///< true when the fused program is predicted faster, beyond the fusion margin
  double baselineSeconds = 0;  ///< predicted time of the baseline program
  double fusedSeconds = 0;     ///< predicted time of the fused program
  /// "fused 0.84 ms vs baseline 1.71 ms on pcie-4080x8: fuse (predicted speedup 2.04x)".
  std::string explanation;
};

/// Alpha-beta cost model with link sharing over a Topology.
///
/// Collectives are priced by the algorithm they run: ring AllReduce = 2(n-1) rounds of
/// L/n, ring ReduceScatter = n-1 rounds of L/n (each with a local reduction of L/n), ring
/// AllGather = n-1 rounds of L, AllToAll = one round in which every rank sends L/n to each
/// peer, Broadcast = a pipelined chain (n-1 latencies, L over every chain link). A round is
/// the set of transfers of all concurrent groups; its time is the largest alpha among them
/// plus the time the busiest shared resource (link, port, NIC, bus) needs for the bytes
/// routed through it. Thread-safe: const methods only.
class CostModel {
 public:
  /// A model over `topology` (loadTopology and fitProfile return only valid ones; an
  /// invalid one makes every prediction fail with validateTopology's message).
  explicit CostModel(Topology topology);

  /// The topology priced.
  const Topology& topology() const { return topology_; }

  /// Predicts one step. InvalidArgument when the topology is invalid or the step fails
  /// validateStep against the topology's rank count.
  [[nodiscard]] Status predictStep(const CommStep& step, StepCost& out) const;
  /// Predicts a program (sum of its steps); the same errors as predictStep, naming the step index.
  [[nodiscard]] Status predict(const CommProgram& program, double& seconds) const;
  /// Predicts both programs and decides: fuse only when the fused one is strictly faster and
  /// saves at least the topology's fusionMargin of the baseline's time.
  [[nodiscard]] Status decide(const CommProgram& baseline, const CommProgram& fused, FusionDecision& out) const;

 private:
  Topology topology_;
};

/// Seconds of local passes (pack, unpack, copy, scale; each reads and writes) over `bytes`
/// on one rank while `passingRanks` ranks make theirs at once (0 = every rank of the
/// topology): 2 x bytes / the device's memory bandwidth, 0 when that is not modelled. On a
/// host whose ranks share `computeSlots` cores the bandwidth is the one measured with every
/// rank passing at once, so fewer ranks passing run faster by the share of the cores they
/// get: x max(1, passingRanks / slots) / max(1, ranks / slots).
double localPassSeconds(const Topology& topology, double bytes, int passingRanks);

/// "12.3 us", "0.841 ms", "1.5 s": three significant digits; ms from 0.1 ms, s from 1 s.
std::string formatSeconds(double seconds);

}  // namespace chimera
