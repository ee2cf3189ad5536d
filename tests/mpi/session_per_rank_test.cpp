// SPDX-License-Identifier: Apache-2.0
// Session, per-rank recording: each stage records only its own side of a pipeline hand-off
// (the sender its calls and the send, the receiver the recv, its calls on the received value
// and its declaration). Every hand-off kind (forward, backward, PP+SP, PP+EP, deeper
// pipelines) is checked element by element against fusion off and against SPMD recording;
// repeated windows agree nothing; bad input fails on every rank involved.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <optional>

#include "session_test_support.hpp"

namespace chimera::testing {
namespace {

/// A hand-off as the two stages record it: the sender's start layout and ops (the last a
/// send), the receiver's ops on the received value, and its declaration.
struct HandOffCase {
  std::string name;
  std::string mesh;
  std::string from;
  std::string senderOps;
  std::string receiverOps;  ///< empty: none
  std::string consume;      ///< empty: no declaration
  std::vector<std::int64_t> shape;
  bool expectFused = true;
  bool nothingToFuse = false;  ///< the plan is the chain as issued: it runs exactly as fusion off
};

std::ostream& operator<<(std::ostream& os, const HandOffCase& c) { return os << c.name; }

// Every group of the mesh (every non-empty axis set): what a framework creates at setup.
Status createAllGroups(Backend& backend) {
  std::vector<AxisSet> groups;
  const std::uint32_t all = backend.mesh().allAxes().bits();
  for (std::uint32_t bits = 1; bits <= all; ++bits) {
    if ((bits & ~all) == 0) groups.push_back(AxisSet::fromBits(bits));
  }
  return backend.createGroups(groups);
}

// The layout after `ops` from `from`.
Status layoutAfter(const Layout& from, const std::vector<ChainOp>& ops, const TensorSpec& spec, Layout& out) {
  out = from;
  for (const ChainOp& op : ops) {
    OpEffect effect;
    CHIMERA_RETURN_IF_ERROR(applyChainOp(out, op, spec, effect));
    out = effect.output;
  }
  return Status::ok();
}

struct PerRankSetup {
  Mesh mesh;
  TensorSpec spec;
  Layout from, received, finalLayout;
  Chain sender, receiver;
  std::optional<Layout> consume;
  ChainOp send;

  Status parse(const HandOffCase& c) {
    spec = {c.shape, DataType::F32};
    CHIMERA_RETURN_IF_ERROR(Mesh::parse(c.mesh, worldSize(), mesh));
    CHIMERA_RETURN_IF_ERROR(Layout::parse(c.from, mesh, from));
    CHIMERA_RETURN_IF_ERROR(Chain::parse(c.senderOps, mesh, sender));
    if (!c.receiverOps.empty()) CHIMERA_RETURN_IF_ERROR(Chain::parse(c.receiverOps, mesh, receiver));
    if (!c.consume.empty()) {
      consume.emplace();
      CHIMERA_RETURN_IF_ERROR(Layout::parse(c.consume, mesh, *consume));
    }
    send = sender.ops.back();
    CHIMERA_CHECK_ARG(send.kind == ChainOp::Kind::Send, "the sender's ops must end in a send");
    CHIMERA_RETURN_IF_ERROR(layoutAfter(from, sender.ops, spec, received));
    return layoutAfter(received, receiver.ops, spec, finalLayout);
  }
};

// One step of `c` recorded per rank; returns what this rank's consumer reads.
Status recordStep(Session& session, const PerRankSetup& s, std::uint32_t seed, std::vector<double>& consumed) {
  const int rank = worldRank();
  std::vector<std::vector<std::uint64_t>> storage;
  consumed.clear();
  if (s.from.holds(rank)) {
    const auto bytes = static_cast<std::size_t>(s.from.localBytes(s.spec));
    storage.push_back(makeBuffer(bytes / 4, s.spec.dtype));
    fillInput(storage.back().data(), s.from, s.spec, rank, seed);
    TensorHandle t;
    CHIMERA_RETURN_IF_ERROR(session.tensor(storage.back().data(), bytes, s.spec, s.from, t));
    for (const ChainOp& op : s.sender.ops) {
      TensorHandle next;
      if (op.kind == ChainOp::Kind::Send) {
        CHIMERA_RETURN_IF_ERROR(session.record(t, op, nullptr, 0, next));
      } else {
        CHIMERA_RETURN_IF_ERROR(recordOp(session, t, op, s.spec, storage, next));
      }
      t = next;
    }
    return session.flush();
  }
  if (!s.received.holds(rank)) return Status::ok();  // a stage this hand-off does not touch
  const auto bytes = static_cast<std::size_t>(s.received.localBytes(s.spec));
  storage.push_back(makeBuffer(bytes / 4, s.spec.dtype));
  TensorHandle t;
  CHIMERA_RETURN_IF_ERROR(s.send.stageStep > 0
                              ? session.recv(s.spec, s.received, s.send.axes, storage.back().data(), bytes, t)
                              : session.recvBackward(s.spec, s.received, s.send.axes, storage.back().data(), bytes, t));
  for (const ChainOp& op : s.receiver.ops) {
    TensorHandle next;
    CHIMERA_RETURN_IF_ERROR(recordOp(session, t, op, s.spec, storage, next));
    t = next;
  }
  CHIMERA_RETURN_IF_ERROR(s.consume ? session.consume(t, *s.consume) : session.flush());
  const Layout& read = s.consume ? *s.consume : s.finalLayout;
  if (read.holds(rank)) {
    const Box box = read.rankBox(rank, s.spec).relativeTo(s.finalLayout.rankBox(rank, s.spec).offset);
    consumed = readBox(storage.back().data(), s.finalLayout.localShape(s.spec), box, s.spec.dtype);
  }
  return Status::ok();
}

struct PerRankRun {
  Status status;
  std::vector<double> consumed;  ///< of the last step
  SessionStats stats;
  std::uint64_t agreementsAfterFirstStep = 0;
};

PerRankRun runPerRank(const HandOffCase& c, bool fusion, std::uint32_t seed, int steps) {
  PerRankRun run;
  PerRankSetup s;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Session> session;
  run.status = s.parse(c);
  if (run.status.isOk()) run.status = createMpiBackend(s.mesh, backend);
  if (run.status.isOk()) run.status = createAllGroups(*backend);
  SessionOptions options;
  options.fusion = fusion;
  options.perRank = true;
  options.topology = "bytes";  // the fused hand-offs of these small activations, not the host model's choice
  if (run.status.isOk()) run.status = Session::create(*backend, options, session);
  for (int step = 0; run.status.isOk() && step < steps; ++step) {
    run.status = recordStep(*session, s, seed + static_cast<std::uint32_t>(step), run.consumed);
    if (step == 0 && session) run.agreementsAfterFirstStep = session->stats().agreements;
  }
  if (session) run.stats = session->stats();
  return run;
}

std::vector<HandOffCase> handOffCases() {
  const std::vector<std::int64_t> flat{32, 48};
  const std::vector<std::int64_t> cube{16, 24, 16};
  return {
      {"forward_tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "", "pp=@1,tp=R", flat},
      {"backward_tp_pp", "pp=2,tp=4", "pp=@1,tp=P", "allreduce:tp,send:pp:backward", "", "pp=@0,tp=R", flat},
      {"forward_rows_pp_sp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "", "pp=@1,tp=S0", flat},
      {"backward_rows_pp_sp", "pp=2,tp=4", "pp=@1,tp=P", "allreduce:tp,send:pp:backward", "", "pp=@0,tp=S0", flat},
      {"pp_sp", "sp=4,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "", "pp=@1,sp=R", flat},
      {"pp_sp_backward", "pp=4,sp=2", "pp=@2,sp=S0", "allgather:sp:0,send:pp:backward", "", "pp=@1,sp=R", cube},
      {"pp_ep", "pp=2,ep=4", "pp=@0,ep=S0", "send:pp", "alltoall:ep:0:1", "pp=@1,ep=S1", flat},
      {"tp_pp_4_stages", "pp=4,tp=2", "pp=@1,tp=P", "allreduce:tp,send:pp", "", "pp=@2,tp=R", cube},
      {"pp_8_stages", "pp=8", "pp=@3", "send:pp", "", "pp=@4", flat, false, true},
      {"forward_undeclared", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "", "", flat, false},
      {"tp_outer_axis", "tp=4,pp=2", "pp=@0,tp=P", "allreduce:tp,send:pp", "", "pp=@1,tp=R", flat},
      {"with_dp", "dp=2,pp=2,tp=2", "dp=S0,pp=@0,tp=P", "allreduce:tp,send:pp", "", "dp=S0,pp=@1,tp=R", cube},
      {"with_dp_backward_rows", "pp=2,dp=2,tp=2", "dp=S1,pp=@1,tp=P", "allreduce:tp,send:pp:backward", "",
       "dp=S1,pp=@0,tp=S0", cube},
      // Nothing to fuse (groups of one): the calls run as recorded, without a local copy.
      {"as_issued_tp_of_one", "pp=8,tp=1", "pp=@4,tp=P", "allreduce:tp,send:pp", "", "pp=@5,tp=R", flat, false, true},
      // A group of one read as rows: the plan that skips the AllReduce over one rank wins.
      {"tp_of_one_rows_backward", "tp=1,pp=8", "pp=@3,tp=P", "allreduce:tp,send:pp:backward", "", "pp=@2,tp=S0", cube,
       false},
      {"as_issued_with_dp", "pp=4,dp=2,tp=1", "dp=S0,pp=@2,tp=P", "allreduce:tp,send:pp", "", "dp=S0,pp=@3,tp=R", flat,
       false, true},
  };
}

class SessionPerRank : public ::testing::TestWithParam<HandOffCase> {};

// Per-rank recording, fusion on and off, reads exactly what SPMD recording of the same chain
// reads with fusion off; fusion on sends fewer bytes; repeated windows agree nothing.
TEST_P(SessionPerRank, FusedHandOffEqualsRecordedCalls) {
  const HandOffCase& c = GetParam();
  const PerRankRun off = runPerRank(c, false, 5, 3);
  const PerRankRun on = runPerRank(c, true, 5, 3);
  std::string chain = c.senderOps + (c.receiverOps.empty() ? "" : "," + c.receiverOps);
  const SessionRun spmd = runCase({c.name, c.mesh, c.from, chain, c.consume, c.shape}, false, 5, 3);
  EXPECT_TRUE(off.status.isOk()) << off.status.toString();
  EXPECT_TRUE(on.status.isOk()) << on.status.toString();
  EXPECT_TRUE(spmd.status.isOk()) << spmd.status.toString();
  EXPECT_EQ(off.consumed, on.consumed);
  EXPECT_EQ(spmd.consumed, on.consumed);
  PerRankSetup s;
  ASSERT_TRUE(s.parse(c).isOk());
  const Layout& read = s.consume ? *s.consume : s.finalLayout;
  EXPECT_EQ(on.consumed.size(), read.holds(worldRank()) ? static_cast<std::size_t>(read.localBytes(s.spec) / 4) : 0u);
  const bool ok = off.status.isOk() && on.status.isOk() && off.consumed == on.consumed && spmd.consumed == on.consumed;
  EXPECT_TRUE(allRanksAgree(ok));
  EXPECT_EQ(off.stats.fusedChains, 0u);
  EXPECT_EQ(off.stats.rankBytesSent, off.stats.rankBytesAsRecorded);
  EXPECT_EQ(on.stats.agreements, on.agreementsAfterFirstStep) << "a repeated window agreed again";
  EXPECT_EQ(off.stats.agreements, off.agreementsAfterFirstStep) << "a repeated window agreed again";
  // Summed over the world, fused bytes never exceed the recorded ones, and per-rank bytes as
  // recorded add up to what SPMD recording counts for the whole job.
  std::uint64_t sums[3] = {on.stats.rankBytesAsRecorded, on.stats.rankBytesSent, on.stats.fusedChains};
  MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(sums[0], spmd.stats.bytesAsRecorded);
  EXPECT_LE(sums[1], sums[0]);
  if (c.expectFused) {
    EXPECT_LT(sums[1], sums[0]);
    EXPECT_GT(sums[2], 0u);
  }
  if (c.nothingToFuse) {
    // As recorded means as recorded: the calls on the caller's buffers, no local copy.
    EXPECT_EQ(on.stats.localCopies, 0u) << on.stats.localCopyBytes << " bytes copied";
    EXPECT_EQ(on.stats.fusedChains, 0u);
    EXPECT_EQ(on.stats.rankBytesSent, off.stats.rankBytesSent);
  }
}

INSTANTIATE_TEST_SUITE_P(HandOffs, SessionPerRank, ::testing::ValuesIn(handOffCases()),
                         [](const ::testing::TestParamInfo<HandOffCase>& param) { return param.param.name; });

}  // namespace
}  // namespace chimera::testing

namespace chimera::testing {
namespace {

// Bad input on the pp=2,tp=4 forward hand-off: each case makes one side differ and expects a
// clear error on every rank of the groups involved (here all 8), never a hang.
class SessionPerRankBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        setup_.parse({"bad", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "", "pp=@1,tp=R", {32, 48}}).isOk());
    ASSERT_TRUE(createMpiBackend(setup_.mesh, backend_).isOk());
  }
  std::unique_ptr<Session> session(bool check = false) {
    SessionOptions options;
    options.perRank = true;
    options.checkEveryWindow = check;
    options.topology = "bytes";  // fuses the 6 KiB hand-off, so the fused path meets the bad input
    std::unique_ptr<Session> out;
    EXPECT_TRUE(Session::create(*backend_, options, out).isOk());
    return out;
  }
  bool sender() const { return setup_.from.holds(worldRank()); }

  PerRankSetup setup_;
  std::unique_ptr<Backend> backend_;
};

// Every rank's status has `code` and names `text`.
void expectEverywhere(const Status& status, StatusCode code, const std::string& text) {
  const bool ok = status.code() == code && status.message().find(text) != std::string::npos;
  EXPECT_EQ(status.code(), code) << status.toString();
  EXPECT_NE(status.message().find(text), std::string::npos) << status.toString();
  EXPECT_TRUE(allRanksAgree(ok));
}

TEST_F(SessionPerRankBadInput, ReceivedLayoutDiffersFromWhatIsSent) {
  ASSERT_TRUE(createAllGroups(*backend_).isOk());
  auto s = session();
  PerRankSetup wrong = setup_;
  ASSERT_TRUE(Layout::parse("pp=@1,tp=S0", setup_.mesh, wrong.received).isOk());
  wrong.finalLayout = wrong.received;
  wrong.consume.reset();
  std::vector<double> consumed;
  const Status status = recordStep(*s, sender() ? setup_ : wrong, 1, consumed);
  expectEverywhere(status, StatusCode::Mismatch, "hand-off");
}

TEST_F(SessionPerRankBadInput, RecordingAGroupThisRankIsNotInFailsAtOnce) {
  auto s = session();
  std::vector<float> buffer(32 * 48);
  Layout otherStage;
  ASSERT_TRUE(Layout::parse(sender() ? "pp=@1,tp=P" : "pp=@0,tp=P", setup_.mesh, otherStage).isOk());
  TensorHandle t;
  const Status status = s->tensor(buffer.data(), buffer.size() * 4, setup_.spec, otherStage, t);
  expectEverywhere(status, StatusCode::InvalidArgument, "does not hold");
}

TEST_F(SessionPerRankBadInput, WindowDiffersWithinAGroup) {
  ASSERT_TRUE(createAllGroups(*backend_).isOk());
  auto s = session();
  // Stage 0's tp rank 0 also declares what it reads of a tensor of its own: its tp group's
  // window differs; stage 1 learns it through the hand-off exchange.
  std::vector<float> extra(32 * 48 / 4, 1.0f);
  Status status = Status::ok();
  if (sender() && setup_.mesh.coordinates(worldRank())[1] == 0) {
    TensorHandle t;
    Layout rows;
    status = Layout::parse("pp=@0,tp=S0", setup_.mesh, rows);
    if (status.isOk()) status = s->tensor(extra.data(), extra.size() * 4, setup_.spec, rows, t);
  }
  std::vector<double> consumed;
  if (status.isOk()) status = recordStep(*s, setup_, 1, consumed);
  expectEverywhere(status, StatusCode::Mismatch, "");
}

TEST_F(SessionPerRankBadInput, GroupsNotCreatedIsAClearError) {
  auto s = session();  // no createGroups
  std::vector<double> consumed;
  const Status status = recordStep(*s, setup_, 1, consumed);
  EXPECT_FALSE(status.isOk());
  const bool named = status.message().find("createGroups") != std::string::npos ||
                     status.message().find("failed to prepare") != std::string::npos;
  EXPECT_TRUE(named) << status.toString();
  EXPECT_TRUE(allRanksAgree(!status.isOk() && named));
}

// With checkEveryWindow, a receiving stage that changes its declaration after warm-up is
// met by the sending stage, which re-plans: the result is still exactly the recorded one.
TEST_F(SessionPerRankBadInput, LateChangeWithCheckEveryWindowRunsCorrectly) {
  ASSERT_TRUE(createAllGroups(*backend_).isOk());
  auto s = session(true);
  std::vector<double> consumed;
  Status status = recordStep(*s, setup_, 1, consumed);
  if (status.isOk()) status = recordStep(*s, setup_, 2, consumed);
  PerRankSetup rows = setup_;
  ASSERT_TRUE(Layout::parse("pp=@1,tp=S0", setup_.mesh, *rows.consume).isOk());
  if (status.isOk()) status = recordStep(*s, rows, 3, consumed);
  EXPECT_TRUE(status.isOk()) << status.toString();
  // The same step through a fresh session that declares rows from the start.
  auto fresh = session();
  std::vector<double> expected;
  Status reference = recordStep(*fresh, rows, 3, expected);
  EXPECT_TRUE(reference.isOk()) << reference.toString();
  EXPECT_EQ(consumed, expected);
  EXPECT_TRUE(allRanksAgree(status.isOk() && reference.isOk() && consumed == expected));
}

// With checkEveryWindow, one rank of a group changing its window after warm-up makes every
// rank of both stages return Mismatch.
TEST_F(SessionPerRankBadInput, LateChangeOnOneRankWithCheckEveryWindowIsAMismatchEverywhere) {
  ASSERT_TRUE(createAllGroups(*backend_).isOk());
  auto s = session(true);
  std::vector<double> consumed;
  Status status = recordStep(*s, setup_, 1, consumed);
  ASSERT_TRUE(allRanksAgree(status.isOk())) << status.toString();
  PerRankSetup rows = setup_;
  ASSERT_TRUE(Layout::parse("pp=@1,tp=S0", setup_.mesh, *rows.consume).isOk());
  const bool changes = worldRank() == worldSize() - 1;  // one rank of stage 1
  status = recordStep(*s, changes ? rows : setup_, 2, consumed);
  expectEverywhere(status, StatusCode::Mismatch, "");
}

}  // namespace
}  // namespace chimera::testing

namespace chimera::testing {
namespace {

// A window that changes after warm-up in the default mode (no checkEveryWindow): the ranks
// that changed miss their cache while their peers run the cached program. Every rank of both
// stages must return Mismatch naming a peer, well before the backend's timeout (set short
// here, so that a regression shows as Timeout instead of a wait of minutes).
class SessionPerRankLateChange : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        setup_.parse({"late", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "", "pp=@1,tp=R", {32, 48}}).isOk());
    MpiBackendOptions options;
    options.timeoutMs = 20000;
    ASSERT_TRUE(createMpiBackend(setup_.mesh, options, backend_).isOk());
    ASSERT_TRUE(createAllGroups(*backend_).isOk());
    SessionOptions sessionOptions;
    sessionOptions.perRank = true;
    sessionOptions.topology = "bytes";  // fuses the 6 KiB hand-off whose declaration changes
    ASSERT_TRUE(Session::create(*backend_, sessionOptions, session_).isOk());
  }
  bool sender() const { return setup_.from.holds(worldRank()); }
  // Two warm-up steps of the unchanged window, then one step of `changed` on the ranks
  // `changes` selects; returns that step's status.
  Status run(const PerRankSetup& changed, bool changes) {
    std::vector<double> consumed;
    for (std::uint32_t step = 1; step <= 2; ++step) {
      const Status warm = recordStep(*session_, setup_, step, consumed);
      if (!allRanksAgree(warm.isOk())) return Status::internal("warm-up failed: " + warm.toString());
    }
    const auto start = std::chrono::steady_clock::now();
    const Status status = recordStep(*session_, changes ? changed : setup_, 3, consumed);
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return status;
  }
  // Mismatch naming a rank where `mustFail`; elsewhere that or a correct run (a rank whose
  // part of the window completed before the change showed); no rank waits for its timeout.
  void expectMismatch(const Status& status, bool mustFail = true) {
    const bool mismatch = status.code() == StatusCode::Mismatch && status.message().find("rank") != std::string::npos;
    const bool ok = (mismatch || (!mustFail && status.isOk())) && seconds_ < 15.0;
    EXPECT_TRUE(ok) << status.toString() << " after " << seconds_ << " s";
    EXPECT_TRUE(allRanksAgree(ok));
    EXPECT_FALSE(allRanksAgree(status.isOk())) << "no rank saw the change";
  }

  PerRankSetup setup_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Session> session_;
  double seconds_ = 0;
};

PerRankSetup withShape(const PerRankSetup& s, std::vector<std::int64_t> shape) {
  PerRankSetup out = s;
  out.spec.shape = std::move(shape);
  return out;
}

TEST_F(SessionPerRankLateChange, SendingStageChangesItsSize) {
  expectMismatch(run(withShape(setup_, {64, 48}), sender()));
}

TEST_F(SessionPerRankLateChange, OneRankOfTheSendingStageChangesItsSize) {
  expectMismatch(run(withShape(setup_, {64, 48}), worldRank() == 0));
}

TEST_F(SessionPerRankLateChange, SendingStageChangesItsCalls) {
  // The same tensor handed off, reduced by other calls: a new window on the sending stage.
  PerRankSetup changed = setup_;
  ASSERT_TRUE(Chain::parse("reducescatter:tp:0,allgather:tp:0,send:pp", setup_.mesh, changed.sender).isOk());
  expectMismatch(run(changed, sender()));
}

TEST_F(SessionPerRankLateChange, ReceivingStageChangesItsDeclaration) {
  PerRankSetup rows = setup_;
  ASSERT_TRUE(Layout::parse("pp=@1,tp=S0", setup_.mesh, *rows.consume).isOk());
  expectMismatch(run(rows, !sender()));
}

// A steady-state 1F1B window on each stage: stage 0 sends its forward output and receives a
// gradient (send_forward_recv_backward), stage 1 receives the activation and sends the
// gradient back (send_backward_recv_forward); `forward` is the shape stage 0 sends.
Status recordSteadyState(Session& session, const PerRankSetup& s, const TensorSpec& forward, std::uint32_t seed) {
  const int rank = worldRank();
  const bool first = s.from.holds(rank);
  const char* own = first ? "pp=@0" : "pp=@1";
  Layout partial, whole;
  CHIMERA_RETURN_IF_ERROR(Layout::parse(std::string(own) + ",tp=P", s.mesh, partial));
  CHIMERA_RETURN_IF_ERROR(Layout::parse(std::string(own) + ",tp=R", s.mesh, whole));
  const TensorSpec& sent = first ? forward : s.spec;
  const TensorSpec& received = first ? s.spec : forward;
  std::vector<std::uint64_t> out = makeBuffer(static_cast<std::size_t>(partial.localBytes(sent)) / 4, sent.dtype);
  std::vector<std::uint64_t> in = makeBuffer(static_cast<std::size_t>(whole.localBytes(received)) / 4, received.dtype);
  fillInput(out.data(), partial, sent, rank, seed);
  AxisSet tp, pp;
  CHIMERA_RETURN_IF_ERROR(s.mesh.parseAxes("tp", tp));
  CHIMERA_RETURN_IF_ERROR(s.mesh.parseAxes("pp", pp));
  TensorHandle t, summed, handed, got;
  const auto inBytes = static_cast<std::size_t>(whole.localBytes(received));
  CHIMERA_RETURN_IF_ERROR(
      session.tensor(out.data(), static_cast<std::size_t>(partial.localBytes(sent)), sent, partial, t));
  CHIMERA_RETURN_IF_ERROR(session.allReduce(t, tp, summed));
  CHIMERA_RETURN_IF_ERROR(first ? session.send(summed, pp, nullptr, 0, handed)
                                : session.sendBackward(summed, pp, nullptr, 0, handed));
  CHIMERA_RETURN_IF_ERROR(first ? session.recvBackward(received, whole, pp, in.data(), inBytes, got)
                                : session.recv(received, whole, pp, in.data(), inBytes, got));
  CHIMERA_RETURN_IF_ERROR(session.declareRead(got, whole));
  return session.flush();
}

// One rank of stage 0 changes the size of its forward output in a window that hands off in
// both directions: each rank owes its peer two hand-offs, and every rank still returns
// Mismatch.
TEST_F(SessionPerRankLateChange, OneRankChangesASizeInAWindowOfBothDirections) {
  const TensorSpec larger{{64, 48}, setup_.spec.dtype};
  for (std::uint32_t step = 1; step <= 2; ++step) {
    const Status warm = recordSteadyState(*session_, setup_, setup_.spec, step);
    ASSERT_TRUE(allRanksAgree(warm.isOk())) << warm.toString();
  }
  const auto start = std::chrono::steady_clock::now();
  const Status status = recordSteadyState(*session_, setup_, worldRank() == 0 ? larger : setup_.spec, 3);
  seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expectMismatch(status);
}

TEST_F(SessionPerRankLateChange, OneReceivingRankChangesItsDeclaration) {
  PerRankSetup rows = setup_;
  ASSERT_TRUE(Layout::parse("pp=@1,tp=S0", setup_.mesh, *rows.consume).isOk());
  // The changed rank's group (stage 1) and its peer fail; stage 0's other ranks delivered
  // their shards before stage 1's AllGather showed the change, and may return ok.
  const int changed = worldSize() - 1;
  std::vector<int> peer = setup_.mesh.coordinates(changed);
  peer[0] = 0;  // its rank on stage 0 (pp is the first axis)
  const bool affected = !sender() || worldRank() == setup_.mesh.rankOf(peer);
  expectMismatch(run(rows, worldRank() == changed), affected);
}

}  // namespace
}  // namespace chimera::testing
