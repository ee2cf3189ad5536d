// SPDX-License-Identifier: Apache-2.0
// A mixture-of-experts layer's forward and backward with expert parallelism folded over tensor
// parallelism, written the way a Megatron-style layer issues it, on chimera's routed exchange.
//
// Per step, on a mesh of `tp` x `ep` ranks (default tp=2,ep=4; the dispatch group is ep+tp, so
// E / (tp x ep) experts live on every rank):
//   the attention block's row-parallel output x is partial over tp      (token layout tp=P);
//   the router, replicated over tp, picks K distinct experts per token   (skewed, fresh each step);
//   dispatch -> receive: one row per (token, local expert), grouped by expert;
//   the experts run on their rows                                      (expert e: row * (e % 3 + 1));
//   combine: y[t] = sum_k w[t,k] * expert_e(x[t]), on every tp rank (the next TP block reads it whole);
//   backward: combineBackward, the experts' backward, dispatchBackward -> grad x, grad weights.
//
// Two programs of the same exchange run on the same routing, interleaved:
//   as issued  (RoutedProgram::PerExpert): AllReduce over tp, then every tp replica dispatching
//              one row per (token, expert), as Megatron's and torchtitan's all-to-all dispatchers;
//   planned    (RoutedProgram::Planned):   ReduceScatter over tp, each replica dispatching its block
//              of tokens once per destination rank, the combined rows all-gathered over tp, each
//              rule taken only where the bytes say it pays (RoutedExchange::explain).
// Values are small integers and weights quarters, so every sum is exact and y, grad x and grad
// weights of the two programs must agree bit for bit; the routing changes every step (counts are
// data: neither program plans anything after creation).
//
// Run: mpirun -np 8 moe_layer [--mesh tp=2,ep=4] [--layout tp=P] [--tokens 4096] [--hidden 1024]
//        [--experts 64] [--topk 8] [--iters 10]
// --layout takes any token layout of the exchange ("", tp=S0, tp=R, tp=P; docs/moe.md).
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "chimera/mpi_backend.hpp"
#include "chimera/routed_exchange.hpp"
#include "example_util.hpp"

namespace {

using chimera::RoutedDispatch;
using chimera::RoutedExchange;
using chimera::RoutedStats;
using example::check;

struct Setup {
  chimera::Mesh mesh;
  chimera::AxisSet tp, group;
  std::string layout;
  std::int64_t tokens = 0, hidden = 0, experts = 0;
  int topK = 0;
  int rank = 0;
  // The rank whose tokens this rank holds: replicas of tp=R / tp=P share their tp group's first rank.
  int source = 0;
  bool partial = false;
};

// One step's inputs on this rank.
struct Inputs {
  std::vector<float> x;           // [T, H]: this rank's rows (its partial sum under tp=P)
  std::vector<std::int64_t> ids;  // [T, K]
  std::vector<float> weights;     // [T, K]
  std::vector<float> gradY;       // [T, H]
};

// What the layer hands on, forward and backward.
struct Outputs {
  std::vector<float> y, gradX, gradWeights;
  bool operator==(const Outputs&) const = default;
};

// The step's routing and values. The routing is skewed: expert e is drawn with weight
// 1 / (1 + (e + step) % E), so the most loaded expert moves from step to step.
Inputs makeInputs(const Setup& s, int step) {
  Inputs in;
  const std::size_t T = static_cast<std::size_t>(s.tokens), H = static_cast<std::size_t>(s.hidden);
  const auto K = static_cast<std::size_t>(s.topK);
  std::mt19937 router(static_cast<unsigned>(step * 7919 + s.source));
  std::vector<double> load(static_cast<std::size_t>(s.experts));
  for (std::size_t e = 0; e < load.size(); ++e) load[e] = 1.0 / static_cast<double>(1 + (e + step) % load.size());
  std::discrete_distribution<std::int64_t> pick(load.begin(), load.end());
  for (std::size_t t = 0; t < T; ++t) {
    const std::size_t first = in.ids.size();
    while (in.ids.size() - first < K) {
      const std::int64_t e = pick(router);
      if (std::find(in.ids.begin() + static_cast<std::ptrdiff_t>(first), in.ids.end(), e) == in.ids.end())
        in.ids.push_back(e);
    }
    for (std::size_t k = 0; k < K; ++k) in.weights.push_back(0.25f * static_cast<float>(1 + (t + k + step) % 4));
  }
  in.x.resize(T * H);
  in.gradY.resize(T * H);
  // Under tp=P each replica holds its own partial sum; otherwise the rows follow the source.
  example::fill(in.x, step, s.partial ? s.rank : s.source);
  example::fill(in.gradY, step + 101, s.source);
  return in;
}

// Expert e's forward and backward on its rows: a scale by (e % 3 + 1), exact on small integers.
void runExperts(std::vector<float>& rows, const std::vector<std::int64_t>& expert, std::int64_t hidden) {
  for (std::size_t r = 0; r < expert.size(); ++r) {
    const auto factor = static_cast<float>(expert[r] % 3 + 1);
    for (std::int64_t h = 0; h < hidden; ++h) rows[r * static_cast<std::size_t>(hidden) + h] *= factor;
  }
}

void add(RoutedStats& total, const RoutedStats& part) {
  total.payloadBytes += part.payloadBytes;
  total.headerBytes += part.headerBytes;
  total.countBytes += part.countBytes;
  total.paddingBytes += part.paddingBytes;
  total.reduceBytes += part.reduceBytes;
  total.rounds += part.rounds;
}

// One forward and backward of the layer through `exchange`; adds its bytes to `bytes`.
Outputs layerStep(RoutedExchange& exchange, const Setup& s, const Inputs& in, RoutedStats& bytes) {
  const std::size_t T = static_cast<std::size_t>(s.tokens), H = static_cast<std::size_t>(s.hidden);
  RoutedDispatch handle;
  check(exchange.dispatch(in.x.data(), in.ids.data(), in.weights.data(), s.tokens, handle), "dispatch");
  const auto rows = static_cast<std::size_t>(handle.rows());
  std::vector<float> recvX(rows * H), recvWeight(rows);
  std::vector<std::int64_t> recvExpert(rows);
  check(exchange.receive(handle, recvX.data(), recvExpert.data(), recvWeight.data()), "receive");
  std::vector<float> expertOut = recvX;
  runExperts(expertOut, recvExpert, s.hidden);
  Outputs out{std::vector<float>(T * H), std::vector<float>(T * H), std::vector<float>(in.weights.size())};
  RoutedStats combine, combineBackward, dispatchBackward;
  check(exchange.combine(expertOut.data(), recvWeight.data(), handle, out.y.data(), &combine), "combine");
  std::vector<float> gradExpertOut(rows * H), gradRowWeight(rows);
  check(exchange.combineBackward(in.gradY.data(), expertOut.data(), recvWeight.data(), handle, gradExpertOut.data(),
                                 gradRowWeight.data(), &combineBackward),
        "combine backward");
  runExperts(gradExpertOut, recvExpert, s.hidden);  // the scale's backward is the same scale
  check(exchange.dispatchBackward(gradExpertOut.data(), gradRowWeight.data(), handle, out.gradX.data(),
                                  out.gradWeights.data(), &dispatchBackward),
        "dispatch backward");
  for (const RoutedStats& part : {handle.stats(), combine, combineBackward, dispatchBackward}) add(bytes, part);
  return out;
}

std::unique_ptr<RoutedExchange> createExchange(chimera::Backend& backend, const Setup& s,
                                               chimera::RoutedProgram program) {
  chimera::RoutedExchangeOptions options;
  options.numExperts = s.experts;
  options.topK = s.topK;
  options.hidden = s.hidden;
  options.group = s.group;
  options.tokenLayout = s.layout;
  options.program = program;
  options.plannedTokens = s.tokens;
  std::unique_ptr<RoutedExchange> exchange;
  check(RoutedExchange::create(backend, options, exchange), "routed exchange");
  return exchange;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string meshText = example::textArgument(argc, argv, "--mesh", "tp=2,ep=4");
  Setup s;
  s.layout = example::textArgument(argc, argv, "--layout", "tp=P");
  s.tokens = example::argument(argc, argv, "--tokens", 4096);
  s.hidden = example::argument(argc, argv, "--hidden", 1024);
  s.experts = example::argument(argc, argv, "--experts", 64);
  s.topK = static_cast<int>(example::argument(argc, argv, "--topk", 8));
  const int iters = static_cast<int>(example::argument(argc, argv, "--iters", 10));
  int size = 0;
  check(chimera::mpiWorld(s.rank, size), "MPI");
  check(chimera::Mesh::parse(meshText, size, s.mesh), "--mesh (axes tp and ep, their product the world size)");
  check(s.mesh.parseAxes("tp", s.tp), "the mesh needs a tp axis");
  check(s.mesh.parseAxes("ep+tp", s.group), "the mesh needs an ep axis");
  s.partial = s.layout == "tp=P";
  const bool replicated = s.partial || s.layout == "tp=R";
  s.source = replicated ? s.mesh.groupPeer(s.rank, s.tp, 0) : s.rank;

  std::unique_ptr<chimera::Backend> backend;
  check(example::createBackend(s.mesh, backend), "backend");
  // What a framework does at initialisation: create its process groups, once.
  const chimera::AxisSet groups[] = {s.tp, s.group};
  check(backend->createGroups(groups), "createGroups");
  const std::unique_ptr<RoutedExchange> issued = createExchange(*backend, s, chimera::RoutedProgram::PerExpert);
  const std::unique_ptr<RoutedExchange> planned = createExchange(*backend, s, chimera::RoutedProgram::Planned);

  std::vector<double> timeIssued, timePlanned;
  RoutedStats bytesIssued, bytesPlanned;
  bool identical = true;
  for (int i = 0; i < iters + 1; ++i) {  // step 0 warms up and is not timed
    const Inputs in = makeInputs(s, i);
    RoutedStats stepIssued, stepPlanned;
    (void)example::allRanks(*backend, true);
    auto start = std::chrono::steady_clock::now();
    const Outputs expected = layerStep(*issued, s, in, stepIssued);
    if (i > 0) timeIssued.push_back(example::microsSince(start));
    (void)example::allRanks(*backend, true);
    start = std::chrono::steady_clock::now();
    const Outputs got = layerStep(*planned, s, in, stepPlanned);
    if (i > 0) timePlanned.push_back(example::microsSince(start));
    identical = identical && expected == got;
    if (i > 0) {
      add(bytesIssued, stepIssued);
      add(bytesPlanned, stepPlanned);
    }
  }
  identical = example::allRanks(*backend, identical);
  // The job's bytes: each rank's summed over the ranks.
  std::int64_t bytes[2] = {static_cast<std::int64_t>(bytesIssued.bytesSent()),
                           static_cast<std::int64_t>(bytesPlanned.bytesSent())};
  check(backend->allReduce(bytes, bytes, 2, chimera::DataType::I64, chimera::ReduceOp::Sum, s.mesh.allAxes()), "bytes");
  if (s.rank == 0) {
    const double issuedUs = example::median(timeIssued), plannedUs = example::median(timePlanned);
    std::printf("MoE layer forward + backward on %s, layout %s, %lld tokens x %lld f32, E=%lld top-%d, %d steps\n",
                meshText.c_str(), s.layout.empty() ? "owned" : s.layout.c_str(), static_cast<long long>(s.tokens),
                static_cast<long long>(s.hidden), static_cast<long long>(s.experts), s.topK, iters);
    for (const std::string& line : planned->explain()) std::printf("  planner: %s\n", line.c_str());
    std::printf("  as issued: %10.1f us/step  %12lld bytes/step (all ranks)\n", issuedUs,
                static_cast<long long>(bytes[0] / iters));
    std::printf("  planned  : %10.1f us/step  %12lld bytes/step (all ranks)\n", plannedUs,
                static_cast<long long>(bytes[1] / iters));
    std::printf("  speedup %.2fx, bytes %.2fx fewer, results %s\n", issuedUs / plannedUs,
                static_cast<double>(bytes[0]) / static_cast<double>(bytes[1]),
                identical ? "identical on every rank" : "DIFFER");
  }
  backend.reset();
  chimera::finalizeMpi();
  return identical ? 0 : 1;
}
