// SPDX-License-Identifier: Apache-2.0
// A mixture-of-experts layer's token dispatch and combine under tensor (tp=4) and expert
// (ep=2) parallelism on 8 ranks, written the way a framework issues it.
//
// Tokens are a [tokens, hidden] tensor; each expert-parallel group holds its own tokens
// (ep=S0). Every rank takes part in every call here, so per-rank recording (the mode the
// sessions use) records the same calls on every rank.
// What the framework writes (`moeStep` below, the same code for both runs):
//   dispatch: the attention output is row-parallel, partial over tp -> allReduce(tp);
//             each tp rank keeps its slice of the tokens              -> slice(tp, dim 0);
//             the tokens go to the experts, all ranks exchanging      -> allToAll(ep+tp, 0 -> 1);
//             the experts read their part:                               consume(ep+tp=S1)
//   combine:  the expert outputs come back                            -> allToAll(ep+tp, 1 -> 0);
//             the next tensor-parallel layer needs every token        -> allGather(tp, dim 0);
//             it reads them replicated over tp:                          consume(ep=S0,tp=R)
// What chimera does: for dispatch it reduces the partial sums straight into the experts'
// layout (one reduce-scatter-like exchange instead of AllReduce + AllToAll: TP+EP); for
// combine it computes the point-to-point transfers from what each rank holds and what each
// needs, and keeps the chain as written when that is not cheaper. Results are compared.
//
// Run: mpirun -np 8 moe_layer [--tokens 4096] [--hidden 1024] [--iters 10]
#include <cstdio>
#include <memory>

#include "chimera/mpi_backend.hpp"
#include "chimera/session.hpp"
#include "example_util.hpp"

namespace {

using chimera::Layout;
using chimera::Session;
using chimera::TensorHandle;
using example::check;

struct Setup {
  chimera::Mesh mesh;
  chimera::TensorSpec spec;
  chimera::AxisSet tp, eptp;
  int rank = 0;
  Layout layout(const char* text) const {
    Layout out;
    check(Layout::parse(text, mesh, out), text);
    return out;
  }
  std::vector<float> buffer(const char* text) const {
    return std::vector<float>(static_cast<std::size_t>(layout(text).localBytes(spec)) / 4);
  }
};

struct Buffers {
  std::vector<float> attention, mine, atExperts, expertOut, back, tokens;
};

struct Read {
  std::vector<float> atExperts, tokens;
  bool operator==(const Read&) const = default;
};

Read moeStep(Session& session, const Setup& s, Buffers& b, int seed) {
  example::fill(b.attention, seed, s.rank);
  TensorHandle attention, summed, mine, dispatched;
  // Dispatch.
  check(session.tensor(b.attention.data(), b.attention.size() * 4, s.spec, s.layout("ep=S0,tp=P"), attention), "t");
  check(session.allReduce(attention, s.tp, summed), "allReduce");
  check(session.slice(summed, s.tp, 0, b.mine.data(), b.mine.size() * 4, mine), "slice");
  check(session.allToAll(mine, s.eptp, 0, 1, b.atExperts.data(), b.atExperts.size() * 4, dispatched), "allToAll");
  check(session.consume(dispatched, s.layout("ep+tp=S1")), "dispatch consume");
  // The experts compute (here: a copy, so that combine has the same shape to send back).
  b.expertOut = b.atExperts;
  TensorHandle expert, returned, gathered;
  check(session.tensor(b.expertOut.data(), b.expertOut.size() * 4, s.spec, s.layout("ep+tp=S1"), expert), "t");
  check(session.allToAll(expert, s.eptp, 1, 0, b.back.data(), b.back.size() * 4, returned), "allToAll back");
  check(session.allGather(returned, s.tp, 0, b.tokens.data(), b.tokens.size() * 4, gathered), "allGather");
  check(session.consume(gathered, s.layout("ep=S0,tp=R")), "combine consume");
  return {b.atExperts, b.tokens};
}

}  // namespace

int main(int argc, char** argv) {
  const long tokens = example::argument(argc, argv, "--tokens", 4096);
  const long hidden = example::argument(argc, argv, "--hidden", 1024);
  const int iters = static_cast<int>(example::argument(argc, argv, "--iters", 10));
  int rank = 0;
  int size = 0;
  check(chimera::mpiWorld(rank, size), "MPI");
  Setup s;
  s.rank = rank;
  s.spec = {{tokens, hidden}, chimera::DataType::F32};
  check(chimera::Mesh::parse("ep=2,tp=4", size, s.mesh), "this example needs 8 ranks: mesh ep=2,tp=4");
  check(s.mesh.parseAxes("tp", s.tp), "tp");
  check(s.mesh.parseAxes("ep+tp", s.eptp), "ep+tp");
  std::unique_ptr<chimera::Backend> backend;
  check(example::createBackend(s.mesh, backend), "backend");
  // What a framework does at initialisation: create its process groups, once.
  chimera::AxisSet ep;
  check(s.mesh.parseAxes("ep", ep), "ep");
  const chimera::AxisSet groups[] = {s.tp, ep, s.eptp};
  check(backend->createGroups(groups), "createGroups");
  auto buffers = [&] {
    return Buffers{s.buffer("ep=S0,tp=R"), s.buffer("ep=S0,tp=S0"), s.buffer("ep+tp=S1"),
                   s.buffer("ep+tp=S1"),   s.buffer("ep+tp=S0"),    s.buffer("ep=S0,tp=R")};
  };
  char title[160];
  std::snprintf(title, sizeof title, "MoE layer, TP+EP on ep=2,tp=4, tokens %ldx%ld f32 (%ld KiB)", tokens, hidden,
                tokens * hidden * 4 / 1024);
  const bool identical =
      example::compareFusion(*backend, title, iters, buffers(), buffers(),
                             [&](Session& session, Buffers& b, int i) { return moeStep(session, s, b, i); });
  backend.reset();
  chimera::finalizeMpi();
  return identical ? 0 : 1;
}
