// SPDX-License-Identifier: Apache-2.0
// A pipeline-parallel training step in 1F1B order, with call-time fusion inside it: `pp`
// stages, each a tensor-parallel group of `tp` ranks, run M microbatches (warm-up forwards,
// steady one-forward-one-backward, cool-down backwards), and every stage records only its
// own communication, as a framework's schedule issues it (per-rank recording).
//
// Per microbatch a stage records (the functions Megatron's schedule calls, one window each):
//   forward:  the row-parallel output is partial over tp     -> allReduce(tp), send(pp) to k+1;
//             stage k+1 receives it, reads it whole:            recv(pp), declareRead(tp=R)
//             a sequence-parallel AllReduce, read as row shards: allReduce(tp), consume(tp=S0)
//   backward: the input gradient is partial over tp          -> allReduce(tp), sendBackward(pp) to k-1;
//             stage k-1 receives it, reads it whole:            recvBackward(pp), declareRead(tp=R)
// In steady state a stage sends its forward output and receives a gradient in one window
// (send_forward_recv_backward), and its neighbour sends that gradient and receives the next
// activation in one (send_backward_recv_forward).
//
// Fusion turns each hand-off into ReduceScatter on the sending stage + shard sends + AllGather
// on the receiving one (the planner's choice when it pays), and the SP AllReduce into a
// ReduceScatter. Each iteration runs once with fusion off and once on, on the same buffers.
// The first iteration (which plans every window) and one more after the timed ones are
// checked: everything a consumer reads is hashed and the two runs compared. The timed
// iterations in between run the same cached programs without the hashing, so that the time
// is the schedule's (communication and the compute stand-in), not the check's.
//
// Run: mpirun -np 8 pipeline_1f1b [--mesh pp=2,tp=4] [--microbatches 4] [--seq 4096]
//        [--hidden 1024] [--iters 5] [--json FILE] [--check 1] [--topology NAME|FILE]
// --topology prices the fusion-on session's plans with a cost model: a preset, a calibrated
// profile, or bytes (bytes alone); default the Session's own on MPI, host:N for N ranks.
// --check 1 runs both sessions with checkEveryWindow (each window agreed again at every
// flush), to measure what that costs; agreements after warm-up are then expected.
// JSON: {"identical", "speedup", "bytes_as_recorded", "bytes_sent", "agreements_after_warmup",
// "local_copies", "local_copy_bytes", ...} (bytes and copies per iteration, all ranks, copies of
// the fusion-on run; agreements counted over every iteration after warm-up, all ranks).
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

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
  chimera::AxisSet tp, pp;
  int rank = 0;
  int stage = 0;
  int stages = 1;
  int microbatches = 1;
  Layout partial, whole, rows;     // this stage's tensor: partial over tp, replicated, row shards
  std::vector<float> patterns[3];  // per kind of output: this rank's base input values
};

// This rank's buffers, reused by every microbatch and by both runs.
struct Buffers {
  std::vector<float> forwardOut, forwardIn, gradientOut, gradientIn, sequence;
};

// A 64-bit digest of what a consumer reads (8 bytes at a time, so that the reads cost little
// next to the communication; the tail byte by byte).
std::uint64_t hashBytes(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, p + i, 8);
    h = (h ^ word) * 1099511628211ull;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// One stage's side of a training step, recorded through `session`; with `reads`, every read
// is hashed into it right after the window that wrote it (the buffers are reused).
class Stage {
 public:
  Stage(Session& session, const Setup& s, Buffers& b, int seed, std::vector<std::uint64_t>* reads)
      : session_(session), s_(s), b_(b), seed_(seed), reads_(reads) {}

  // The schedule of Megatron's forward_backward_pipelining_without_interleaving.
  void run() {
    const int warmup = std::min(s_.stages - s_.stage - 1, s_.microbatches);
    const int remaining = s_.microbatches - warmup;
    int forward = 0;
    int backward = 0;
    for (int i = 0; i < warmup; ++i, ++forward) {
      recvForward(forward);
      forwardCompute(forward);
      sendForward(forward);
    }
    if (remaining > 0) recvForward(forward);
    for (int i = 0; i < remaining; ++i, ++backward) {
      forwardCompute(forward);
      sendForwardRecvBackward(forward, backward);
      ++forward;
      if (i == remaining - 1) {
        sendBackward(backward);
      } else {
        sendBackwardRecvForward(backward, forward);
      }
    }
    for (int i = 0; i < warmup; ++i, ++backward) {
      recvBackward(backward);
      sendBackward(backward);
    }
  }

 private:
  bool first() const { return s_.stage == 0; }
  bool last() const { return s_.stage == s_.stages - 1; }
  // The stage's computation stand-in: its base values, with every 61st element set from
  // (iteration, microbatch), so that no two microbatches send the same tensor (a hand-off
  // that left the previous one in place would show) at the cost of a copy.
  void produce(std::vector<float>& buffer, int microbatch, int kind) const {
    std::memcpy(buffer.data(), s_.patterns[kind].data(), buffer.size() * 4);
    const auto mark = static_cast<float>((seed_ * 31 + microbatch * 7 + kind + s_.rank) % 13);
    for (std::size_t i = 0; i < buffer.size(); i += 61) buffer[i] = mark;
  }

  // A partial-over-tp output of this stage, all-reduced and handed to stage + step.
  void recordHandOff(std::vector<float>& buffer, int microbatch, int kind, int step) {
    produce(buffer, microbatch, kind);
    TensorHandle t, summed, sent;
    check(session_.tensor(buffer.data(), buffer.size() * 4, s_.spec, s_.partial, t), "tensor");
    check(session_.allReduce(t, s_.tp, summed), "allReduce");
    check(step > 0 ? session_.send(summed, s_.pp, nullptr, 0, sent)
                   : session_.sendBackward(summed, s_.pp, nullptr, 0, sent),
          "send");
  }
  void recordReceive(std::vector<float>& buffer, int step) {
    TensorHandle received;
    check(step > 0 ? session_.recv(s_.spec, s_.whole, s_.pp, buffer.data(), buffer.size() * 4, received)
                   : session_.recvBackward(s_.spec, s_.whole, s_.pp, buffer.data(), buffer.size() * 4, received),
          "recv");
    check(session_.declareRead(received, s_.whole), "declareRead");
    pending_.push_back(&buffer);
  }
  void flush() {
    check(session_.flush(), "flush");
    if (reads_ != nullptr) {
      for (const std::vector<float>* read : pending_) reads_->push_back(hashBytes(read->data(), read->size() * 4));
    }
    pending_.clear();
  }

  void recvForward(int) {
    if (first()) return;
    recordReceive(b_.forwardIn, 1);
    flush();
  }
  void sendForward(int microbatch) {
    if (last()) return;
    recordHandOff(b_.forwardOut, microbatch, 0, 1);
    flush();
  }
  void recvBackward(int) {
    if (last()) return;
    recordReceive(b_.gradientIn, -1);
    flush();
  }
  void sendBackward(int microbatch) {
    if (first()) return;
    recordHandOff(b_.gradientOut, microbatch, 1, -1);
    flush();
  }
  void sendForwardRecvBackward(int forward, int) {
    if (last()) return;
    recordHandOff(b_.forwardOut, forward, 0, 1);
    recordReceive(b_.gradientIn, -1);
    flush();
  }
  void sendBackwardRecvForward(int backward, int) {
    if (first()) return;
    recordHandOff(b_.gradientOut, backward, 1, -1);
    recordReceive(b_.forwardIn, 1);
    flush();
  }
  // The sequence-parallel region of the forward pass: an AllReduce read as row shards.
  void forwardCompute(int microbatch) {
    produce(b_.sequence, microbatch, 2);
    TensorHandle t, summed;
    check(session_.tensor(b_.sequence.data(), b_.sequence.size() * 4, s_.spec, s_.partial, t), "tensor");
    check(session_.allReduce(t, s_.tp, summed), "allReduce");
    check(session_.consume(summed, s_.rows), "consume rows");
    if (reads_ == nullptr) return;
    const std::vector<float> read = example::consumedPart(b_.sequence, s_.whole, s_.rows, s_.spec, s_.rank);
    reads_->push_back(hashBytes(read.data(), read.size() * 4));
  }

  Session& session_;
  const Setup& s_;
  Buffers& b_;
  int seed_;
  std::vector<std::uint64_t>* reads_;
  std::vector<const std::vector<float>*> pending_;
};

void barrier(chimera::Backend& backend) { (void)example::allRanks(backend, true); }

}  // namespace

int main(int argc, char** argv) {
  const std::string meshText = example::textArgument(argc, argv, "--mesh", "pp=2,tp=4");
  const long microbatches = example::argument(argc, argv, "--microbatches", 4);
  const long seq = example::argument(argc, argv, "--seq", 4096);
  const long hidden = example::argument(argc, argv, "--hidden", 1024);
  const int iters = static_cast<int>(example::argument(argc, argv, "--iters", 5));
  const std::string json = example::textArgument(argc, argv, "--json", "");
  const bool checkEveryWindow = example::argument(argc, argv, "--check", 0) != 0;
  int rank = 0;
  int size = 0;
  check(chimera::mpiWorld(rank, size), "MPI");
  const std::string topologyText = example::textArgument(argc, argv, "--topology", "");
  Setup s;
  s.rank = rank;
  s.microbatches = static_cast<int>(microbatches);
  s.spec = {{seq, hidden}, chimera::DataType::F32};
  check(chimera::Mesh::parse(meshText, size, s.mesh), "--mesh (axes pp and tp, their product the world size)");
  check(s.mesh.parseAxes("tp", s.tp), "the mesh needs a tp axis");
  check(s.mesh.parseAxes("pp", s.pp), "the mesh needs a pp axis");
  int ppAxis = 0;
  check(s.mesh.axisIndex("pp", ppAxis), "pp");
  s.stages = s.mesh.axis(ppAxis).size;
  s.stage = s.mesh.coordinates(rank)[static_cast<std::size_t>(ppAxis)];
  if (s.mesh.numAxes() != 2 || s.stages < 2 || microbatches < 1 || iters < 1) {
    if (rank == 0)
      std::fprintf(stderr, "needs a mesh of the axes pp and tp only, pp >= 2, --microbatches >= 1, --iters >= 1\n");
    chimera::finalizeMpi();
    return 1;
  }
  const std::string stage = "pp=@" + std::to_string(s.stage);
  check(Layout::parse(stage + ",tp=P", s.mesh, s.partial), "layout");
  check(Layout::parse(stage + ",tp=R", s.mesh, s.whole), "layout");
  check(Layout::parse(stage + ",tp=S0", s.mesh, s.rows), "layout");

  std::unique_ptr<chimera::Backend> backend;
  check(example::createBackend(s.mesh, backend), "backend");
  // What a framework does at initialisation: create its process groups, once.
  const chimera::AxisSet groups[] = {s.tp, s.pp, s.mesh.allAxes()};
  check(backend->createGroups(groups), "createGroups");

  chimera::SessionOptions offOptions, onOptions;
  offOptions.perRank = onOptions.perRank = true;
  offOptions.checkEveryWindow = onOptions.checkEveryWindow = checkEveryWindow;
  offOptions.fusion = false;
  onOptions.topology = topologyText;
  std::unique_ptr<Session> off, on;
  check(Session::create(*backend, offOptions, off), "session");
  check(Session::create(*backend, onOptions, on), "session");

  const auto elements = static_cast<std::size_t>(s.whole.localBytes(s.spec) / 4);
  for (int kind = 0; kind < 3; ++kind) {
    s.patterns[kind].resize(elements);
    example::fill(s.patterns[kind], kind, rank);
  }
  Buffers b{std::vector<float>(elements), std::vector<float>(elements), std::vector<float>(elements),
            std::vector<float>(elements), std::vector<float>(elements)};
  std::vector<double> timeOff, timeOn;
  bool identical = true;
  std::uint64_t agreementsAtWarmup = 0;
  chimera::SessionStats warm{};
  // Iteration 0 plans every window; it and the last are checked, the ones between timed.
  for (int i = 0; i < iters + 2; ++i) {
    const bool timed = i > 0 && i <= iters;
    std::vector<std::uint64_t> readOff, readOn;
    barrier(*backend);
    auto start = std::chrono::steady_clock::now();
    Stage(*off, s, b, i, timed ? nullptr : &readOff).run();
    barrier(*backend);
    if (timed) timeOff.push_back(example::microsSince(start));
    start = std::chrono::steady_clock::now();
    Stage(*on, s, b, i, timed ? nullptr : &readOn).run();
    barrier(*backend);
    if (timed) timeOn.push_back(example::microsSince(start));
    if (!timed) identical = identical && readOff == readOn && !readOn.empty();
    if (i == 0) {
      agreementsAtWarmup = on->stats().agreements + off->stats().agreements;
      warm = on->stats();
      if (rank == 0) {
        std::printf("iteration 0 planned every window and checked both runs\n");
        std::fflush(stdout);
      }
    }
  }
  identical = example::allRanks(*backend, identical);
  const chimera::SessionStats end = on->stats();
  // Per iteration after warm-up, summed over the ranks; agreements over all of them.
  const auto afterWarmup = static_cast<std::uint64_t>(iters + 1);
  std::int64_t totals[5] = {
      static_cast<std::int64_t>((end.rankBytesAsRecorded - warm.rankBytesAsRecorded) / afterWarmup),
      static_cast<std::int64_t>((end.rankBytesSent - warm.rankBytesSent) / afterWarmup),
      static_cast<std::int64_t>(end.agreements + off->stats().agreements - agreementsAtWarmup),
      static_cast<std::int64_t>((end.localCopies - warm.localCopies) / afterWarmup),
      static_cast<std::int64_t>((end.localCopyBytes - warm.localCopyBytes) / afterWarmup)};
  check(backend->allReduce(totals, totals, 5, chimera::DataType::I64, chimera::ReduceOp::Sum, s.mesh.allAxes()),
        "totals");
  const auto windowsPerIteration = (end.windows - warm.windows) / afterWarmup;
  const double medianOff = example::median(timeOff);
  const double medianOn = example::median(timeOn);
  const double speedup = medianOn > 0 ? medianOff / medianOn : 0.0;
  if (rank == 0) {
    const std::string costName(on->cost().name());
    std::printf(
        "1F1B pipeline on %s, %ld microbatches, activation %ldx%ld f32 (%ld KiB), %d iterations, priced by %s\n",
        meshText.c_str(), microbatches, seq, hidden, seq * hidden * 4 / 1024, iters, costName.c_str());
    std::printf("  fusion off: %10.1f us/iteration  %12llu bytes/iteration (all ranks)\n", medianOff,
                static_cast<unsigned long long>(totals[0]));
    std::printf("  fusion on : %10.1f us/iteration  %12llu bytes/iteration (all ranks), %llu of %llu chains fused\n",
                medianOn, static_cast<unsigned long long>(totals[1]), static_cast<unsigned long long>(end.fusedChains),
                static_cast<unsigned long long>(end.chainsRun));
    std::printf("  fusion on made %llu local copies (%llu bytes) per iteration (all ranks)\n",
                static_cast<unsigned long long>(totals[3]), static_cast<unsigned long long>(totals[4]));
    std::printf("  speedup %.2fx, bytes %.2fx fewer, %llu agreements after warm-up, results %s\n", speedup,
                totals[1] > 0 ? static_cast<double>(totals[0]) / static_cast<double>(totals[1]) : 0.0,
                static_cast<unsigned long long>(totals[2]), identical ? "identical on every rank" : "DIFFER");
    if (!json.empty()) {
      FILE* out = std::fopen(json.c_str(), "w");
      if (out == nullptr) {
        std::fprintf(stderr, "cannot write %s\n", json.c_str());
        identical = false;
      } else {
        std::fprintf(out,
                     "{\"mesh\": \"%s\", \"microbatches\": %ld, \"seq\": %ld, \"hidden\": %ld, \"iters\": %d, "
                     "\"identical\": %s, \"speedup\": %.4f, \"time_off_us\": %.1f, \"time_on_us\": %.1f, "
                     "\"bytes_as_recorded\": %llu, \"bytes_sent\": %llu, \"agreements_after_warmup\": %llu, "
                     "\"windows_per_iteration\": %llu, \"local_copies\": %llu, \"local_copy_bytes\": %llu, "
                     "\"check_every_window\": %s, \"topology\": \"%s\"}\n",
                     meshText.c_str(), microbatches, seq, hidden, iters, identical ? "true" : "false", speedup,
                     medianOff, medianOn, static_cast<unsigned long long>(totals[0]),
                     static_cast<unsigned long long>(totals[1]), static_cast<unsigned long long>(totals[2]),
                     static_cast<unsigned long long>(windowsPerIteration), static_cast<unsigned long long>(totals[3]),
                     static_cast<unsigned long long>(totals[4]), checkEveryWindow ? "true" : "false", costName.c_str());
        std::fclose(out);
      }
    }
  }
  const bool ok = identical && (checkEveryWindow || totals[2] == 0);
  off.reset();
  on.reset();
  backend.reset();
  chimera::finalizeMpi();
  return ok ? 0 : 1;
}
