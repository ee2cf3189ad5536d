// SPDX-License-Identifier: Apache-2.0
// chimera-session-bench: the Session's overhead figures.
//   1. cached window: record an 8-call window and flush it, per recorded call (target < 5 us)
//   2. cold planning of the same window in a fresh session (target < 500 us)
//   1b. the same for a per-rank session (SessionOptions::perRank) on a window of stage 0's
//       own calls (hand-offs need a peer, which the no-op backend does not have)
//   3. fusion off: a Session call vs the direct backend call at 1 MiB (target < 2 %)
//   4. what checkEveryWindow costs per window in a per-rank session: a hand-off window
//      (tp AllReduce + send on stage 0, recv on stage 1) of a small tensor on pp=2,tp=4,
//      sessions with and without the check interleaved, on the MPI backend
// 1 and 2 run on rank 0 on a no-op backend (null_backend.hpp), so they time the Session and
// Executor alone; 3 runs on every rank on the MPI backend, the two variants interleaved.
// Usage: mpirun -np 8 chimera-session-bench [--iters N] [--bytes SIZE]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "backend/null/null_backend.hpp"
#include "chimera/chain.hpp"
#include "chimera/mpi_backend.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/session.hpp"
#include "common/cli.hpp"

namespace chimera {
namespace {

using Clock = std::chrono::steady_clock;

double micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check(const Status& s, const char* what) {
  if (s.isOk()) return;
  std::fprintf(stderr, "chimera-session-bench: %s: %s\n", what, s.toString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// The 8-call window on pp=2,tp=4 as seen by rank 0 (stage 0): four tensors, four chains.
struct Window8 {
  Mesh mesh;
  TensorSpec spec{{64, 64}, DataType::F32};
  std::vector<float> a = std::vector<float>(64 * 64), b = a, c = a, d = a, e = a, f = a, g = a, h = a;
  Layout parse(const char* text) const {
    Layout l;
    check(Layout::parse(text, mesh, l), text);
    return l;
  }
  AxisSet axes(const char* text) const {
    AxisSet s;
    check(mesh.parseAxes(text, s), text);
    return s;
  }
  // Records the window and flushes it through the consume of the last tensor.
  void record(Session& s) {
    const std::size_t n = a.size() * 4;
    TensorHandle x, x1, x2, y, y1, y2, z, z1, z2, w, w1, v, v1;
    check(s.tensor(a.data(), n, spec, parse("pp=@0,tp=P"), x), "tensor x");
    check(s.allReduce(x, axes("tp"), x1), "allreduce");
    check(s.send(x1, axes("pp"), nullptr, 0, x2), "send");
    check(s.tensor(b.data(), n / 4, spec, parse("pp=@0,tp=S0"), y), "tensor y");
    check(s.allGather(y, axes("tp"), 0, c.data(), n, y1), "allgather");
    check(s.send(y1, axes("pp"), nullptr, 0, y2), "send");
    check(s.tensor(d.data(), n / 4, spec, parse("pp=@0,tp=S0"), z), "tensor z");
    check(s.send(z, axes("pp"), nullptr, 0, z1), "send");
    check(s.allToAll(z1, axes("tp"), 0, 1, nullptr, 0, z2), "alltoall");
    check(s.tensor(e.data(), n, spec, parse("tp=P"), w), "tensor w");
    check(s.allReduce(w, axes("tp"), w1), "allreduce");
    check(s.tensor(f.data(), n, spec, parse("tp=P"), v), "tensor v");
    check(s.reduceScatter(v, axes("tp"), 0, g.data(), n / 4, v1), "reducescatter");
    check(s.declareRead(x2, parse("pp=@1,tp=R")), "declare");
    check(s.declareRead(y2, parse("pp=@1,tp=R")), "declare");
    check(s.declareRead(z2, parse("pp=@1,tp=S1")), "declare");
    check(s.consume(w1, parse("tp=S0")), "consume");
  }
  static constexpr int kCalls = 8;

  // Stage 0's own calls of a per-rank window: two AllReduces read as rows, a ReduceScatter,
  // an AllGather read whole.
  void recordPerRank(Session& s) {
    const std::size_t n = a.size() * 4;
    TensorHandle x, x1, y, y1, z, z1, w, w1;
    check(s.tensor(a.data(), n, spec, parse("pp=@0,tp=P"), x), "tensor x");
    check(s.allReduce(x, axes("tp"), x1), "allreduce");
    check(s.declareRead(x1, parse("pp=@0,tp=S0")), "declare");
    check(s.tensor(b.data(), n / 4, spec, parse("pp=@0,tp=S0"), y), "tensor y");
    check(s.allGather(y, axes("tp"), 0, c.data(), n, y1), "allgather");
    check(s.declareRead(y1, parse("pp=@0,tp=R")), "declare");
    check(s.tensor(e.data(), n, spec, parse("pp=@0,tp=P"), w), "tensor w");
    check(s.allReduce(w, axes("tp"), w1), "allreduce");
    check(s.declareRead(w1, parse("pp=@0,tp=S0")), "declare");
    check(s.tensor(f.data(), n, spec, parse("pp=@0,tp=P"), z), "tensor z");
    check(s.reduceScatter(z, axes("tp"), 0, g.data(), n / 4, z1), "reducescatter");
    check(s.consume(z1, parse("pp=@0,tp=S0")), "consume");
  }
  static constexpr int kPerRankCalls = 4;
};

// The Session's own time for one fusion-off AllReduce of `bytes` (no-op backend), in us.
double fusionOffOwnTime(std::size_t bytes, int iters) {
  const Mesh mesh = Mesh::flat(8);
  detail::NullBackend backend(mesh, 0);
  SessionOptions options;
  options.fusion = false;
  std::unique_ptr<Session> session;
  check(Session::create(backend, options, session), "session");
  TensorSpec spec{{static_cast<std::int64_t>(bytes / 4)}, DataType::F32};
  Layout partial;
  check(Layout::parse("world=P", mesh, partial), "layout");
  std::vector<float> buffer(bytes / 4);
  std::vector<double> times;
  for (int i = 0; i < iters + 1; ++i) {
    const auto t0 = Clock::now();
    TensorHandle x, y;
    check(session->tensor(buffer.data(), bytes, spec, partial, x), "tensor");
    check(session->allReduce(x, mesh.allAxes(), y), "allreduce");
    check(session->flush(), "flush");
    if (i > 0) times.push_back(micros(t0, Clock::now()));
  }
  return median(times);
}

// The planner's share of cold planning: planChain alone on the window's chains (the four
// chains and two single calls the Session hands the Executor), in us.
double plannerShare(const Window8& window, int iters) {
  const char* chains[][3] = {{"pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R"},
                             {"pp=@0,tp=S0", "allgather:tp:0,send:pp", "pp=@1,tp=R"},
                             {"pp=@0,tp=S0", "send:pp,alltoall:tp:0:1", "pp=@1,tp=S1"},
                             {"tp=P", "allreduce:tp", "tp=S0"},
                             {"tp=P", "reducescatter:tp:0", "tp=S0"}};
  BytesCost cost;
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    for (const auto& c : chains) {
      Chain chain;
      check(Chain::parse(c[1], window.mesh, chain), c[1]);
      ChainPlan plan;
      check(planChain(window.spec, window.parse(c[0]), chain, window.parse(c[2]), cost, plan), c[1]);
    }
    times.push_back(micros(t0, Clock::now()));
  }
  return median(times);
}

void sessionOverhead(int iters) {
  Window8 window;
  check(Mesh::parse("pp=2,tp=4", 8, window.mesh), "mesh");
  detail::NullBackend backend(window.mesh, 0);
  SessionOptions options;
  std::unique_ptr<Session> warm;
  check(Session::create(backend, options, warm), "session");
  window.record(*warm);  // plans once
  std::vector<double> hit;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    window.record(*warm);
    hit.push_back(micros(t0, Clock::now()) / Window8::kCalls);
  }
  std::vector<double> cold;
  for (int i = 0; i < std::max(5, iters / 20); ++i) {
    std::unique_ptr<Session> fresh;
    const auto t0 = Clock::now();
    check(Session::create(backend, options, fresh), "session");
    window.record(*fresh);
    cold.push_back(micros(t0, Clock::now()));
  }
  SessionOptions perRankOptions;
  perRankOptions.perRank = true;
  std::unique_ptr<Session> perRank;
  check(Session::create(backend, perRankOptions, perRank), "session");
  window.recordPerRank(*perRank);  // plans once
  std::vector<double> perRankHit;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    window.recordPerRank(*perRank);
    perRankHit.push_back(micros(t0, Clock::now()) / Window8::kPerRankCalls);
  }
  const SessionStats stats = warm->stats();
  std::printf(
      "cached window, per recorded call : %8.2f us  (median of %d; target < 5 us; %llu/%llu windows hit, "
      "%llu fused chains)\n",
      median(hit), iters, static_cast<unsigned long long>(stats.windowCacheHits),
      static_cast<unsigned long long>(stats.windows), static_cast<unsigned long long>(stats.fusedChains));
  std::printf("per-rank window, per recorded call: %8.2f us  (median of %d; %llu agreements after its first flush)\n",
              median(perRankHit), iters, static_cast<unsigned long long>(perRank->stats().agreements - 1));
  std::printf(
      "cold planning of the 8-call window: %8.1f us  (median of %zu fresh sessions; target < 500 us; "
      "excludes the agreement allReduce's latency)\n",
      median(cold), cold.size());
  std::printf("  of which the planner (planChain on the window's 5 chains): %8.1f us\n",
              plannerShare(window, static_cast<int>(cold.size())));
}

void fusionOffOverhead(Backend& backend, std::size_t bytes, int iters, int rank, double ownTime) {
  const Mesh& mesh = backend.mesh();
  const auto elements = static_cast<std::int64_t>(bytes / 4);
  TensorSpec spec{{elements}, DataType::F32};
  Layout partial;
  check(Layout::parse("world=P", mesh, partial), "layout");
  std::vector<float> buffer(static_cast<std::size_t>(elements), 1.0f);
  SessionOptions options;
  options.fusion = false;
  std::unique_ptr<Session> session;
  check(Session::create(backend, options, session), "session");
  std::vector<double> direct, viaSession;
  const Layout maxPartial = partial.with(0, Placement::partial(ReduceOp::Max));
  auto timeDirect = [&] {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    check(backend.allReduce(buffer.data(), buffer.data(), buffer.size(), DataType::F32, ReduceOp::Max, mesh.allAxes()),
          "allreduce");
    return micros(t0, Clock::now());
  };
  auto timeSession = [&] {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    TensorHandle x, y;
    check(session->tensor(buffer.data(), bytes, spec, maxPartial, x), "tensor");
    check(session->allReduce(x, mesh.allAxes(), y), "allreduce");
    check(session->flush(), "flush");
    return micros(t0, Clock::now());
  };
  for (int i = 0; i < iters + 3; ++i) {  // alternate the order so neither variant always goes first
    const double d = i % 2 == 0 ? timeDirect() : 0.0;
    const double s = timeSession();
    const double d2 = i % 2 == 1 ? timeDirect() : d;
    if (i >= 3) {
      direct.push_back(d2);
      viaSession.push_back(s);
    }
  }
  double pair[2] = {median(direct), median(viaSession)};
  double worst[2];
  MPI_Reduce(pair, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf(
        "fusion off, 1 call of %zu bytes  : direct %8.1f us, session %8.1f us, overhead %+.2f %%  "
        "(slowest rank's medians of %d interleaved; target < 2 %%)\n",
        bytes, worst[0], worst[1], 100.0 * (worst[1] - worst[0]) / worst[0], iters);
    std::printf("fusion off, the session's own time: %8.2f us per call (no-op backend) = %.3f %% of the direct call\n",
                ownTime, 100.0 * ownTime / worst[0]);
  }
}

// Per window: the same small hand-off through a per-rank session without and with
// checkEveryWindow, interleaved; the slowest rank's medians.
void checkEveryWindowCost(int iters, int rank) {
  Mesh mesh;
  if (!Mesh::parse("pp=2,tp=4", 8, mesh).isOk()) return;  // needs 8 ranks
  std::unique_ptr<Backend> backend;
  check(createMpiBackend(mesh, backend), "backend");
  AxisSet tp, pp;
  check(mesh.parseAxes("tp", tp), "tp");
  check(mesh.parseAxes("pp", pp), "pp");
  const AxisSet groups[] = {tp, pp};
  check(backend->createGroups(groups), "groups");
  const TensorSpec spec{{16, 16}, DataType::F32};
  Layout partial, received;
  check(Layout::parse("pp=@0,tp=P", mesh, partial), "layout");
  check(Layout::parse("pp=@1,tp=R", mesh, received), "layout");
  const bool sender = partial.holds(rank);
  std::vector<float> buffer(16 * 16, 1.0f);
  std::unique_ptr<Session> sessions[2];
  for (int checked = 0; checked < 2; ++checked) {
    SessionOptions options;
    options.perRank = true;
    options.checkEveryWindow = checked == 1;
    check(Session::create(*backend, options, sessions[checked]), "session");
  }
  auto window = [&](Session& s) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    TensorHandle t, summed, out;
    if (sender) {
      check(s.tensor(buffer.data(), buffer.size() * 4, spec, partial, t), "tensor");
      check(s.allReduce(t, tp, summed), "allreduce");
      check(s.send(summed, pp, nullptr, 0, out), "send");
      check(s.flush(), "flush");
    } else {
      check(s.recv(spec, received, pp, buffer.data(), buffer.size() * 4, t), "recv");
      check(s.consume(t, received), "consume");
    }
    return micros(t0, Clock::now());
  };
  std::vector<double> plain, checked;
  for (int i = 0; i < iters + 2; ++i) {
    const double a = window(*sessions[i % 2]);
    const double b = window(*sessions[1 - i % 2]);
    if (i < 2) continue;  // the first window of each session plans
    plain.push_back(i % 2 == 0 ? a : b);
    checked.push_back(i % 2 == 0 ? b : a);
  }
  double pair[2] = {median(plain), median(checked)};
  double worst[2];
  MPI_Reduce(pair, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf(
        "checkEveryWindow, per-rank hand-off window of 1 KiB: %8.1f us without, %8.1f us with: %+.1f us per "
        "window (slowest rank's medians of %d interleaved; one agreement + one exchange, %llu agreements)\n",
        worst[0], worst[1], worst[1] - worst[0], iters,
        static_cast<unsigned long long>(sessions[1]->stats().agreements));
  }
}

}  // namespace
}  // namespace chimera

int main(int argc, char** argv) {
  int iters = 200;
  std::size_t bytes = 1 << 20;
  bool help = false;
  const chimera::detail::CliFlag flags[] = {
      {"", "--iters", true, [&](std::string_view v) { return chimera::detail::parseIntFlag("--iters", v, 5, iters); }},
      {"", "--bytes", true, [&](std::string_view v) { return chimera::detail::parseSizeFlag("--bytes", v, bytes); }},
      {"-h", "--help", false, [&](std::string_view) { return help = true, chimera::Status::ok(); }},
  };
  // Every rank parses the same arguments, so every rank fails alike before MPI starts.
  constexpr const char* kUsage =
      "usage: mpirun -np 8 chimera-session-bench [--iters N (>= 5; 200)] [--bytes SIZE (1M)]\n";
  if (const chimera::Status status = chimera::detail::parseFlags(chimera::detail::argumentList(argc, argv), flags);
      !status.isOk()) {
    std::fprintf(stderr, "chimera-session-bench: %s\n", status.message().c_str());
    return 2;
  }
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  // A Timeout in a chimera call ends the job (docs/reliability.md) unless the environment says otherwise.
  setenv("CHIMERA_ABORT_ON_TIMEOUT", "1", /*overwrite=*/0);
  int rank = 0;
  int size = 0;
  chimera::check(chimera::mpiWorld(rank, size), "MPI");
  // Rank 0 times the Session alone; the others wait without spinning on the 2 shared cores.
  MPI_Request done;
  double ownTime = 0;
  if (rank == 0) {
    chimera::sessionOverhead(iters);
    ownTime = chimera::fusionOffOwnTime(bytes, iters);
  }
  MPI_Ibarrier(MPI_COMM_WORLD, &done);
  for (int finished = 0; !finished;) {
    MPI_Test(&done, &finished, MPI_STATUS_IGNORE);
    if (!finished) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  chimera::Mesh mesh = chimera::Mesh::flat(size);
  std::unique_ptr<chimera::Backend> backend;
  chimera::check(chimera::createMpiBackend(mesh, backend), "backend");
  chimera::fusionOffOverhead(*backend, bytes, std::max(20, iters / 4), rank, ownTime);
  backend.reset();
  chimera::checkEveryWindowCost(iters, rank);
  chimera::finalizeMpi();
  return 0;
}
