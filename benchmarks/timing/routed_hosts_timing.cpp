// SPDX-License-Identifier: Apache-2.0
// Hand-run: the routed exchange once per destination host against once per destination rank,
// where the ranks run (docs/moe.md, rule 6; on the multi-host rig, docs/multihost.md). Both
// exchanges are Fused on the same world: `host` on the backend of where the ranks run (once
// per host where the group spans hosts), `rank` on one that takes every rank for one host
// (once per rank). Uniform top-K routing, fresh each iteration, the same for both; an
// iteration is dispatch + receive + combine (the forward), or with --step train the forward
// then combine backward and dispatch backward (a training step's exchanges), timed between
// barriers as the slowest rank saw it. With --only both, the two alternate per iteration and
// y and recv_x (and grad x, grad w) must be equal bit for bit (small integers, quarter
// weights); a difference exits 1. Prints one JSON line: medians (us), bytes across hosts per
// iteration (all ranks, from RoutedStats; null for `rank` without --stages: its backend takes
// every rank for one host, so it counts nothing as crossing) and the bytes each rank sent.
// With --stages, a pipeline stage's tokens instead (mesh pp=2,ep=R/2, layout pp=@0, both on the
// backend of where the ranks run): `host` is the Planned program (the hand-off, then stage 1's
// dispatch once per destination host where the planner takes rule 6), `rank` the straight
// dispatch from stage 0 (Fused); stage 0 dispatches, stage 1 receives and combines.
//   scripts/multihost.sh run --ranks 4,4 -- build/benchmarks/timing/routed_hosts_timing -t 4096
//   ... --only host -n 3   (one side alone, for the link's byte counters)
//   ... --step train       (forward and both backwards)
//   ... --stages           (pp=@0: planned against straight)
#include <mpi.h>

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "chimera/routed_exchange.hpp"
#include "common/cli.hpp"
#include "mpi/mpi_backend_impl.hpp"
#include "world_timing.hpp"

namespace {

using chimera::Backend;
using chimera::RoutedDispatch;
using chimera::RoutedExchange;
using chimera::RoutedStats;
using chimera::Status;
using chimera::timing::median;
using chimera::timing::timeOnce;

struct Config {
  std::int64_t tokens = 4096;
  std::int64_t hidden = 1024;
  std::int64_t experts = 64;
  int topK = 8;
  int iterations = 5;
  int warmUp = 5;  // the exchanges' buffers reach their sizes within the first 3-4 iterations
  std::string only = "both";
  bool train = false;   // --step train: the backwards too
  bool stages = false;  // --stages: a stage's tokens (pp=2, pp=@0)
};

struct Routing {
  std::vector<float> x, w;
  std::vector<std::int64_t> ids;
};

Routing route(const Config& c, int rank, int iteration) {
  std::mt19937 gen(static_cast<std::uint32_t>(rank * 7919 + iteration));
  Routing r;
  r.x.resize(static_cast<std::size_t>(c.tokens * c.hidden));
  for (float& v : r.x) v = static_cast<float>(static_cast<int>(gen() % 9) - 4);
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.experts));
  for (std::int64_t e = 0; e < c.experts; ++e) all[static_cast<std::size_t>(e)] = e;
  for (std::int64_t t = 0; t < c.tokens; ++t) {
    for (int k = 0; k < c.topK; ++k) {  // a partial Fisher-Yates draw: K distinct experts
      const auto j = static_cast<std::size_t>(k + static_cast<int>(gen() % static_cast<std::uint32_t>(c.experts - k)));
      std::swap(all[static_cast<std::size_t>(k)], all[j]);
      r.ids.push_back(all[static_cast<std::size_t>(k)]);
      r.w.push_back(0.25f * static_cast<float>(1 + gen() % 4));
    }
  }
  return r;
}

struct Side {
  std::unique_ptr<RoutedExchange> exchange;
  std::vector<double> times;
  std::uint64_t crossHost = 0, sent = 0;  // this rank, summed over the timed iterations
  std::vector<float> y, recvX, gradX, gradW;
};

// One forward: dispatch, receive, combine with expert outputs = the received rows. With a
// stage's tokens, the source (stage 0) dispatches its tokens and takes grad x and grad w back;
// the experts' stage dispatches none and combines its peer's tokens.
Status forward(Side& s, const Routing& r, const Config& c) {
  RoutedDispatch handle;
  const chimera::RoutedRole role = s.exchange->role();
  if (role == chimera::RoutedRole::Source) {
    CHIMERA_RETURN_IF_ERROR(s.exchange->dispatch(r.x.data(), r.ids.data(), r.w.data(), c.tokens, handle));
    s.crossHost += handle.stats().crossHostBytes;
    s.sent += handle.stats().bytesSent();
    if (!c.train) return Status::ok();
    s.gradX.resize(r.x.size());
    s.gradW.resize(r.w.size());
    RoutedStats back;
    CHIMERA_RETURN_IF_ERROR(
        s.exchange->dispatchBackward(nullptr, nullptr, handle, s.gradX.data(), s.gradW.data(), &back));
    s.crossHost += back.crossHostBytes;
    s.sent += back.bytesSent();
    return Status::ok();
  }
  if (role == chimera::RoutedRole::Experts) {
    CHIMERA_RETURN_IF_ERROR(s.exchange->dispatch(nullptr, nullptr, nullptr, 0, handle));
  } else {
    CHIMERA_RETURN_IF_ERROR(s.exchange->dispatch(r.x.data(), r.ids.data(), r.w.data(), c.tokens, handle));
  }
  const std::vector<float>& dy = r.x;  // the peer's tokens have this rank's shape [T, H]
  s.recvX.resize(static_cast<std::size_t>(handle.rows() * c.hidden));
  std::vector<float> weights(static_cast<std::size_t>(handle.rows()));
  CHIMERA_RETURN_IF_ERROR(s.exchange->receive(handle, s.recvX.data(), nullptr, weights.data()));
  s.y.resize(static_cast<std::size_t>(handle.tokens() * c.hidden));
  RoutedStats combined;
  CHIMERA_RETURN_IF_ERROR(s.exchange->combine(s.recvX.data(), weights.data(), handle, s.y.data(), &combined));
  s.crossHost += handle.stats().crossHostBytes + combined.crossHostBytes;
  s.sent += handle.stats().bytesSent() + combined.bytesSent();
  if (!c.train) return Status::ok();
  // The backwards, with dy = x and the experts' gradient = their outputs' gradient.
  std::vector<float> gradOut(s.recvX.size()), gradRowWeights(weights.size());
  RoutedStats combineBack, dispatchBack;
  CHIMERA_RETURN_IF_ERROR(s.exchange->combineBackward(dy.data(), s.recvX.data(), weights.data(), handle, gradOut.data(),
                                                      gradRowWeights.data(), &combineBack));
  const bool owner = role != chimera::RoutedRole::Experts;  // grad x and grad w return to stage 0
  s.gradX.resize(owner ? r.x.size() : 0);
  s.gradW.resize(owner ? r.w.size() : 0);
  CHIMERA_RETURN_IF_ERROR(s.exchange->dispatchBackward(gradOut.data(), gradRowWeights.data(), handle,
                                                       owner ? s.gradX.data() : nullptr,
                                                       owner ? s.gradW.data() : nullptr, &dispatchBack));
  s.crossHost += combineBack.crossHostBytes + dispatchBack.crossHostBytes;
  s.sent += combineBack.bytesSent() + dispatchBack.bytesSent();
  return Status::ok();
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  const chimera::detail::CliFlag flags[] = {
      {"-t", "--tokens", true,
       [&](std::string_view v) { return chimera::detail::parseIntFlag("-t", v, std::int64_t{1}, c.tokens); }},
      {"-H", "--hidden", true,
       [&](std::string_view v) { return chimera::detail::parseIntFlag("-H", v, std::int64_t{1}, c.hidden); }},
      {"-E", "--experts", true,
       [&](std::string_view v) { return chimera::detail::parseIntFlag("-E", v, std::int64_t{1}, c.experts); }},
      {"-K", "--top-k", true, [&](std::string_view v) { return chimera::detail::parseIntFlag("-K", v, 1, c.topK); }},
      {"-n", "--iters", true,
       [&](std::string_view v) { return chimera::detail::parseIntFlag("-n", v, 1, c.iterations); }},
      {"-w", "--warmup", true, [&](std::string_view v) { return chimera::detail::parseIntFlag("-w", v, 0, c.warmUp); }},
      {"", "--only", true,
       [&](std::string_view v) {
         c.only = std::string(v);
         return c.only == "both" || c.only == "host" || c.only == "rank"
                    ? Status::ok()
                    : Status::invalidArgument(fmt::format("--only: '{}' is not both, host or rank", v));
       }},
      {"", "--stages", false,
       [&](std::string_view) {
         c.stages = true;
         return Status::ok();
       }},
      {"", "--step", true,
       [&](std::string_view v) {
         c.train = v == "train";
         return v == "forward" || v == "train"
                    ? Status::ok()
                    : Status::invalidArgument(fmt::format("--step: '{}' is not forward or train", v));
       }},
  };
  const Status parsed = chimera::detail::parseFlags(chimera::detail::argumentList(argc, argv), flags);
  if (!parsed.isOk() || c.topK > c.experts) {
    fmt::print(stderr,
               "routed_hosts_timing: {}\nusage: routed_hosts_timing [-t T] [-H H] [-E E] [-K K] [-n ITERS] "
               "[-w WARMUP] [--only both|host|rank] [--step forward|train] [--stages]\n",
               parsed.isOk() ? "K exceeds E" : parsed.message());
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  chimera::Mesh mesh = chimera::Mesh::flat(world);
  Status st = Status::ok();
  if (c.stages) {
    st = world % 2 == 0 ? chimera::Mesh::parse(fmt::format("pp=2,ep={}", world / 2), world, mesh)
                        : Status::invalidArgument(fmt::format("--stages: {} ranks do not make two stages", world));
  }
  std::unique_ptr<Backend> real, oneHost;
  if (st.isOk()) st = chimera::detail::createMpiBackend(mesh, {}, real);
  if (st.isOk() && !c.stages)
    st = chimera::detail::createMpiBackendOnHosts(mesh, {}, std::vector<int>(static_cast<std::size_t>(world), 0),
                                                  oneHost);
  chimera::RoutedExchangeOptions options;
  options.numExperts = c.experts;
  options.topK = c.topK;
  options.hidden = c.hidden;
  options.plannedTokens = c.tokens;
  options.program = chimera::RoutedProgram::Fused;
  Side host, perRank;
  if (c.stages) {
    options.tokenLayout = "pp=@0";
    if (st.isOk()) st = mesh.parseAxes("ep", options.group);
    if (st.isOk()) st = RoutedExchange::create(*real, options, perRank.exchange);  // straight
    options.program = chimera::RoutedProgram::Planned;
    if (st.isOk()) st = RoutedExchange::create(*real, options, host.exchange);
  } else {
    if (st.isOk()) st = RoutedExchange::create(*real, options, host.exchange);
    if (st.isOk()) st = RoutedExchange::create(*oneHost, options, perRank.exchange);
  }
  if (!st.isOk()) {
    fmt::print(stderr, "rank {}: {}\n", rank, st.toString());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (c.stages && rank == 0) {  // why the planner chose what `host` runs
    for (const std::string& line : host.exchange->explain()) fmt::print(stderr, "planned: {}\n", line);
  }
  int wrong = 0;
  for (int i = 0; i < c.warmUp + c.iterations; ++i) {
    const Routing r = route(c, rank, i);
    const bool timed = i >= c.warmUp;
    for (Side* s : {&host, &perRank}) {
      if (c.only == "host" && s == &perRank) continue;
      if (c.only == "rank" && s == &host) continue;
      const std::uint64_t cross = s->crossHost, sent = s->sent;
      const double t = timeOnce([&] { return forward(*s, r, c); }, st);
      if (!st.isOk()) {
        fmt::print(stderr, "rank {}: {}\n", rank, st.toString());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      if (timed) {
        s->times.push_back(t);
      } else {
        s->crossHost = cross;
        s->sent = sent;
      }
    }
    if (c.only == "both" && (host.y != perRank.y || host.recvX != perRank.recvX || host.gradX != perRank.gradX ||
                             host.gradW != perRank.gradW))
      wrong = 1;
  }
  // Whether any rank runs its dispatch once per host (stage 1 only, with --stages).
  std::uint64_t totals[5] = {host.crossHost, perRank.crossHost, host.sent, perRank.sent,
                             host.exchange->oncePerHost() ? 1u : 0u};
  MPI_Allreduce(MPI_IN_PLACE, totals, 5, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    const auto us = [](const Side& s) { return s.times.empty() ? 0.0 : median(s.times) * 1e6; };
    const auto n = static_cast<std::uint64_t>(c.iterations);
    fmt::print(
        "{{\"ranks\": {}, \"tokens\": {}, \"hidden\": {}, \"experts\": {}, \"top_k\": {}, \"step\": \"{}\", "
        "\"layout\": \"{}\", \"once_per_host\": {}, \"straight\": {}, "
        "\"host_us\": {:.0f}, \"rank_us\": {:.0f}, \"cross_host_bytes_host\": {}, \"cross_host_bytes_rank\": {}, "
        "\"bytes_host\": {}, \"bytes_rank\": {}, \"exact\": {}}}\n",
        world, c.tokens, c.hidden, c.experts, c.topK, c.train ? "train" : "forward", c.stages ? "pp=@0" : "owned",
        totals[4] > 0 ? "true" : "false", host.exchange->straightFromStage() ? "true" : "false", us(host), us(perRank),
        totals[0] / n, c.stages ? fmt::to_string(totals[1] / n) : "null", totals[2] / n, totals[3] / n,
        c.only != "both" ? "null" : (wrong == 0 ? "true" : "false"));
  }
  host.exchange.reset();
  perRank.exchange.reset();
  real.reset();
  oneHost.reset();
  MPI_Finalize();
  return wrong;
}
