// SPDX-License-Identifier: Apache-2.0
// The routed exchange of a pipeline stage's tokens ("pp=@k") on real MPI ranks: stage k
// dispatches, stage k+1 holds the experts and owns the tokens after the hand-off. Straight from
// the stage vs the hand-off then the dispatch, bit for bit against a reference every rank
// computes locally (y, grad x, grad w), the bytes each sends against the formula, on meshes where
// other stages make no call; and the errors: a malformed routing on one source rank, a wrong
// call on either stage, fail every rank involved.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend_test_support.hpp"
#include "chimera/chimera.h"
#include "chimera/mpi_backend.hpp"
#include "chimera/routed_exchange.hpp"
#include "mpi_test_util.hpp"

namespace chimera {
namespace {

using testing::allRanksAgree;
using testing::patternHash;
using testing::worldRank;
using testing::worldSize;

struct StageCase {
  std::string mesh;   // e.g. "pp=2,ep=4"
  std::string group;  // the dispatch axes
  int stage = 0;      // k
  std::int64_t experts = 0;
  int topK = 3;
  std::int64_t hidden = 5;
  std::int64_t capacity = 0;  // records per (source, destination rank) pair; 0 dropless
};

// Tokens of stage-k world rank `s`: a function of (s, index) only; rank keys with s % 3 == 1 hold
// none. Small integers and quarter weights, so that every sum below is exact in float.
struct Tokens {
  std::int64_t count = 0;
  std::vector<std::int64_t> ids;  // [T, K]
  std::vector<float> weights;     // [T, K]
  std::vector<float> x;           // [T, H]
};

Tokens tokensOf(const StageCase& c, int s) {
  Tokens t;
  t.count = s % 3 == 1 ? 0 : 2 + static_cast<std::int64_t>(patternHash(11, s, 0) % 8);
  for (std::int64_t i = 0; i < t.count; ++i) {
    std::vector<std::int64_t> chosen;
    std::uint32_t draw = 1;
    while (static_cast<int>(chosen.size()) < c.topK) {
      const std::int64_t e = patternHash(12, s, static_cast<std::size_t>(i * 64 + draw++)) % c.experts;
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int k = 0; k < c.topK; ++k) {
      t.ids.push_back(chosen[static_cast<std::size_t>(k)]);
      t.weights.push_back(0.25f * static_cast<float>(1 + patternHash(13, s, i * 8 + k) % 4));
    }
    for (std::int64_t h = 0; h < c.hidden; ++h)
      t.x.push_back(static_cast<float>(patternHash(14, s, i * 97 + h) % 16) - 8.0f);
  }
  return t;
}

float gradOfY(int owner, std::int64_t t, std::int64_t h) {
  return static_cast<float>(patternHash(15, owner, static_cast<std::size_t>(t * 131 + h)) % 8) - 4.0f;
}

// What one program produced on this rank (by role), for the reference and for the other program.
struct Outputs {
  std::vector<float> y, gradExpertOut, gradRowWeights;  // stage k+1
  std::vector<float> gradX, gradWeights;                // stage k
  RoutedStats dispatchStats;
  bool straight = false;
  bool oncePerHost = false;
};

class Stages {
 public:
  // `hosts`: the host of every world rank as the backend sees it (empty: where the ranks run).
  explicit Stages(const StageCase& c, const std::vector<int>& hosts = {}) : c_(c) {
    ok_ = Mesh::parse(c.mesh, worldSize(), mesh_).isOk() &&
          (hosts.empty() ? createMpiBackend(mesh_, backend_)
                         : detail::createMpiBackendOnHosts(mesh_, testing::testOptions(detail::MpiAlgorithm::Auto),
                                                           hosts, backend_))
              .isOk() &&
          mesh_.parseAxes("pp", pp_).isOk() && mesh_.parseAxes(c.group, group_).isOk() &&
          backend_->createGroups({&group_, 1}).isOk();
  }
  bool ok() const { return ok_; }
  Backend& backend() { return *backend_; }
  int stageOf(int r) const { return mesh_.groupIndex(r, pp_); }
  int peerOn(int r, int stage) const { return mesh_.groupPeer(r, pp_, stage); }
  int groupSize() const { return mesh_.groupSize(group_); }
  AxisSet groupAxes() const { return group_; }
  int indexInGroup(int r) const { return mesh_.groupIndex(r, group_); }
  // The last world rank of `stage`.
  int lastOn(int stage) const {
    int last = -1;
    for (int r = 0; r < worldSize(); ++r) last = stageOf(r) == stage ? r : last;
    return last;
  }
  // Dispatches this rank's side: a source its tokens (with `badId` its first id out of range), an
  // expert rank none (or `tokens` when not 0).
  Status dispatch(RoutedExchange& exchange, RoutedDispatch& handle, bool badId, std::int64_t tokens = 0) {
    if (exchange.role() != RoutedRole::Source) {
      std::vector<float> x(static_cast<std::size_t>(tokens * c_.hidden)), w(static_cast<std::size_t>(tokens * c_.topK));
      std::vector<std::int64_t> ids(static_cast<std::size_t>(tokens * c_.topK), 0);
      return exchange.dispatch(x.data(), ids.data(), w.data(), tokens, handle);
    }
    Tokens t = tokensOf(c_, worldRank());
    if (badId) {
      t = tokensOf(c_, 0);  // rank 0's tokens: at least two
      t.ids[0] = c_.experts;
    }
    return exchange.dispatch(t.x.data(), t.ids.data(), t.weights.data(), t.count, handle);
  }

  RoutedExchangeOptions options(RoutedProgram program) const {
    RoutedExchangeOptions o;
    o.numExperts = c_.experts;
    o.topK = c_.topK;
    o.hidden = c_.hidden;
    o.group = group_;
    o.tokenLayout = "pp=@" + std::to_string(c_.stage);
    o.program = program;
    o.capacity = c_.capacity;
    return o;
  }

  // The rows an expert rank of stage k+1 receives: (global expert, source rank, token, weight),
  // grouped by local expert, then source group index, then token order.
  struct Row {
    std::int64_t expert;
    int src;
    std::int64_t token;
  };
  // Whether (token i, k) of `t` survives the capacity of its destination rank: records open in
  // token order, one per (token, destination rank) with `oncePerRank`, else per (token, expert).
  bool kept(const Tokens& t, bool oncePerRank, std::int64_t i, int k) const {
    return testing::keptByCapacity(t.ids, c_.topK, c_.experts / groupSize(), groupSize(), c_.capacity, oncePerRank, 0,
                                   i, k);
  }

  std::vector<Row> expectedRows(bool oncePerRank) const {
    const int R = groupSize();
    const std::int64_t perRank = c_.experts / R;
    const int me = mesh_.groupIndex(worldRank(), group_);
    std::vector<Row> rows;
    for (int g = 0; g < R; ++g) {
      const int src = peerOn(mesh_.groupPeer(worldRank(), group_, g), c_.stage);
      const Tokens t = tokensOf(c_, src);
      for (std::int64_t i = 0; i < t.count; ++i) {
        for (int k = 0; k < c_.topK; ++k) {
          const std::int64_t e = t.ids[static_cast<std::size_t>(i * c_.topK + k)];
          if (e / perRank == me && kept(t, oncePerRank, i, k)) rows.push_back({e, src, i});
        }
      }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.expert < b.expert; });
    return rows;
  }

  // Runs every call of this rank's role and checks each output against the reference.
  bool run(RoutedProgram program, Outputs& out) {
    std::unique_ptr<RoutedExchange> exchange;
    if (!allRanksAgree(RoutedExchange::create(*backend_, options(program), exchange).isOk())) return false;
    out.straight = exchange->straightFromStage();
    out.oncePerHost = exchange->oncePerHost();
    const bool once = exchange->oncePerRank();
    const int me = worldRank();
    const std::int64_t H = c_.hidden;
    const int K = c_.topK;
    bool ok = true;
    RoutedDispatch handle;
    if (exchange->role() == RoutedRole::Source) {
      const Tokens t = tokensOf(c_, me);
      Status st = exchange->dispatch(t.x.data(), t.ids.data(), t.weights.data(), t.count, handle);
      EXPECT_TRUE(st.isOk()) << st.toString();
      ok = st.isOk() && handle.rows() == 0 && handle.tokens() == t.count;
      out.dispatchStats = handle.stats();
      out.gradX.assign(static_cast<std::size_t>(t.count * H), -1.0f);
      out.gradWeights.assign(static_cast<std::size_t>(t.count * K), -1.0f);
      st = exchange->dispatchBackward(nullptr, nullptr, handle, out.gradX.data(), out.gradWeights.data());
      EXPECT_TRUE(st.isOk()) << st.toString();
      ok = ok && st.isOk();
      // grad x[t] = sum over kept k of (2 x[t] + id_k), grad w[t, k] = id_k, or 0 where dropped (the
      // expert ranks' gradients below).
      for (std::int64_t i = 0; ok && i < t.count; ++i) {
        for (std::int64_t h = 0; h < H; ++h) {
          float ref = 0;
          for (int k = 0; k < K; ++k) {
            if (kept(t, once, i, k))
              ref += t.x[static_cast<std::size_t>(i * H + h)] * 2 +
                     static_cast<float>(t.ids[static_cast<std::size_t>(i * K + k)]);
          }
          ok = ok && out.gradX[static_cast<std::size_t>(i * H + h)] == ref;
        }
        for (int k = 0; k < K; ++k) {
          const auto p = static_cast<std::size_t>(i * K + k);
          ok = ok && out.gradWeights[p] == (kept(t, once, i, k) ? static_cast<float>(t.ids[p]) : 0.0f);
        }
      }
      EXPECT_TRUE(ok) << "stage " << c_.stage << " rank " << me << ": gradients";
      return ok;
    }
    if (exchange->role() != RoutedRole::Experts) return true;  // another stage: no call
    Status st = exchange->dispatch(nullptr, nullptr, nullptr, 0, handle);
    EXPECT_TRUE(st.isOk()) << st.toString();
    if (!st.isOk()) return false;
    out.dispatchStats = handle.stats();
    const int source = peerOn(me, c_.stage);
    const Tokens mine = tokensOf(c_, source);
    const std::int64_t rows = handle.rows();
    const auto expected = expectedRows(once);
    ok = handle.tokens() == mine.count && static_cast<std::size_t>(rows) == expected.size();
    EXPECT_TRUE(ok) << "rows " << rows << " vs " << expected.size() << ", tokens " << handle.tokens() << " vs "
                    << mine.count;
    std::vector<float> recvX(static_cast<std::size_t>(rows * H)), recvW(static_cast<std::size_t>(rows));
    std::vector<std::int64_t> recvE(static_cast<std::size_t>(rows));
    ok = ok && exchange->receive(handle, recvX.data(), recvE.data(), recvW.data()).isOk();
    for (std::size_t r = 0; ok && r < expected.size(); ++r) {
      const Tokens t = tokensOf(c_, expected[r].src);
      const std::size_t p = static_cast<std::size_t>(expected[r].token * K);
      const auto k = std::find(t.ids.begin() + p, t.ids.begin() + p + K, expected[r].expert) - t.ids.begin();
      ok = recvE[r] == expected[r].expert && recvW[r] == t.weights[static_cast<std::size_t>(k)];
      for (std::int64_t h = 0; h < H; ++h)
        ok = ok && recvX[r * H + h] == t.x[static_cast<std::size_t>(expected[r].token * H + h)];
      EXPECT_TRUE(ok) << "row " << r;
    }
    // The expert: row * (id + 1). y[t] = sum_k w * x[t] * (id_k + 1) on the owner.
    std::vector<float> expertOut(recvX.size());
    for (std::size_t r = 0; r < recvE.size(); ++r)
      for (std::int64_t h = 0; h < H; ++h) expertOut[r * H + h] = recvX[r * H + h] * static_cast<float>(recvE[r] + 1);
    out.y.assign(static_cast<std::size_t>(mine.count * H), -1.0f);
    st = exchange->combine(expertOut.data(), recvW.data(), handle, out.y.data());
    EXPECT_TRUE(st.isOk()) << st.toString();
    ok = ok && st.isOk();
    for (std::int64_t i = 0; ok && i < mine.count; ++i) {
      for (std::int64_t h = 0; h < H; ++h) {
        float ref = 0;
        for (int k = 0; k < K; ++k) {
          const auto p = static_cast<std::size_t>(i * K + k);
          if (kept(mine, once, i, k))
            ref +=
                mine.weights[p] * (mine.x[static_cast<std::size_t>(i * H + h)] * static_cast<float>(mine.ids[p] + 1));
        }
        ok = ok && out.y[static_cast<std::size_t>(i * H + h)] == ref;
      }
    }
    EXPECT_TRUE(ok) << "combine on rank " << me;
    // Combine backward: grad expert_out = w dy, grad w_row = <dy, expert_out row>.
    std::vector<float> dy(static_cast<std::size_t>(mine.count * H));
    for (std::int64_t i = 0; i < mine.count; ++i)
      for (std::int64_t h = 0; h < H; ++h) dy[static_cast<std::size_t>(i * H + h)] = gradOfY(me, i, h);
    out.gradExpertOut.assign(recvX.size(), -1.0f);
    out.gradRowWeights.assign(recvW.size(), -1.0f);
    st = exchange->combineBackward(dy.data(), expertOut.data(), recvW.data(), handle, out.gradExpertOut.data(),
                                   out.gradRowWeights.data());
    EXPECT_TRUE(st.isOk()) << st.toString();
    ok = ok && st.isOk();
    for (std::size_t r = 0; ok && r < expected.size(); ++r) {
      const int owner = peerOn(expected[r].src, c_.stage + 1);
      float dot = 0;
      for (std::int64_t h = 0; h < H; ++h) {
        const float g = gradOfY(owner, expected[r].token, h);
        ok = ok && out.gradExpertOut[r * H + h] == recvW[r] * g;
        dot += g * expertOut[r * H + h];
      }
      ok = ok && out.gradRowWeights[r] == dot;
    }
    EXPECT_TRUE(ok) << "combine backward on rank " << me;
    // Dispatch backward of (grad recv_x = 2 row + id, grad recv_weight = id): the source sums them.
    std::vector<float> gradRecv(recvX.size()), gradW(recvW.size());
    for (std::size_t r = 0; r < recvE.size(); ++r) {
      for (std::int64_t h = 0; h < H; ++h) gradRecv[r * H + h] = recvX[r * H + h] * 2 + static_cast<float>(recvE[r]);
      gradW[r] = static_cast<float>(recvE[r]);
    }
    st = exchange->dispatchBackward(gradRecv.data(), gradW.data(), handle, nullptr, nullptr);
    EXPECT_TRUE(st.isOk()) << st.toString();
    return ok && st.isOk();
  }

 private:
  StageCase c_;
  Mesh mesh_;
  std::unique_ptr<Backend> backend_;
  AxisSet pp_, group_;
  bool ok_ = false;
};

// The meshes of the world: two stages over ep, two over folded ep+tp, and four stages of which
// only stages 1 and 2 take part.
std::vector<StageCase> stageCases() {
  const int n = worldSize();
  std::vector<StageCase> cases;
  // At least as many experts as the top-k of 3 (two ranks: one stage rank holds all three).
  if (n % 2 == 0) cases.push_back({"pp=2,ep=" + std::to_string(n / 2), "ep", 0, std::max(3, n), 3, 5});
  if (n % 4 == 0) {
    cases.push_back({"pp=2,tp=2,ep=" + std::to_string(n / 4), "ep+tp", 0, 2 * (n / 2), 3, 5});
    cases.push_back({"pp=4,ep=" + std::to_string(n / 4), "ep", 1, 4 * (n / 4), 3, 5});
  }
  return cases;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// Straight from the stage and the hand-off then the dispatch (per (token, expert) records and the
// Planned decision's) give the reference's values, and each other's, bit for bit.
TEST(RoutedStage, StraightEqualsHandOffBitForBit) {
  for (const StageCase& c : stageCases()) {
    Stages s(c);
    ASSERT_TRUE(allRanksAgree(s.ok())) << c.mesh;
    Outputs straight, handOff, planned;
    EXPECT_TRUE(allRanksAgree(s.run(RoutedProgram::Fused, straight))) << c.mesh << " straight";
    EXPECT_TRUE(allRanksAgree(s.run(RoutedProgram::PerExpert, handOff))) << c.mesh << " hand-off";
    EXPECT_TRUE(allRanksAgree(s.run(RoutedProgram::Planned, planned))) << c.mesh << " planned";
    EXPECT_TRUE(straight.straight);
    EXPECT_FALSE(handOff.straight);
    const bool same = sameBits(straight.y, handOff.y) && sameBits(straight.gradX, handOff.gradX) &&
                      sameBits(straight.gradWeights, handOff.gradWeights) &&
                      sameBits(straight.gradExpertOut, handOff.gradExpertOut) &&
                      sameBits(straight.gradRowWeights, handOff.gradRowWeights) && sameBits(planned.y, straight.y) &&
                      sameBits(planned.gradX, straight.gradX);
    EXPECT_TRUE(allRanksAgree(same)) << c.mesh;
  }
}

// Rows of 1024 elements so that the plan is priced on bandwidth (4096 planned tokens).
const StageCase kAcrossHosts{"pp=2,ep=4", "ep", 0, 64, 8, 1024};

// Runs the Planned and the straight (Fused) program on `s`: each gives the reference's values
// (Stages::run), and the two are equal bit for bit.
void runPlannedAndStraight(Stages& s, const std::string& name, Outputs& planned, Outputs& straight) {
  EXPECT_TRUE(allRanksAgree(s.run(RoutedProgram::Planned, planned))) << name << " planned";
  EXPECT_TRUE(allRanksAgree(s.run(RoutedProgram::Fused, straight))) << name << " straight";
  EXPECT_TRUE(allRanksAgree(straight.straight && !straight.oncePerHost)) << name;
  const bool same = sameBits(planned.y, straight.y) && sameBits(planned.gradX, straight.gradX) &&
                    sameBits(planned.gradWeights, straight.gradWeights) &&
                    sameBits(planned.gradExpertOut, straight.gradExpertOut) &&
                    sameBits(planned.gradRowWeights, straight.gradRowWeights);
  EXPECT_TRUE(allRanksAgree(same)) << name;
}

// Where the next stage's group spans hosts (faked placements), the Planned program hands the
// tokens off and dispatches once per destination host on stage k+1 (as the planner prices it:
// tests/unit/routed_plan_test.cpp); every output is the reference's, and the straight program's,
// bit for bit. Where stage k+1 sits on one host nothing changes.
TEST(RoutedStage, AfterTheHandOffTheNextStageDispatchesOncePerHost) {
  if (worldSize() != 8) GTEST_SKIP() << "the placements are of 8 ranks";
  const struct {
    const char* name;
    std::vector<int> hosts;
    bool perHost;  // stage 1's dispatch once per host
  } placements[] = {{"round-robin", {0, 1, 0, 1, 0, 1, 0, 1}, true},
                    {"pairs", {0, 0, 1, 1, 0, 0, 1, 1}, true},
                    {"three hosts", {0, 0, 0, 0, 1, 1, 2, 2}, true},
                    {"blocks", {0, 0, 0, 0, 1, 1, 1, 1}, false}};
  for (const auto& p : placements) {
    Stages s(kAcrossHosts, p.hosts);
    ASSERT_TRUE(allRanksAgree(s.ok())) << p.name;
    Outputs planned, straight;
    runPlannedAndStraight(s, p.name, planned, straight);
    const bool stage1 = s.stageOf(worldRank()) == 1;
    EXPECT_TRUE(allRanksAgree(planned.oncePerHost == (p.perHost && stage1))) << p.name;
    if (p.perHost) {
      EXPECT_FALSE(planned.straight) << p.name;
      continue;
    }
    // The stages in blocks: everything stage 0 sends crosses to stage 1's host but, straight, its
    // words to the 3 other sources of its group; stage 1's dispatch sends across only its
    // verdicts (one word per source straight, one 8-byte word back to its peer after the hand-off).
    bool across = true;
    for (const Outputs* o : {&planned, &straight}) {
      const RoutedStats& d = o->dispatchStats;
      across = across && (stage1 ? d.crossHostBytes == (o->straight ? 4u * 4u : 8u)
                                 : d.crossHostBytes + (o->straight ? 3u * 4u : 0u) == d.bytesSent());
    }
    EXPECT_TRUE(allRanksAgree(across)) << p.name << " rank " << worldRank() << ": across hosts "
                                       << planned.dispatchStats.crossHostBytes << " of "
                                       << planned.dispatchStats.bytesSent() << " planned, "
                                       << straight.dispatchStats.crossHostBytes << " of "
                                       << straight.dispatchStats.bytesSent() << " straight";
  }
}

// The same where the ranks run (the multi-host tier runs it on the rig's placements): whatever
// the launch's model decides, the outputs are the reference's and the straight program's bit for
// bit, and only a stage-1 rank whose group spans hosts runs once per host.
TEST(RoutedStage, AfterTheHandOffTheNextStageDispatchesOncePerHostWhereTheRanksRun) {
  if (worldSize() != 8) GTEST_SKIP() << "the mesh is of 8 ranks";
  Stages s(kAcrossHosts);
  ASSERT_TRUE(allRanksAgree(s.ok()));
  Outputs planned, straight;
  runPlannedAndStraight(s, "where the ranks run", planned, straight);
  const std::vector<int> hosts = s.backend().hostOfRank();
  const std::vector<int> group = s.backend().mesh().groupRanks(worldRank(), s.groupAxes());
  const bool spans = std::any_of(group.begin(), group.end(), [&](int r) {
    return hosts[static_cast<std::size_t>(r)] != hosts[static_cast<std::size_t>(group.front())];
  });
  EXPECT_TRUE(allRanksAgree(!planned.oncePerHost || (s.stageOf(worldRank()) == 1 && spans)));
}

// The bytes each side sends, as docs/moe.md section 3 says: straight, a stage-k rank sends every
// (token, destination rank) pair's row across the stage link (D T H b) plus its headers and the
// routing to its peer; after the hand-off it sends T H b across and its peer the off-rank pairs
// within stage k+1 (D (R-1)/R T H b on average).
TEST(RoutedStage, BytesAsTheModelSays) {
  for (const StageCase& c : stageCases()) {
    Stages s(c);
    ASSERT_TRUE(allRanksAgree(s.ok())) << c.mesh;
    Outputs straight, handOff;
    ASSERT_TRUE(allRanksAgree(s.run(RoutedProgram::Fused, straight)));
    ASSERT_TRUE(allRanksAgree(s.run(RoutedProgram::PerExpert, handOff)));
    const int me = worldRank();
    const int R = s.groupSize();
    const std::int64_t perRank = c.experts / R;
    const std::uint64_t row = static_cast<std::uint64_t>(c.hidden) * 4;
    const std::uint64_t routing = 8 + 12;  // per token and k: an int64 id and an f32 weight
    // A record's slot: a local expert id (int32; none with one expert per rank) and an f32 weight.
    const std::uint64_t slot = (perRank == 1 ? 0 : 4) + 4;
    const std::uint64_t words = 4 * static_cast<std::uint64_t>(R);  // a 4-byte word per block
    bool ok = true;
    if (s.stageOf(me) == c.stage) {
      const Tokens t = tokensOf(c, me);
      std::uint64_t pairs = 0;
      for (std::int64_t i = 0; i < t.count; ++i) {
        std::vector<bool> seen(static_cast<std::size_t>(R), false);
        for (int k = 0; k < c.topK; ++k) {
          const auto d = static_cast<std::size_t>(t.ids[static_cast<std::size_t>(i * c.topK + k)] / perRank);
          pairs += seen[d] ? 0 : 1;
          seen[d] = true;
        }
      }
      const auto T = static_cast<std::uint64_t>(t.count);
      const auto slots = static_cast<std::uint64_t>(std::min<std::int64_t>(c.topK, perRank));
      const RoutedStats& f = straight.dispatchStats;
      EXPECT_EQ(f.payloadBytes, pairs * row);
      EXPECT_EQ(f.headerBytes, pairs * slots * slot + words + 8 + T * c.topK * (routing - 8));
      // One round of words (counts to the destinations, verdicts back, failures among the
      // sources), then the records.
      EXPECT_EQ(f.rounds, 2);
      EXPECT_EQ(f.countBytes, 8u * R);  // 4 to each destination and source, and T to the peer
      const RoutedStats& h = handOff.dispatchStats;
      EXPECT_EQ(h.payloadBytes, T * row);
      EXPECT_EQ(h.headerBytes, 8 + T * c.topK * (routing - 8));
      ok = f.payloadBytes == pairs * row && h.payloadBytes == T * row &&
           f.headerBytes == pairs * slots * slot + words + 8 + T * c.topK * (routing - 8) && f.rounds == 2 &&
           f.countBytes == 8u * R;
    } else if (s.stageOf(me) == c.stage + 1) {
      // After the hand-off this rank dispatches its peer's tokens per (token, expert) within its
      // stage: the pairs whose expert is on another rank of its group.
      const Tokens t = tokensOf(c, s.peerOn(me, c.stage));
      std::uint64_t offRank = 0;
      for (std::int64_t id : t.ids) offRank += id / perRank != s.indexInGroup(me) ? 1 : 0;
      EXPECT_EQ(handOff.dispatchStats.payloadBytes, offRank * row);
      ok = handOff.dispatchStats.payloadBytes == offRank * row;
      EXPECT_EQ(straight.dispatchStats.payloadBytes, 0u);    // the experts' stage sends no rows in the dispatch
      EXPECT_EQ(straight.dispatchStats.countBytes, 4u * R);  // a verdict to each source
      EXPECT_EQ(straight.dispatchStats.rounds, 2);
      ok = ok && straight.dispatchStats.payloadBytes == 0 && straight.dispatchStats.countBytes == 4u * R &&
           straight.dispatchStats.rounds == 2;
    }
    EXPECT_TRUE(allRanksAgree(ok)) << c.mesh;
  }
}

// Whether `st` is the verdict of a failure on world rank `failed`: InvalidArgument there,
// Mismatch on every other rank of stages k and k+1 (the ranks of other stages made no call).
bool failedAt(const Stages& s, const StageCase& c, int failed, const Status& st, const std::string& context) {
  const int stage = s.stageOf(worldRank());
  bool ok = true;
  if (worldRank() == failed) {
    ok = st.code() == StatusCode::InvalidArgument;
  } else if (stage == c.stage || stage == c.stage + 1) {
    ok = st.code() == StatusCode::Mismatch;
  }
  EXPECT_TRUE(ok) << context << " on rank " << worldRank() << ": " << st.toString();
  return ok;
}

// An expert id out of range on one stage-k rank fails every rank of both stages (InvalidArgument
// there, Mismatch elsewhere), in both programs, within a fraction of the timeout.
TEST(RoutedStage, MalformedRoutingOnOneSourceFailsEveryRank) {
  for (const StageCase& c : stageCases()) {
    Stages s(c);
    ASSERT_TRUE(allRanksAgree(s.ok())) << c.mesh;
    const int bad = s.lastOn(c.stage);
    for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert}) {
      std::unique_ptr<RoutedExchange> exchange;
      ASSERT_TRUE(allRanksAgree(RoutedExchange::create(s.backend(), s.options(program), exchange).isOk()));
      const std::string context = c.mesh + (program == RoutedProgram::Fused ? " straight" : " hand-off");
      bool ok = true;
      if (exchange->role() != RoutedRole::Outside) {  // other stages make no call
        RoutedDispatch handle;
        const auto start = std::chrono::steady_clock::now();
        const Status st = s.dispatch(*exchange, handle, worldRank() == bad);
        const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        ok = failedAt(s, c, bad, st, context) && seconds < 5.0;
        EXPECT_LT(seconds, 5.0) << context << ": waited for the timeout";
      }
      EXPECT_TRUE(allRanksAgree(ok)) << context;
    }
  }
}

// One stage-k rank dispatches on another exchange (other hidden size, so other record sizes)
// than every other rank: the words of the first round tell both sides, which then size its
// blocks alike, and every rank of both stages fails with Mismatch, in both programs, within a
// fraction of the timeout, leaving no message behind (the next dispatch on the right exchange
// runs clean).
TEST(RoutedStage, ADispatchOnAnotherExchangeFailsEveryRank) {
  int tested = 0;
  for (const StageCase& c : stageCases()) {
    Stages s(c);
    ASSERT_TRUE(allRanksAgree(s.ok())) << c.mesh;
    int stray = -1;  // a stage-k rank with tokens, so that its records are of another size
    for (int r = worldSize() - 1; r >= 0; --r) stray = s.stageOf(r) == c.stage && r % 3 != 1 ? r : stray;
    if (stray < 0) continue;  // every rank of stage k here holds none (tokensOf)
    ++tested;
    StageCase wider = c;
    wider.hidden = c.hidden + 1;
    Stages other(wider);
    ASSERT_TRUE(allRanksAgree(other.ok())) << c.mesh;
    for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert}) {
      const std::string context = c.mesh + (program == RoutedProgram::Fused ? " straight" : " hand-off");
      std::unique_ptr<RoutedExchange> exchange, another;
      ASSERT_TRUE(allRanksAgree(RoutedExchange::create(s.backend(), s.options(program), exchange).isOk()));
      ASSERT_TRUE(allRanksAgree(RoutedExchange::create(s.backend(), other.options(program), another).isOk()));
      bool ok = true;
      if (exchange->role() != RoutedRole::Outside) {
        RoutedDispatch handle;
        const auto start = std::chrono::steady_clock::now();
        const Status st =
            worldRank() == stray ? other.dispatch(*another, handle, false) : s.dispatch(*exchange, handle, false);
        const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        ok = st.code() == StatusCode::Mismatch && seconds < 5.0;
        EXPECT_TRUE(ok) << context << " on rank " << worldRank() << ": " << st.toString() << " after " << seconds
                        << " s";
        const Status again = s.dispatch(*exchange, handle, false);
        EXPECT_TRUE(again.isOk()) << context << ", the next dispatch: " << again.toString();
        ok = ok && again.isOk();
      }
      EXPECT_TRUE(allRanksAgree(ok)) << context;
    }
  }
  EXPECT_GT(tested, 0) << "no stage-k rank held tokens in any case, so nothing was tested";
}

// Capacity mode with a stage's tokens: at most C records per (source, destination rank) pair, in
// token order, the rest dropped (0 in y and in both gradients), straight and after the hand-off,
// each bit for bit against the reference; with CapacityOverflow::Error every rank of both stages
// fails, within a fraction of the timeout.
TEST(RoutedStage, CapacityDropsInTokenOrderOrFailsEveryRank) {
  std::uint64_t droppedInAll = 0;
  for (StageCase c : stageCases()) {
    c.capacity = 2;
    Stages s(c);
    ASSERT_TRUE(allRanksAgree(s.ok())) << c.mesh;
    for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert, RoutedProgram::Planned}) {
      Outputs out;
      EXPECT_TRUE(allRanksAgree(s.run(program, out))) << c.mesh << " program " << static_cast<int>(program);
      const std::uint64_t dropped = testing::sumOverRanks(out.dispatchStats.droppedTokens);
      droppedInAll += dropped;
      if (program == RoutedProgram::Planned) continue;
      // The same routing with CapacityOverflow::Error: every rank of both stages fails where
      // something was dropped above, none where nothing was.
      RoutedExchangeOptions options = s.options(program);
      options.overflow = CapacityOverflow::Error;
      std::unique_ptr<RoutedExchange> exchange;
      ASSERT_TRUE(allRanksAgree(RoutedExchange::create(s.backend(), options, exchange).isOk()));
      bool ok = true;
      if (exchange->role() != RoutedRole::Outside) {
        RoutedDispatch handle;
        const auto start = std::chrono::steady_clock::now();
        const Status st = s.dispatch(*exchange, handle, false);
        const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        ok = (dropped == 0 ? st.isOk()
                           : st.code() == StatusCode::InvalidArgument || st.code() == StatusCode::Mismatch) &&
             seconds < 5.0;
        EXPECT_TRUE(ok) << c.mesh << " rank " << worldRank() << ", " << dropped
                        << " dropped with Drop: " << st.toString() << " after " << seconds << " s";
      }
      EXPECT_TRUE(allRanksAgree(ok)) << c.mesh;
    }
  }
  EXPECT_GT(droppedInAll, 0u) << "the capacity dropped nothing in any case, so tested nothing";
}

// A call outside a rank's role: tokens passed on the experts' stage fail every rank of both
// stages; a rank of another stage, or stage k calling combine, fails alone without communicating;
// grad x asked of the experts' stage fails it and the stage-k ranks that wait on it.
TEST(RoutedStage, WrongCallsAreClearErrors) {
  for (const StageCase& c : stageCases()) {
    Stages s(c);
    ASSERT_TRUE(allRanksAgree(s.ok())) << c.mesh;
    const int wrong = s.lastOn(c.stage + 1);
    for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert}) {
      const std::string context = c.mesh + (program == RoutedProgram::Fused ? " straight" : " hand-off");
      std::unique_ptr<RoutedExchange> exchange;
      ASSERT_TRUE(allRanksAgree(RoutedExchange::create(s.backend(), s.options(program), exchange).isOk()));
      const RoutedRole role = exchange->role();
      RoutedDispatch handle;
      if (role == RoutedRole::Outside) {
        const Status st = s.dispatch(*exchange, handle, false);
        EXPECT_EQ(st.code(), StatusCode::InvalidArgument) << st.toString();
        EXPECT_NE(st.message().find("makes no call"), std::string::npos) << st.toString();
        EXPECT_TRUE(allRanksAgree(st.code() == StatusCode::InvalidArgument)) << context;
        continue;
      }
      // Tokens on the experts' stage.
      bool ok = failedAt(s, c, wrong, s.dispatch(*exchange, handle, false, worldRank() == wrong ? 2 : 0),
                         context + ", tokens on stage k+1");
      // A clean dispatch, then stage k calls combine: its own error, no communication.
      Status st = s.dispatch(*exchange, handle, false);
      EXPECT_TRUE(st.isOk()) << st.toString();
      ok = ok && st.isOk();
      const auto T = static_cast<std::size_t>(handle.tokens());
      std::vector<float> gradX(T * c.hidden + 1), gradW(T * c.topK + 1), y(T * c.hidden + 1);  // never null
      if (role == RoutedRole::Source) {
        st = exchange->combine(nullptr, nullptr, handle, y.data());
        EXPECT_EQ(st.code(), StatusCode::InvalidArgument) << st.toString();
        EXPECT_NE(st.message().find("dispatch and dispatchBackward only"), std::string::npos) << st.toString();
        ok = ok && st.code() == StatusCode::InvalidArgument;
      }
      // grad x asked of one expert rank: it fails, and so does every stage-k rank it returns rows to.
      if (role == RoutedRole::Source) {
        st = exchange->dispatchBackward(nullptr, nullptr, handle, gradX.data(), gradW.data());
        EXPECT_EQ(st.code(), StatusCode::Mismatch) << context << ": " << st.toString();
        ok = ok && st.code() == StatusCode::Mismatch;
      } else {
        std::vector<float> gradRecv(static_cast<std::size_t>(handle.rows() * c.hidden), 1.0f);
        st = exchange->dispatchBackward(gradRecv.data(), nullptr, handle, worldRank() == wrong ? gradX.data() : nullptr,
                                        nullptr);
        const bool mine =
            worldRank() == wrong ? st.code() == StatusCode::InvalidArgument : st.code() != StatusCode::InvalidArgument;
        EXPECT_TRUE(mine) << context << ": " << st.toString();
        ok = ok && mine;
      }
      EXPECT_TRUE(allRanksAgree(ok)) << context;
    }
  }
}

// The C API on pp=2,ep=N/2: stage 0 routes every token to experts (rank + 1) % E and rank % E with
// weights 1 and 2; stage 1 learns the tokens from its handle, the identity expert gives y = 3 x
// of its peer's tokens, and the rows' gradients (the rows themselves) give stage 0 grad x = 2 x.
TEST(RoutedStage, CApi) {
  if (worldSize() % 2 != 0) GTEST_SKIP() << "needs an even world";
  const int half = worldSize() / 2;
  const std::string mesh = "pp=2,ep=" + std::to_string(half);
  chimeraComm_t comm = nullptr;
  ASSERT_TRUE(allRanksAgree(chimeraCommInitMpi(&comm, mesh.c_str()) == chimeraSuccess));
  ASSERT_TRUE(allRanksAgree(chimeraCommCreateGroups(comm, "ep") == chimeraSuccess));
  chimeraRoutedOptions_t options = CHIMERA_ROUTED_OPTIONS_INITIALIZER;
  options.numExperts = 2 * half;
  options.topK = 2;
  options.hidden = 3;
  options.datatype = chimeraFloat32;
  options.weightType = chimeraFloat32;
  options.group = "ep";
  options.tokenLayout = "pp=@0";
  chimeraRoutedExchange_t exchange = nullptr;
  ASSERT_TRUE(allRanksAgree(chimeraRoutedExchangeCreate(comm, &options, &exchange) == chimeraSuccess));
  const int me = worldRank();
  const int source = me % half;  // this rank, or its peer on stage 0
  const std::int64_t T = 4;
  std::vector<float> x(T * 3);
  for (std::int64_t i = 0; i < T * 3; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(source * 100 + i);
  bool ok = true;
  chimeraRoutedHandle_t dispatch = nullptr;
  std::int64_t rows = 0, tokens = -1;
  if (me < half) {
    std::vector<float> weights, gradX(T * 3), gradW(T * 2);
    std::vector<std::int64_t> ids;
    for (std::int64_t t = 0; t < T; ++t) {
      ids.insert(ids.end(), {(me + 1) % (2 * half), me});
      weights.insert(weights.end(), {1.0f, 2.0f});
    }
    ok = chimeraRoutedDispatch(exchange, x.data(), ids.data(), weights.data(), T, &dispatch, &rows) == chimeraSuccess;
    ok = ok && rows == 0 &&
         chimeraRoutedDispatchBackward(exchange, dispatch, nullptr, nullptr, gradX.data(), gradW.data()) ==
             chimeraSuccess;
    for (std::size_t i = 0; ok && i < gradX.size(); ++i) ok = gradX[i] == 2 * x[i];
  } else {
    ok = chimeraRoutedDispatch(exchange, nullptr, nullptr, nullptr, 0, &dispatch, &rows) == chimeraSuccess;
    ok = ok && chimeraRoutedHandleTokens(dispatch, &tokens) == chimeraSuccess && tokens == T;
    std::vector<float> recvX(static_cast<std::size_t>(rows * 3)), recvW(static_cast<std::size_t>(rows)), y(T * 3);
    ok = ok && chimeraRoutedReceive(exchange, dispatch, recvX.data(), nullptr, recvW.data(), nullptr) == chimeraSuccess;
    ok = ok && chimeraRoutedCombine(exchange, dispatch, recvX.data(), recvW.data(), y.data()) == chimeraSuccess;
    for (std::size_t i = 0; ok && i < y.size(); ++i) ok = y[i] == 3 * x[i];
    ok = ok &&
         chimeraRoutedDispatchBackward(exchange, dispatch, recvX.data(), nullptr, nullptr, nullptr) == chimeraSuccess;
  }
  EXPECT_TRUE(ok) << chimeraGetLastError();
  EXPECT_TRUE(allRanksAgree(ok));
  chimeraRoutedHandleDestroy(dispatch);
  chimeraRoutedExchangeDestroy(exchange);
  chimeraCommDestroy(comm);
}

}  // namespace
}  // namespace chimera
