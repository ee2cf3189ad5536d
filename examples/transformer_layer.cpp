// SPDX-License-Identifier: Apache-2.0
// A transformer layer's communication under tensor (tp=4), sequence and pipeline (pp=2)
// parallelism on 8 ranks, written the way a framework issues it: one call at a time, on the
// buffers it already has, plus a note of what the next computation reads. Each stage records
// only its own calls (per-rank recording): the sender its side of a hand-off, the receiver
// its `recv`.
//
// What the framework writes (both runs use the very same code, `layerStep` below):
//   forward, stage 0:
//     attention output projection (row-parallel)  -> partial sums over tp -> allReduce(tp);
//       the sequence-parallel LayerNorm reads only its rows:     declareRead(pp=@0,tp=S0)
//     MLP output projection (row-parallel)          -> allReduce(tp), then send(pp) to stage 1;
//   forward, stage 1: it receives the activation and reads it whole:
//                                                      recv(pp), declareRead(pp=@1,tp=R)
//   backward, stage 1:
//     input gradient of a column-parallel layer     -> allReduce(tp), then sendBackward(pp) to stage 0;
//     sequence-parallel activations for recompute   -> allGather(tp) (read in full: no declaration)
//   backward, stage 0: it receives the gradient; its sequence-parallel region reads its rows,
//     which the framework knows as a byte range of the buffer: recvBackward(pp), consume(offset, bytes)
//
// What chimera does with it: with CHIMERA_FUSION=0 (or fusion off) it runs exactly those calls.
// With fusion on it sees, at the flush, that the first AllReduce is read as a row shard only
// (a ReduceScatter delivers it: TP+SP), that the AllReduce + send is read replicated on stage 1
// (reduce-scatter, send the shards, gather on stage 1: TP+PP), that the backward AllReduce +
// sendBackward is read as the row shard each stage-0 rank's byte range covers (reduce-scatter on
// stage 1, send each shard to the one rank that reads it: TP+PP+SP), and that the AllGather has
// no declaration, so it runs as written. Results are compared element by element.
//
// Run: mpirun -np 8 transformer_layer [--seq 4096] [--hidden 1024] [--iters 10]
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

// One stage's buffers (a rank of the other stage leaves its part empty).
struct Buffers {
  std::vector<float> attention, mlp, mlpOnStage1, gradient, gradientOnStage0, activations, gathered;
};

struct Setup {
  chimera::Mesh mesh;
  chimera::TensorSpec spec;
  chimera::AxisSet tp, pp;
  int rank = 0;
  Layout layout(const char* text) const {
    Layout out;
    check(Layout::parse(text, mesh, out), text);
    return out;
  }
  std::size_t bytes(const Layout& l) const { return l.holds(rank) ? static_cast<std::size_t>(l.localBytes(spec)) : 0; }
  std::vector<float> buffer(const char* text) const { return std::vector<float>(bytes(layout(text)) / 4); }
  // The bytes of this rank's rows (its tp shard of dim 0) in a stage-`stage` buffer; none off it.
  std::size_t rowsOffset(int stage) const {
    const std::vector<int> at = mesh.coordinates(rank);
    return at[0] == stage ? static_cast<std::size_t>(at[1]) * rowsBytes(stage) : 0;
  }
  std::size_t rowsBytes(int stage) const {
    const std::int64_t shard = spec.numElements() / mesh.axis(1).size;  // elements of one tp shard
    return mesh.coordinates(rank)[0] == stage ? static_cast<std::size_t>(shard) * sizeof(float) : 0;
  }
  float* data(std::vector<float>& b) const { return b.empty() ? nullptr : b.data(); }
};

// What each consumer reads after one step (for the comparison of the two runs).
struct Read {
  std::vector<float> attention, mlp, gradientRows, gathered;
  bool operator==(const Read&) const = default;
};

// One training step's communication of the layer, as a framework issues it: each stage
// records its own calls.
Read layerStep(Session& session, const Setup& s, Buffers& b, int seed) {
  example::fill(b.attention, seed, s.rank);
  example::fill(b.mlp, seed + 1, s.rank);
  example::fill(b.gradient, seed + 2, s.rank);
  example::fill(b.activations, seed + 3, 0);
  const bool stage0 = s.mesh.coordinates(s.rank)[0] == 0;
  if (stage0) {
    TensorHandle attention, attentionSum, mlp, mlpSum, mlpNext, gradientBack;
    // Forward.
    check(session.tensor(s.data(b.attention), b.attention.size() * 4, s.spec, s.layout("pp=@0,tp=P"), attention), "t");
    check(session.allReduce(attention, s.tp, attentionSum), "attention allReduce");
    check(session.declareRead(attentionSum, s.layout("pp=@0,tp=S0")), "declare");
    check(session.tensor(s.data(b.mlp), b.mlp.size() * 4, s.spec, s.layout("pp=@0,tp=P"), mlp), "t");
    check(session.allReduce(mlp, s.tp, mlpSum), "mlp allReduce");
    check(session.send(mlpSum, s.pp, nullptr, 0, mlpNext), "send");
    check(session.flush(), "forward flush");
    // Backward: the gradient from stage 1; this rank reads its rows of it.
    check(session.recvBackward(s.spec, s.layout("pp=@0,tp=R"), s.pp, s.data(b.gradientOnStage0),
                               b.gradientOnStage0.size() * 4, gradientBack),
          "recvBackward");
    check(session.consume(gradientBack, s.rowsOffset(0), s.rowsBytes(0)), "backward consume");
  } else {
    TensorHandle mlpNext, gradient, gradientSum, gradientBack, activations, gathered;
    // Forward: the activation from stage 0, read whole.
    check(session.recv(s.spec, s.layout("pp=@1,tp=R"), s.pp, s.data(b.mlpOnStage1), b.mlpOnStage1.size() * 4, mlpNext),
          "recv");
    check(session.consume(mlpNext, s.layout("pp=@1,tp=R")), "forward consume");
    // Backward.
    check(session.tensor(s.data(b.gradient), b.gradient.size() * 4, s.spec, s.layout("pp=@1,tp=P"), gradient), "t");
    check(session.allReduce(gradient, s.tp, gradientSum), "gradient allReduce");
    check(session.sendBackward(gradientSum, s.pp, nullptr, 0, gradientBack), "sendBackward");
    check(session.tensor(s.data(b.activations), b.activations.size() * 4, s.spec, s.layout("pp=@1,tp=S0"), activations),
          "t");
    check(session.allGather(activations, s.tp, 0, s.data(b.gathered), b.gathered.size() * 4, gathered), "allGather");
    check(session.flush(), "backward flush");
  }

  Read read;
  read.attention = example::consumedPart(b.attention, s.layout("pp=@0,tp=R"), s.layout("pp=@0,tp=S0"), s.spec, s.rank);
  read.mlp = b.mlpOnStage1;
  const auto rows = b.gradientOnStage0.begin() + static_cast<std::ptrdiff_t>(s.rowsOffset(0) / 4);
  read.gradientRows.assign(rows, rows + static_cast<std::ptrdiff_t>(s.rowsBytes(0) / 4));
  read.gathered = b.gathered;
  return read;
}

}  // namespace

int main(int argc, char** argv) {
  const long seq = example::argument(argc, argv, "--seq", 4096);
  const long hidden = example::argument(argc, argv, "--hidden", 1024);
  const int iters = static_cast<int>(example::argument(argc, argv, "--iters", 10));
  int rank = 0;
  int size = 0;
  check(chimera::mpiWorld(rank, size), "MPI");
  Setup s;
  s.rank = rank;
  s.spec = {{seq, hidden}, chimera::DataType::F32};
  check(chimera::Mesh::parse("pp=2,tp=4", size, s.mesh), "this example needs 8 ranks: mesh pp=2,tp=4");
  check(s.mesh.parseAxes("tp", s.tp), "tp");
  check(s.mesh.parseAxes("pp", s.pp), "pp");
  std::unique_ptr<chimera::Backend> backend;
  check(example::createBackend(s.mesh, backend), "backend");
  // What a framework does at initialisation: create its process groups, once.
  const chimera::AxisSet groups[] = {s.tp, s.pp};
  check(backend->createGroups(groups), "createGroups");

  auto buffers = [&] {
    return Buffers{s.buffer("pp=@0,tp=R"), s.buffer("pp=@0,tp=R"),  s.buffer("pp=@1,tp=R"), s.buffer("pp=@1,tp=R"),
                   s.buffer("pp=@0,tp=R"), s.buffer("pp=@1,tp=S0"), s.buffer("pp=@1,tp=R")};
  };
  char title[160];
  std::snprintf(title, sizeof title, "transformer layer, TP+SP+PP on pp=2,tp=4, activation %ldx%ld f32 (%ld KiB)", seq,
                hidden, seq * hidden * 4 / 1024);
  const bool identical =
      example::compareFusion(*backend, title, iters, buffers(), buffers(),
                             [&](Session& session, Buffers& b, int i) { return layerStep(session, s, b, i); });
  backend.reset();
  chimera::finalizeMpi();
  return identical ? 0 : 1;
}
