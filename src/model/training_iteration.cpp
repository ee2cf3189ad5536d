// SPDX-License-Identifier: Apache-2.0
// One training iteration of a transformer under dp x pp x ep x tp: the collectives it
// issues (as chains on one tensor each), their plans and predicted times on a topology,
// the compute from the device's roofline, and the 1F1B critical path (docs/model.md).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "chimera/planning/planner.hpp"
#include "chimera/planning/routed_plan.hpp"
#include "chimera/planning/topology_cost.hpp"
#include "chimera/planning/training_model.hpp"
#include "core/check.hpp"
#include "model/moe_exchange.hpp"

namespace chimera {
namespace {

// The axes of the model mesh, in mesh order (tp innermost).
constexpr int kDp = 0;
constexpr int kPp = 1;
constexpr int kEp = 2;
constexpr int kTp = 3;

// One chain of the iteration before planning.
struct ChainSpec {
  std::string where;
  int layer = -1;
  int stage = 0;  // the stage whose critical path pays it
  std::string from;
  std::string chain;
  std::string consume;
  std::vector<std::int64_t> shape;
  AxisSet isolated;  // axes whose coordinates hold unrelated data: plans may not mix them
  int count = 0;     // runs per iteration
  bool perMicroBatch = true;
  // An MoE dispatch or combine is priced as programs (the model's dispatcher vs chimera's
  // routed exchange), not planned as a chain on one tensor.
  enum class Routed { None, Dispatch, Combine } routed = Routed::None;
  bool countExchange = false;  // the forward dispatch agrees on per-expert counts first
};

// Whether `plan` keeps every step and transfer inside one coordinate of each isolated axis.
bool staysWithin(const Plan& plan, AxisSet isolated) {
  const Mesh& mesh = plan.buffers.front().layout.mesh();
  for (const PlanStep& step : plan.steps) {
    if ((step.axes.bits() & isolated.bits()) != 0) return false;
    for (const TransferFlow& f : step.flows) {
      for (int axis = 0; axis < mesh.numAxes(); ++axis) {
        if (isolated.contains(axis) && mesh.coordinate(f.src, axis) != mesh.coordinate(f.dst, axis)) return false;
      }
    }
  }
  return true;
}

std::string shapeText(const std::vector<std::int64_t>& shape) { return fmt::format("{}", fmt::join(shape, "x")); }

// Roofline time of an m x k by k x n matrix product on one device.
double gemmSeconds(const Topology& topology, std::size_t element, double m, double k, double n) {
  const double flops = 2.0 * m * k * n;
  const double bytes = static_cast<double>(element) * (m * k + k * n + m * n);
  return std::max(flops / topology.device.peakFlopsPerSecond, bytes / topology.device.memoryBytesPerSecond);
}

class IterationBuilder {
 public:
  IterationBuilder(const ModelConfig& m, const ParallelConfig& p, const Topology& t) : m_(m), p_(p), t_(t), cost_(t) {
    ffn_ = m.ffnHidden > 0 ? m.ffnHidden : 4 * m.hidden;
    tokens_ = static_cast<std::int64_t>(m.seqLength) * m.microBatch;
    mesh_ = fmt::format("dp={},pp={},ep={},tp={}", p.dp, p.pp, p.ep, p.tp);
    perStage_ = m.layers / p.pp;
  }

  bool isMoe(int layer) const { return m_.experts > 0 && (layer + 1) % m_.moeEvery == 0; }
  int stageOf(int layer) const { return layer / perStage_; }

  // The chains of one layer, forward then backward, per micro-batch.
  void addLayer(int layer) {
    const int k = stageOf(layer);
    const bool sp = p_.sp > 1;
    const bool tp = p_.tp > 1;
    const std::string st = fmt::format("pp=@{}", k);
    const std::vector<std::int64_t> act = {tokens_, m_.hidden};
    const AxisSet replicas = AxisSet::single(kDp) | AxisSet::single(kEp);
    const auto add = [&](std::string where, std::string from, std::string chain, std::string consume,
                         std::vector<std::int64_t> shape, AxisSet isolated) {
      specs_.push_back({fmt::format("layer {} {}", layer, where), layer, k, std::move(from), std::move(chain),
                        std::move(consume), std::move(shape), isolated, p_.microbatches, true});
      return specs_.size() - 1;
    };
    // Megatron TP (+SP) around one block; its output chain index is returned.
    const auto block = [&](const std::string& name, bool forward, bool consumeShards) -> std::size_t {
      std::size_t last = specs_.size();
      if (!tp) return last;
      const std::string dir = forward ? "forward" : "backward";
      if (sp) {
        add(fmt::format("{} gather sequence ({})", name, dir), st + ",tp=S0", "allgather:tp:0", st, act, replicas);
      }
      if (sp || consumeShards) {
        last = add(fmt::format("{} reduce partials to sequence shards ({})", name, dir), st + ",tp=P",
                   "allreduce:tp,slice:tp:0", st + ",tp=S0", act, replicas);
      } else {
        last = add(fmt::format("{} reduce partials ({})", name, dir), st + ",tp=P", "allreduce:tp", st, act, replicas);
      }
      return last;
    };
    // Forward.
    block("attention", true, isMoe(layer));
    std::size_t output = specs_.size();
    if (isMoe(layer)) {
      output = addExperts(layer, k, sp, true);
    } else {
      output = block("mlp", true, false);
    }
    if (output < specs_.size()) forwardOutput_[layer] = output;
    // Backward: the same collectives with the same volumes, in reverse order.
    if (isMoe(layer)) {
      addExperts(layer, k, sp, false);
    } else {
      block("mlp", false, false);
    }
    const std::size_t inputGrad = block("attention", false, isMoe(layer));
    if (inputGrad < specs_.size()) backwardInputGrad_[layer] = inputGrad;
  }

  // MoE dispatch and combine over the expert group ep+tp (the model's dispatcher vs the
  // routed exchange), and, without SP, the AllGather that rebuilds replicated activations
  // for the next layer. Backward: the gradients go the other way with the same volumes, and
  // reuse the forward dispatch's counts.
  std::size_t addExperts(int layer, int k, bool sp, bool forward) {
    const std::string st = fmt::format("pp=@{}", k);
    const std::string dir = forward ? "forward" : "backward";
    std::size_t last = specs_.size();
    if (p_.ep * p_.tp > 1) {
      const std::vector<std::int64_t> tokens = {static_cast<std::int64_t>(p_.ep) * tokens_, m_.hidden};
      const std::string owners = st + ",ep+tp=S0";
      const std::string experts = st + ",experts on ep+tp";
      const bool gather = m_.dispatcher == MoeDispatcher::AllGather;
      ChainSpec dispatch{fmt::format("layer {} moe dispatch ({})", layer, dir),
                         layer,
                         k,
                         owners,
                         gather ? "allgather:ep+tp:0" : "alltoallv:ep+tp (a row per token and expert)",
                         experts,
                         tokens,
                         AxisSet::single(kDp),
                         p_.microbatches,
                         true};
      dispatch.routed = ChainSpec::Routed::Dispatch;
      dispatch.countExchange = forward;
      ChainSpec combine = dispatch;
      combine.where = fmt::format("layer {} moe combine ({})", layer, dir);
      combine.from = experts;
      combine.chain = gather ? "reducescatter:ep+tp:0" : "alltoallv:ep+tp (a row per token and expert, back)";
      combine.consume = owners;
      combine.routed = ChainSpec::Routed::Combine;
      combine.countExchange = false;
      specs_.push_back(std::move(dispatch));
      specs_.push_back(std::move(combine));
      last = specs_.size() - 1;
    }
    if (!sp && p_.tp > 1) {
      const std::vector<std::int64_t> act = {tokens_, m_.hidden};
      const std::string chain = forward ? "allgather:tp:0" : "allreduce:tp,slice:tp:0";
      const std::string from = forward ? st + ",tp=S0" : st + ",tp=P";
      const std::string consume = forward ? st : st + ",tp=S0";
      specs_.push_back(
          {fmt::format("layer {} moe {} ({})", layer, forward ? "regather tokens" : "reduce token grads", dir), layer,
           k, from, chain, consume, act, AxisSet::single(kDp) | AxisSet::single(kEp), p_.microbatches, true});
      last = specs_.size() - 1;
    }
    return last;
  }

  // Stage hand-offs: the last chain of a stage's last layer continues with send:pp (and
  // the backward input gradient of a stage's first layer with send:pp:backward).
  void addHandOffs() {
    const std::vector<std::int64_t> act = {tokens_, m_.hidden};
    for (int k = 0; k + 1 < p_.pp; ++k) {
      handOff(k, (k + 1) * perStage_ - 1, forwardOutput_, "send:pp", k + 1, "forward", act);
      handOff(k + 1, (k + 1) * perStage_, backwardInputGrad_, "send:pp:backward", k, "backward", act);
    }
  }

  void handOff(int from, int layer, const std::map<int, std::size_t>& chains, const char* send, int to, const char* dir,
               const std::vector<std::int64_t>& act) {
    const auto it = chains.find(layer);
    const std::string where = fmt::format("stage {} -> {} hand-off ({})", from, to, dir);
    if (it != chains.end() && specs_[it->second].shape == act) {
      ChainSpec& spec = specs_[it->second];
      spec.chain += std::string(",") + send;
      const std::string target = fmt::format("pp=@{}", to);
      const std::size_t comma = spec.consume.find(',');
      spec.consume = target + (comma == std::string::npos ? std::string() : spec.consume.substr(comma));
      spec.where += ", then " + where;
      return;
    }
    // No reduction to extend (tp = 1, or an MoE layer's routed tensor): a plain send of the
    // activations (sequence shards under SP, as the last chain left them).
    const std::string layout = p_.sp > 1 ? ",tp=S0" : "";
    specs_.push_back({where, -1, from, fmt::format("pp=@{}{}", from, layout), send, fmt::format("pp=@{}{}", to, layout),
                      act, AxisSet::single(kDp) | AxisSet::single(kEp), p_.microbatches, true});
  }

  // Data-parallel gradient reduction per stage: dense parameters over dp (and ep, whose
  // ranks are data-parallel for them), expert parameters over dp only.
  void addGradientReduction() {
    for (int k = 0; k < p_.pp; ++k) {
      std::int64_t dense = 0;
      std::int64_t expert = 0;
      const std::int64_t h = m_.hidden;
      for (int layer = k * perStage_; layer < (k + 1) * perStage_; ++layer) {
        dense += 4 * h * h / p_.tp;
        if (isMoe(layer)) {
          expert += static_cast<std::int64_t>(m_.experts) * 2 * h * ffn_ / (p_.ep * p_.tp);
        } else {
          dense += 2 * h * ffn_ / p_.tp;
        }
      }
      const std::string st = fmt::format("pp=@{}", k);
      std::string axes;
      std::string partial;
      if (p_.dp > 1) {
        axes = "dp";
        partial = "dp=P,";
      }
      if (p_.ep > 1) {
        axes += axes.empty() ? "ep" : "+ep";
        partial += "ep=P,";
      }
      if (!axes.empty()) {
        specs_.push_back({fmt::format("stage {} dense gradients", k),
                          -1,
                          k,
                          partial + st,
                          "allreduce:" + axes,
                          st,
                          {dense},
                          AxisSet::single(kTp),
                          1,
                          false});
      }
      if (p_.dp > 1 && expert > 0) {
        specs_.push_back({fmt::format("stage {} expert gradients", k),
                          -1,
                          k,
                          "dp=P," + st,
                          "allreduce:dp",
                          st,
                          {expert},
                          AxisSet::single(kEp) | AxisSet::single(kTp),
                          1,
                          false});
      }
    }
  }

  // Forward compute of one layer for one micro-batch on one GPU.
  double forwardSeconds(int layer) const {
    const std::size_t e = dataTypeSize(m_.dtype);
    const double a = static_cast<double>(tokens_);
    const double h = m_.hidden;
    const double s = m_.seqLength;
    const double dh = h / m_.heads;
    const double headsHere = static_cast<double>(m_.heads) / p_.tp;
    double t = gemmSeconds(t_, e, a, h, 3 * h / p_.tp);                 // QKV
    t += 2 * m_.microBatch * headsHere * gemmSeconds(t_, e, s, dh, s);  // scores, then values
    t += gemmSeconds(t_, e, a, h / p_.tp, h);                           // output projection
    if (isMoe(layer)) {
      // Token copies the most loaded rank's experts see: it bounds the layer's time.
      const double routed = a * m_.topK / p_.tp * m_.imbalance;
      const double experts = static_cast<double>(m_.experts) / (p_.ep * p_.tp);
      t += experts * (gemmSeconds(t_, e, routed / experts, h, ffn_) + gemmSeconds(t_, e, routed / experts, ffn_, h));
    } else {
      t += gemmSeconds(t_, e, a, h, static_cast<double>(ffn_) / p_.tp) +
           gemmSeconds(t_, e, a, static_cast<double>(ffn_) / p_.tp, h);
    }
    return t;
  }

  Status plan(ModelReport& report) {
    Mesh mesh;
    CHIMERA_RETURN_IF_ERROR(Mesh::parse(mesh_, p_.ranks(), mesh));
    std::map<std::string, ModelCollective> cache;
    for (const ChainSpec& spec : specs_) {
      const std::string key =
          fmt::format("{}|{}|{}|{}|{}", spec.from, spec.chain, spec.consume, shapeText(spec.shape), spec.countExchange);
      auto found = cache.find(key);
      if (found == cache.end()) {
        ModelCollective c;
        const Status status = spec.routed == ChainSpec::Routed::None ? planOne(mesh, spec, c) : priceRouted(spec, c);
        if (!status.isOk()) {
          return Status(status.code(), fmt::format("{} ({} from {} consumed as {}): {}", spec.where, spec.chain,
                                                   spec.from, spec.consume, status.message()));
        }
        found = cache.emplace(key, std::move(c)).first;
      }
      ModelCollective c = found->second;
      c.where = spec.where;
      c.layer = spec.layer;
      c.count = spec.count;
      report.collectives.push_back(std::move(c));
    }
    return Status::ok();
  }

  Status planOne(const Mesh& mesh, const ChainSpec& spec, ModelCollective& out) const {
    TensorSpec tensor;
    tensor.dtype = m_.dtype;
    tensor.shape = spec.shape;
    Layout from;
    Layout consume;
    Chain chain;
    CHIMERA_RETURN_IF_ERROR(Layout::parse(spec.from, mesh, from));
    CHIMERA_RETURN_IF_ERROR(Layout::parse(spec.consume, mesh, consume));
    CHIMERA_RETURN_IF_ERROR(Chain::parse(spec.chain, mesh, chain));
    ChainPlan plan;
    CHIMERA_RETURN_IF_ERROR(planChain(tensor, from, chain, consume, cost_, plan));
    out.mesh = mesh_;
    out.from = spec.from;
    out.chain = spec.chain;
    out.consume = spec.consume;
    out.shape = shapeText(spec.shape);
    out.baselineBytes = plan.baselineBytes.total;
    out.baselineSeconds = plan.baselineCost.value;
    // A plan that mixes data of different replicas would be wrong for the model: keep the chain.
    out.fused = plan.useFused && staysWithin(plan.fused, spec.isolated);
    const Plan& chosen = out.fused ? plan.fused : plan.baseline;
    out.fusedBytes = out.fused ? plan.fusedBytes.total : plan.baselineBytes.total;
    out.fusedSeconds = out.fused ? plan.fusedCost.value : plan.baselineCost.value;
    out.plan = chosen.toString();
    return Status::ok();
  }

  // The routed exchange of `spec` in every expert group of its stage.
  detail::MoeExchange moeExchange(const ChainSpec& spec) const {
    detail::MoeExchange x;
    const int n = p_.ep * p_.tp;
    for (int d = 0; d < p_.dp; ++d) {
      const int base = (d * p_.pp + spec.stage) * n;
      std::vector<int> group;
      for (int r = 0; r < n; ++r) group.push_back(base + r);
      x.groups.push_back(std::move(group));
    }
    x.tokens = tokens_ / p_.tp;
    x.rowBytes = static_cast<std::int64_t>(m_.hidden) * static_cast<std::int64_t>(dataTypeSize(m_.dtype));
    x.experts = m_.experts;
    x.topK = m_.topK;
    x.imbalance = m_.imbalance;
    x.combine = spec.routed == ChainSpec::Routed::Combine;
    x.countExchange = spec.countExchange;
    // The domains of a fabric of several hosts (nodes) are where the ranks run.
    if (t_.fabric == Fabric::NvSwitchMultiNode || t_.fabric == Fabric::HostNetwork) {
      for (int r = 0; r < t_.ranks; ++r) x.hosts.push_back(domainOf(t_, r));
    }
    return x;
  }

  // An MoE dispatch or combine: the model's dispatcher as baseline, chimera's routed
  // exchange when the cost model predicts it faster.
  Status priceRouted(const ChainSpec& spec, ModelCollective& out) const {
    const detail::MoeExchange x = moeExchange(spec);
    const CommProgram baseline = detail::moeDispatcherProgram(x, m_.dispatcher);
    CommProgram routed = detail::moeRoutedProgram(x);
    CHIMERA_RETURN_IF_ERROR(cost_.model().predict(baseline, out.baselineSeconds));
    double routedSeconds = 0;
    CHIMERA_RETURN_IF_ERROR(cost_.model().predict(routed, routedSeconds));
    // Once per destination host where the expert group spans hosts and that is cheaper still,
    // as the library's planner decides (rule 6).
    if (CommProgram perHost = detail::moeHostProgram(x); !perHost.empty()) {
      double perHostSeconds = 0;
      CHIMERA_RETURN_IF_ERROR(cost_.model().predict(perHost, perHostSeconds));
      if (perHostSeconds < routedSeconds) {
        routed = std::move(perHost);
        routedSeconds = perHostSeconds;
      }
    }
    out.mesh = mesh_;
    out.from = spec.from;
    out.chain = spec.chain;
    out.consume = spec.consume;
    out.shape = shapeText(spec.shape);
    out.baselineBytes = detail::programBytes(baseline);
    out.fused = routedSeconds < out.baselineSeconds;
    out.fusedBytes = out.fused ? detail::programBytes(routed) : out.baselineBytes;
    out.fusedSeconds = out.fused ? routedSeconds : out.baselineSeconds;
    std::string plan;
    for (const CommStep& step : out.fused ? routed : baseline) plan += step.toString() + "\n";
    out.plan = plan;
    return Status::ok();
  }

  // The routing of the MoE layers and one rank's bytes per dispatch under each dispatcher.
  MoeRouting routing() const {
    MoeRouting r;
    if (m_.experts == 0) return r;
    const int n = p_.ep * p_.tp;
    r.experts = m_.experts;
    r.topK = m_.topK;
    r.ranks = n;
    r.distinctRanks = expectedDistinctRanks(m_.experts, n, m_.topK);
    r.imbalance = m_.imbalance;
    r.tokensPerRank = tokens_ / p_.tp;
    const double row = static_cast<double>(m_.hidden) * static_cast<double>(dataTypeSize(m_.dtype));
    const double t = static_cast<double>(r.tokensPerRank);
    const double f = static_cast<double>(n - 1) / n;
    r.perExpertBytes = std::llround(t * m_.topK * f * row);
    r.allGatherBytes = std::llround(t * (n - 1) * row);
    r.routedBytes = std::llround(t * r.distinctRanks * f * row);
    return r;
  }

  void summarise(ModelReport& report) const {
    const int m = p_.microbatches;
    std::vector<double> computeStage(static_cast<std::size_t>(p_.pp), 0);
    std::vector<double> baseStage(static_cast<std::size_t>(p_.pp), 0);
    std::vector<double> fusedStage(static_cast<std::size_t>(p_.pp), 0);
    std::vector<double> baseDp(static_cast<std::size_t>(p_.pp), 0);
    std::vector<double> fusedDp(static_cast<std::size_t>(p_.pp), 0);
    for (int layer = 0; layer < m_.layers; ++layer) {
      ModelLayer entry;
      entry.layer = layer;
      entry.stage = stageOf(layer);
      entry.moe = isMoe(layer);
      const double perMicroBatch = 3 * forwardSeconds(layer);  // backward = 2 x forward
      entry.computeSeconds = m * perMicroBatch;
      computeStage[static_cast<std::size_t>(entry.stage)] += perMicroBatch;
      report.layers.push_back(entry);
    }
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      const ChainSpec& spec = specs_[i];
      const ModelCollective& c = report.collectives[i];
      const auto k = static_cast<std::size_t>(spec.stage);
      if (spec.perMicroBatch) {
        baseStage[k] += c.baselineSeconds;
        fusedStage[k] += c.fusedSeconds;
      } else {
        baseDp[k] += c.baselineSeconds;
        fusedDp[k] += c.fusedSeconds;
      }
      report.baselineBytes += c.count * c.baselineBytes;
      report.fusedBytes += c.count * c.fusedBytes;
      if (spec.layer >= 0) {
        ModelLayer& entry = report.layers[static_cast<std::size_t>(spec.layer)];
        entry.baselineCommSeconds += c.count * c.baselineSeconds;
        entry.fusedCommSeconds += c.count * c.fusedSeconds;
        entry.baselineBytes += c.count * c.baselineBytes;
        entry.fusedBytes += c.count * c.fusedBytes;
      }
    }
    // 1F1B: (m + pp - 1) slots of the slowest stage's forward + backward per micro-batch,
    // then the gradient reduction (no overlap with compute in this model).
    const double slots = m + p_.pp - 1;
    double compute = 0;
    double base = 0;
    double fused = 0;
    for (std::size_t k = 0; k < computeStage.size(); ++k) {
      compute = std::max(compute, computeStage[k]);
      base = std::max(base, computeStage[k] + baseStage[k]);
      fused = std::max(fused, computeStage[k] + fusedStage[k]);
    }
    report.computeSeconds = slots * compute;
    report.baselineIterationSeconds = slots * base + *std::max_element(baseDp.begin(), baseDp.end());
    report.fusedIterationSeconds = slots * fused + *std::max_element(fusedDp.begin(), fusedDp.end());
    report.baselineCommSeconds = report.baselineIterationSeconds - report.computeSeconds;
    report.fusedCommSeconds = report.fusedIterationSeconds - report.computeSeconds;
  }

  std::vector<ChainSpec>& specs() { return specs_; }

 private:
  const ModelConfig& m_;
  const ParallelConfig& p_;
  const Topology& t_;
  TopologyCost cost_;
  std::int64_t ffn_ = 0;
  std::int64_t tokens_ = 0;
  std::string mesh_;
  int perStage_ = 1;
  std::vector<ChainSpec> specs_;
  std::map<int, std::size_t> forwardOutput_;      // layer -> its last forward chain
  std::map<int, std::size_t> backwardInputGrad_;  // layer -> its last backward chain
};

}  // namespace

Status analyzeModel(const ModelConfig& model, const ParallelConfig& parallel, const Topology& topology,
                    ModelReport& out) {
  CHIMERA_RETURN_IF_ERROR(validateModel(model, parallel, topology));
  IterationBuilder builder(model, parallel, topology);
  for (int layer = 0; layer < model.layers; ++layer) builder.addLayer(layer);
  builder.addHandOffs();
  builder.addGradientReduction();
  ModelReport report;
  report.model = model;
  report.parallel = parallel;
  report.topology = topology.name;
  CHIMERA_RETURN_IF_ERROR(builder.plan(report));
  builder.summarise(report);
  report.moe = builder.routing();
  out = std::move(report);
  return Status::ok();
}

}  // namespace chimera
