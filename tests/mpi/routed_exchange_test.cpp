// SPDX-License-Identifier: Apache-2.0
// The routed exchange on real MPI ranks: dispatch, receive, combine and both backwards against
// a reference every rank computes locally from (seed, rank, index), for flat and folded
// groups, owned / replicated / partial tokens, uneven, skewed, one-expert and empty routings,
// capacity mode, 16-bit rows, the bytes each program sends, and the errors of mismatched
// routing metadata.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "chimera/chimera.h"
#include "chimera/mpi_backend.hpp"
#include "chimera/routed_exchange.hpp"
#include "common/half.hpp"
#include "mpi_test_util.hpp"

namespace chimera {
namespace {

using testing::allRanksAgree;
using testing::patternHash;
using testing::sumOverRanks;
using testing::worldRank;
using testing::worldSize;

enum class Routing { Uniform, Skewed, OneExpert };

struct Case {
  std::string mesh;    // "ep=8", "tp=2,ep=4"
  std::string group;   // dispatch axes
  std::string layout;  // token layout
  std::int64_t experts = 8;
  int topK = 2;
  std::int64_t hidden = 6;
  Routing routing = Routing::Uniform;
  RoutedProgram program = RoutedProgram::Fused;
  std::int64_t capacity = 0;
  std::uint32_t seed = 1;
  DataType dtype = DataType::F32;  // rows and weights
};

// 16-bit cases draw smaller values, so that every product, sum and dot product the exchange
// and the reference form is exact in the row type and the float reference still holds bit for bit.
bool sixteenBit(DataType dtype) { return dtype == DataType::F16 || dtype == DataType::BF16; }

// Values as the exchange reads them: `v` in `dtype`.
std::vector<std::byte> encode(const std::vector<float>& v, DataType dtype) {
  std::vector<std::byte> out(v.size() * dataTypeSize(dtype));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DataType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const std::uint16_t bits = dtype == DataType::BF16 ? detail::floatToBf16(v[i]) : detail::floatToHalf(v[i]);
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

std::vector<float> decode(const std::vector<std::byte>& b, DataType dtype) {
  std::vector<float> out(b.size() / dataTypeSize(dtype));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (dtype == DataType::F32) {
      std::memcpy(&out[i], b.data() + 4 * i, 4);
    } else {
      std::uint16_t bits = 0;
      std::memcpy(&bits, b.data() + 2 * i, 2);
      out[i] = dtype == DataType::BF16 ? detail::bf16ToFloat(bits) : detail::halfToFloat(bits);
    }
  }
  return out;
}

// The tokens of one source: the same on every replica of the token axes ("tp=R", "tp=P").
struct Source {
  std::int64_t tokens = 0;
  std::vector<std::int64_t> ids;  // [T, K]
  std::vector<float> weights;     // [T, K]
  std::vector<float> x;           // [T, H], the full (reduced) value
};

class World {
 public:
  World(const Case& c) : c_(c) {
    ok_ = Mesh::parse(c.mesh, worldSize(), mesh_).isOk() && createMpiBackend(mesh_, backend_).isOk();
    if (!ok_) return;
    group_ = mesh_.allAxes();
    if (!c.group.empty()) ok_ = mesh_.parseAxes(c.group, group_).isOk();
    if (!c.layout.empty()) {
      const std::string axes = c.layout.substr(0, c.layout.find('='));
      ok_ = ok_ && mesh_.parseAxes(axes, tokenAxes_).isOk();
      placement_ = c.layout.back();
    }
  }
  bool ok() const { return ok_; }
  // The next step's routing: the same mesh and options, other tokens and experts.
  void reroute(Routing routing, std::uint32_t seed) {
    c_.routing = routing;
    c_.seed = seed;
  }
  Backend& backend() { return *backend_; }
  const Mesh& mesh() const { return mesh_; }
  AxisSet group() const { return group_; }
  bool replicated() const { return placement_ == 'R' || placement_ == 'P'; }

  // The source key of world rank r: replicas of the token axes share one.
  int key(int r) const {
    if (!replicated()) return r;
    return mesh_.groupPeer(r, tokenAxes_, 0);
  }
  Source source(int r) const {
    const int k = key(r);
    Source s;
    s.tokens = (k % 3 == 1) ? 0 : 3 + static_cast<std::int64_t>(patternHash(c_.seed, k, 0) % 9);
    const std::int64_t E = c_.experts;
    for (std::int64_t t = 0; t < s.tokens; ++t) {
      std::vector<std::int64_t> chosen;
      std::uint32_t draw = 1;
      while (static_cast<int>(chosen.size()) < c_.topK) {
        std::int64_t e = 0;
        const std::uint32_t h = patternHash(c_.seed, k, static_cast<std::size_t>(1000 + t * 64 + draw++));
        switch (c_.routing) {
          case Routing::Uniform: e = h % E; break;
          // Three draws in four among the first quarter of the experts. The expert comes from the
          // bits above the choice: h % E alone would repeat h % 4 == 0 for E = 4 and never find
          // a second expert.
          case Routing::Skewed: e = (h % 4 != 0 ? (h / 4) % std::max<std::int64_t>(1, E / 4) : (h / 4) % E); break;
          case Routing::OneExpert: e = chosen.empty() ? 0 : h % E; break;
        }
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      const bool small = sixteenBit(c_.dtype);
      for (int j = 0; j < c_.topK; ++j) {
        s.ids.push_back(chosen[static_cast<std::size_t>(j)]);
        const std::uint32_t weightDraw = patternHash(c_.seed + 7, k, t * 8 + j);
        s.weights.push_back(small ? 0.5f * static_cast<float>(1 + weightDraw % 2)
                                  : 0.25f * static_cast<float>(1 + weightDraw % 4));
      }
      for (std::int64_t h = 0; h < c_.hidden; ++h) {
        const std::uint32_t valueDraw = patternHash(c_.seed + 3, k, t * 97 + h);
        s.x.push_back(small ? static_cast<float>(valueDraw % 5) - 2.0f : static_cast<float>(valueDraw % 16) - 8.0f);
      }
    }
    return s;
  }
  // This rank's input: the source, and for "tp=P" this replica's partial sum of it.
  std::vector<float> input(int r) const {
    Source s = source(r);
    if (placement_ != 'P') return s.x;
    const int n = mesh_.groupSize(tokenAxes_);
    const int j = mesh_.groupIndex(r, tokenAxes_);
    std::vector<float> part(s.x.size());
    for (std::size_t i = 0; i < part.size(); ++i) {
      // Replica j holds x / n rounded to small integers, the last one the remainder: exact sums.
      const float share = static_cast<float>(static_cast<int>(s.x[i]) / n);
      part[i] = j == n - 1 ? s.x[i] - share * static_cast<float>(n - 1) : share;
    }
    return part;
  }
  // The world ranks whose tokens reach this rank's experts, as the dispatch sees them: every
  // rank of the group, its tokens split over replicas when `split`.
  struct Row {
    std::int64_t expert;
    int src;
    std::int64_t token;
    float weight;
  };
  std::vector<Row> expectedRows(bool split, bool oncePerRank) const {
    const int R = mesh_.groupSize(group_);
    const std::int64_t perRank = c_.experts / R;
    const int me = mesh_.groupIndex(worldRank(), group_);
    std::vector<Row> rows;
    for (int g = 0; g < R; ++g) {
      const int src = mesh_.groupPeer(worldRank(), group_, g);
      const Source s = source(src);
      std::int64_t begin = 0, end = s.tokens;
      ownRange(src, s.tokens, split, begin, end);
      std::vector<std::int64_t> sent(static_cast<std::size_t>(R), 0);  // records per destination
      for (std::int64_t t = begin; t < end; ++t) {
        std::vector<bool> opened(static_cast<std::size_t>(R), false);
        for (int k = 0; k < c_.topK; ++k) {
          const std::int64_t e = s.ids[static_cast<std::size_t>(t * c_.topK + k)];
          const auto d = static_cast<std::size_t>(e / perRank);
          bool open = !oncePerRank || !opened[d];
          if (open) {
            if (c_.capacity > 0 && sent[d] >= c_.capacity) continue;  // dropped
            ++sent[d];
            opened[d] = true;
          } else if (c_.capacity > 0 && !opened[d]) {
            continue;
          }
          if (static_cast<int>(d) == me)
            rows.push_back({e, src, t, s.weights[static_cast<std::size_t>(t * c_.topK + k)]});
        }
      }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.expert < b.expert; });
    return rows;
  }
  // Whether (token t, k) of source `s` survives the capacity of its destination.
  bool kept(const Source& s, bool split, bool oncePerRank, std::int64_t t, int k) const {
    const int R = mesh_.groupSize(group_);
    std::int64_t begin = 0;
    if (split && replicated()) {
      const int n = mesh_.groupSize(tokenAxes_);
      const std::int64_t block = (s.tokens + n - 1) / n;
      begin = (t / block) * block;
    }
    return testing::keptByCapacity(s.ids, c_.topK, c_.experts / R, R, c_.capacity, oncePerRank, begin, t, k);
  }
  void ownRange(int r, std::int64_t tokens, bool split, std::int64_t& begin, std::int64_t& end) const {
    begin = 0;
    end = tokens;
    if (!split || !replicated()) return;
    const int n = mesh_.groupSize(tokenAxes_);
    const std::int64_t block = (tokens + n - 1) / n;
    begin = std::min(tokens, block * mesh_.groupIndex(r, tokenAxes_));
    end = std::min(tokens, begin + block);
  }

 private:
  Case c_;
  Mesh mesh_;
  std::unique_ptr<Backend> backend_;
  AxisSet group_;
  AxisSet tokenAxes_;
  char placement_ = 'S';
  bool ok_ = false;
};

// The expert: row * (global id + 1) (16-bit: (id % 2) + 1), exact on the test's small integers.
std::vector<float> expertOutput(const std::vector<float>& recvX, const std::vector<std::int64_t>& experts,
                                std::int64_t H, bool small) {
  std::vector<float> out(recvX.size());
  for (std::size_t r = 0; r < experts.size(); ++r) {
    const float factor = static_cast<float>((small ? experts[r] % 2 : experts[r]) + 1);
    for (std::int64_t h = 0; h < H; ++h) out[r * H + h] = recvX[r * H + h] * factor;
  }
  return out;
}

float gradOfY(int key, std::int64_t t, std::int64_t h, bool small) {
  const std::uint32_t draw = patternHash(99, key, static_cast<std::size_t>(t * 131 + h));
  return small ? static_cast<float>(draw % 5) - 2.0f : static_cast<float>(draw % 8) - 4.0f;
}

// Options of an exchange of `experts` experts, top `topK`, f32 rows of `hidden` elements, over
// the whole mesh, dropless.
RoutedExchangeOptions exchangeOptions(std::int64_t experts, int topK, std::int64_t hidden) {
  RoutedExchangeOptions options;
  options.numExperts = experts;
  options.topK = topK;
  options.hidden = hidden;
  return options;
}

// Creates the exchange of `options` on `w`'s backend; whether every rank created it.
bool createOnEveryRank(World& w, const RoutedExchangeOptions& options, std::unique_ptr<RoutedExchange>& exchange) {
  return allRanksAgree(RoutedExchange::create(w.backend(), options, exchange).isOk());
}

// The options of `c`'s exchange over `w`'s group.
RoutedExchangeOptions caseOptions(const Case& c, const World& w) {
  RoutedExchangeOptions options = exchangeOptions(c.experts, c.topK, c.hidden);
  options.group = w.group();
  options.tokenLayout = c.layout;
  options.program = c.program;
  options.capacity = c.capacity;
  options.dtype = c.dtype;
  options.weightDtype = c.dtype;
  return options;
}

// Runs dispatch, receive, combine and both backwards of `w`'s routing on `exchange` (made with
// `c`'s options) and checks each against the reference; returns whether this rank passed (then
// agreed by the caller).
bool runStep(const Case& c, World& w, RoutedExchange& exchange, RoutedStats* dispatchStats = nullptr,
             RoutedStats* combineStats = nullptr) {
  const bool small = sixteenBit(c.dtype);
  const auto in = [&](const std::vector<float>& v) { return encode(v, c.dtype); };
  const auto out = [&](std::size_t elements) { return std::vector<std::byte>(elements * dataTypeSize(c.dtype)); };
  const int me = worldRank();
  const Source s = w.source(me);
  const std::vector<float> x = w.input(me);
  const std::int64_t H = c.hidden;
  const int K = c.topK;
  RoutedDispatch handle;
  Status st = exchange.dispatch(in(x).data(), s.ids.data(), in(s.weights).data(), s.tokens, handle);
  EXPECT_TRUE(st.isOk()) << st.toString();
  if (!allRanksAgree(st.isOk())) return false;
  if (dispatchStats != nullptr) *dispatchStats = handle.stats();
  const std::int64_t rows = handle.rows();
  std::vector<std::byte> recvXBytes = out(static_cast<std::size_t>(rows * H)), recvWBytes = out(rows);
  std::vector<std::int64_t> recvE(static_cast<std::size_t>(rows));
  bool ok = exchange.receive(handle, recvXBytes.data(), recvE.data(), recvWBytes.data()).isOk();
  const std::vector<float> recvX = decode(recvXBytes, c.dtype), recvW = decode(recvWBytes, c.dtype);
  // Rows: exactly the expected (expert, source token) rows, grouped by local expert in order.
  const auto expected = w.expectedRows(exchange.splitsReplicas(), exchange.oncePerRank());
  EXPECT_EQ(static_cast<std::size_t>(rows), expected.size());
  ok = ok && static_cast<std::size_t>(rows) == expected.size();
  const std::int64_t perRank = c.experts / w.mesh().groupSize(w.group());
  for (std::size_t r = 0; ok && r < expected.size(); ++r) {
    const Source src = w.source(expected[r].src);
    ok = recvE[r] == expected[r].expert && recvW[r] == expected[r].weight;
    for (std::int64_t h = 0; ok && h < H; ++h)
      ok = recvX[r * H + h] == src.x[static_cast<std::size_t>(expected[r].token * H + h)];
    EXPECT_TRUE(ok) << "row " << r << " expert " << recvE[r] << " vs " << expected[r].expert << " weight " << recvW[r]
                    << " vs " << expected[r].weight << " rows " << rows;
  }
  std::int64_t counted = 0;
  for (std::int64_t e = 0; e < perRank; ++e) {
    const auto n = std::count_if(expected.begin(), expected.end(),
                                 [&](const World::Row& row) { return row.expert % perRank == e; });
    ok = ok && handle.tokensPerExpert()[static_cast<std::size_t>(e)] == n;
    counted += n;
  }
  EXPECT_EQ(counted, rows);
  // Combine: y[t] = sum_k w[t,k] * x[t] * (id + 1), over the pairs that were kept.
  const std::vector<float> expertOut = expertOutput(recvX, recvE, H, small);
  std::vector<std::byte> yBytes = in(std::vector<float>(static_cast<std::size_t>(s.tokens * H), -1.0f));
  st = exchange.combine(in(expertOut).data(), recvWBytes.data(), handle, yBytes.data(), combineStats);
  const std::vector<float> y = decode(yBytes, c.dtype);
  EXPECT_TRUE(st.isOk()) << st.toString();
  ok = ok && st.isOk();
  const bool split = exchange.splitsReplicas();
  const bool once = exchange.oncePerRank();
  for (std::int64_t t = 0; ok && t < s.tokens; ++t) {
    for (std::int64_t h = 0; ok && h < H; ++h) {
      float ref = 0;
      for (int k = 0; k < K; ++k) {
        if (!w.kept(s, split, once, t, k)) continue;
        const std::size_t p = static_cast<std::size_t>(t * K + k);
        const float factor = static_cast<float>((small ? s.ids[p] % 2 : s.ids[p]) + 1);
        ref += s.weights[p] * (s.x[static_cast<std::size_t>(t * H + h)] * factor);
      }
      ok = y[static_cast<std::size_t>(t * H + h)] == ref;
      EXPECT_TRUE(ok) << "y[" << t << "," << h << "] = " << y[static_cast<std::size_t>(t * H + h)] << " vs " << ref;
    }
  }
  // Combine backward: grad expert_out = w dy, grad w_row = <dy, expert_out row>.
  std::vector<float> dy(static_cast<std::size_t>(s.tokens * H));
  for (std::int64_t t = 0; t < s.tokens; ++t)
    for (std::int64_t h = 0; h < H; ++h) dy[static_cast<std::size_t>(t * H + h)] = gradOfY(w.key(me), t, h, small);
  std::vector<std::byte> gOutBytes = out(static_cast<std::size_t>(rows * H)), gRowWBytes = out(rows);
  st = exchange.combineBackward(in(dy).data(), in(expertOut).data(), recvWBytes.data(), handle, gOutBytes.data(),
                                gRowWBytes.data());
  const std::vector<float> gOut = decode(gOutBytes, c.dtype), gRowW = decode(gRowWBytes, c.dtype);
  EXPECT_TRUE(st.isOk()) << st.toString();
  ok = ok && st.isOk();
  for (std::size_t r = 0; ok && r < expected.size(); ++r) {
    float dot = 0;
    for (std::int64_t h = 0; h < H; ++h) {
      const float g = gradOfY(w.key(expected[r].src), expected[r].token, h, small);
      ok = ok && gOut[r * H + h] == expected[r].weight * g;
      dot += g * expertOut[r * H + h];
    }
    ok = ok && gRowW[r] == dot;
    EXPECT_TRUE(ok) << "combine backward row " << r;
  }
  // Dispatch backward of (grad recv_x = row * 2 + expert, grad recv_weight = expert id).
  std::vector<float> gRecv(static_cast<std::size_t>(rows * H)), gW(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t h = 0; h < H; ++h)
      gRecv[static_cast<std::size_t>(r * H + h)] =
          recvX[static_cast<std::size_t>(r * H + h)] * 2 + static_cast<float>(recvE[r]);
    gW[static_cast<std::size_t>(r)] = static_cast<float>(recvE[r]);
  }
  std::vector<std::byte> gxBytes = in(std::vector<float>(static_cast<std::size_t>(s.tokens * H), -1));
  std::vector<std::byte> gTopkBytes = in(std::vector<float>(static_cast<std::size_t>(s.tokens * K), -1));
  st = exchange.dispatchBackward(in(gRecv).data(), in(gW).data(), handle, gxBytes.data(), gTopkBytes.data());
  const std::vector<float> gx = decode(gxBytes, c.dtype), gTopk = decode(gTopkBytes, c.dtype);
  EXPECT_TRUE(st.isOk()) << st.toString();
  ok = ok && st.isOk();
  for (std::int64_t t = 0; ok && t < s.tokens; ++t) {
    for (std::int64_t h = 0; ok && h < H; ++h) {
      float ref = 0;
      for (int k = 0; k < K; ++k) {
        if (!w.kept(s, split, once, t, k)) continue;
        ref += s.x[static_cast<std::size_t>(t * H + h)] * 2 +
               static_cast<float>(s.ids[static_cast<std::size_t>(t * K + k)]);
      }
      ok = gx[static_cast<std::size_t>(t * H + h)] == ref;
      EXPECT_TRUE(ok) << "grad x[" << t << "," << h << "]";
    }
    for (int k = 0; ok && k < K; ++k) {
      const std::size_t p = static_cast<std::size_t>(t * K + k);
      const float ref = w.kept(s, split, once, t, k) ? static_cast<float>(s.ids[p]) : 0.0f;
      ok = gTopk[p] == ref;
      EXPECT_TRUE(ok) << "grad w[" << t << "," << k << "]";
    }
  }
  return ok;
}

// runStep of `c` on an exchange of its own.
bool runCase(const Case& c, RoutedStats* dispatchStats = nullptr, RoutedStats* combineStats = nullptr) {
  World w(c);
  if (!allRanksAgree(w.ok())) return false;
  std::unique_ptr<RoutedExchange> exchange;
  if (!createOnEveryRank(w, caseOptions(c, w), exchange)) return false;
  return runStep(c, w, *exchange, dispatchStats, combineStats);
}

int size() { return worldSize(); }

// "ep=N" over the world, or the case's mesh when the world has its size.
std::string flatMesh() { return "ep=" + std::to_string(size()); }

// "tp=2,ep=N/2": the expert axis folded over tensor parallelism (an even world).
std::string foldedMesh() { return "tp=2,ep=" + std::to_string(size() / 2); }

Case meshCase(std::string mesh) {
  Case c;
  c.mesh = std::move(mesh);
  return c;
}

// A case of `experts` experts, top `topK`, run by `program` over the flat mesh.
Case flatCase(std::int64_t experts, int topK, RoutedProgram program = RoutedProgram::Fused) {
  Case c = meshCase(flatMesh());
  c.experts = experts;
  c.topK = topK;
  c.program = program;
  return c;
}

// Dispatches `tokens` rows of ones, each to expert 0 with weight 1 (a top-1 exchange).
Status dispatchToExpertZero(RoutedExchange& exchange, std::int64_t tokens, RoutedDispatch& handle) {
  const auto T = static_cast<std::size_t>(tokens);
  std::vector<float> x(T * static_cast<std::size_t>(exchange.options().hidden), 1.0f), weights(T, 1.0f);
  std::vector<std::int64_t> ids(T, 0);
  return exchange.dispatch(x.data(), ids.data(), weights.data(), tokens, handle);
}

// Expects `st` to be the verdict of a failure on world rank `failed` alone: InvalidArgument
// there, Mismatch on every other rank, on every rank (agreed); `context` labels a miss.
void expectFailedAt(int failed, const Status& st, const std::string& context = "") {
  const StatusCode want = worldRank() == failed ? StatusCode::InvalidArgument : StatusCode::Mismatch;
  EXPECT_EQ(st.code(), want) << context << ": " << st.toString();
  EXPECT_TRUE(allRanksAgree(st.code() == want)) << context;
}

// Whether `message` names world rank `rank` ("rank 7", not "rank 70").
bool namesRank(const std::string& message, int rank) {
  return std::regex_search(message, std::regex("\\brank " + std::to_string(rank) + "\\b"));
}

// expectFailedAt, and every rank but `failed` names it in its Mismatch (not the replica or
// peer that passed the failure on).
void expectFailedAtAndNamed(int failed, const Status& st, const std::string& context = "") {
  expectFailedAt(failed, st, context);
  const bool named = worldRank() == failed || namesRank(st.message(), failed);
  EXPECT_TRUE(named) << context << ": does not name rank " << failed << ": " << st.toString();
  EXPECT_TRUE(allRanksAgree(named)) << context << ": some rank does not name rank " << failed;
}

TEST(RoutedExchange, FlatGroupEveryProgramAndRouting) {
  const int R = size();
  for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert, RoutedProgram::Planned}) {
    for (Routing routing : {Routing::Uniform, Routing::Skewed, Routing::OneExpert}) {
      for (auto [experts, topK] : {std::pair<std::int64_t, int>{R, 1}, {2 * R, 2}, {4 * R, 3}, {8 * R, 8}}) {
        Case c = flatCase(experts, topK, program);
        c.routing = routing;
        c.seed = static_cast<std::uint32_t>(experts * 10 + topK);
        EXPECT_TRUE(allRanksAgree(runCase(c))) << "E=" << experts << " K=" << topK << " routing "
                                               << static_cast<int>(routing) << " program " << static_cast<int>(program);
      }
    }
  }
}

// Two exchanges (two MoE layers) over training steps with fresh routings: the receive buffer
// they share between dispatches grows and shrinks (every token to the first rank's experts,
// then spread, skewed, none from some ranks), a dispatch is dropped unreceived, and every step
// of both stays exact.
TEST(RoutedExchange, StepsWithFreshRoutingsOnTwoExchanges) {
  for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert}) {
    Case c = flatCase(4 * size(), 3, program), other = flatCase(2 * size(), 2, program);
    c.hidden = 40;
    other.hidden = 24;
    World w(c), v(other);
    ASSERT_TRUE(allRanksAgree(w.ok() && v.ok()));
    std::unique_ptr<RoutedExchange> exchange, second;
    ASSERT_TRUE(createOnEveryRank(w, caseOptions(c, w), exchange));
    ASSERT_TRUE(createOnEveryRank(v, caseOptions(other, v), second));
    std::uint32_t seed = 11;
    for (Routing routing :
         {Routing::OneExpert, Routing::Uniform, Routing::Skewed, Routing::OneExpert, Routing::Uniform}) {
      w.reroute(routing, ++seed);
      EXPECT_TRUE(allRanksAgree(runStep(c, w, *exchange))) << "step with seed " << seed;
      v.reroute(routing == Routing::OneExpert ? Routing::Uniform : Routing::OneExpert, seed + 100);
      EXPECT_TRUE(allRanksAgree(runStep(other, v, *second))) << "second exchange, step with seed " << seed;
      // A dispatch never received: T tokens of ones to experts 0, 1 and 2.
      const std::size_t T = seed % 5;
      std::vector<float> ones(T * static_cast<std::size_t>(c.hidden), 1.0f), weights(T * 3, 1.0f);
      std::vector<std::int64_t> ids;
      for (std::size_t t = 0; t < T; ++t) ids.insert(ids.end(), {0, 1, 2});
      RoutedDispatch dropped;
      const Status st =
          exchange->dispatch(ones.data(), ids.data(), weights.data(), static_cast<std::int64_t>(T), dropped);
      EXPECT_TRUE(allRanksAgree(st.isOk())) << st.toString();
    }
  }
}

TEST(RoutedExchange, FoldedGroupAndTokenLayouts) {
  if (size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  for (const char* layout : {"tp=S0", "tp=R", "tp=P"}) {
    for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert, RoutedProgram::Planned}) {
      for (const char* group : {"ep+tp", "ep"}) {
        Case c = meshCase(foldedMesh());
        c.group = group;
        c.layout = layout;
        c.experts = 2 * size();
        c.topK = 3;
        c.program = program;
        c.seed = 5;
        EXPECT_TRUE(allRanksAgree(runCase(c)))
            << layout << " group " << group << " program " << static_cast<int>(program);
      }
    }
  }
}

// 16-bit rows and weights (as a bf16 or fp16 training run routes them): every program, flat
// and folded with each token layout, bit for bit against the float reference on values exact
// in 16 bits.
TEST(RoutedExchange, SixteenBitRowsAndWeights) {
  for (DataType dtype : {DataType::BF16, DataType::F16}) {
    for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert}) {
      Case c = flatCase(4 * size(), 3, program);
      c.routing = Routing::Skewed;
      c.dtype = dtype;
      EXPECT_TRUE(allRanksAgree(runCase(c))) << dataTypeName(dtype) << " program " << static_cast<int>(program);
      if (size() % 2 != 0) continue;
      for (const char* layout : {"tp=S0", "tp=R", "tp=P"}) {
        c.mesh = foldedMesh();
        c.group = "ep+tp";
        c.layout = layout;
        c.experts = 2 * size();
        EXPECT_TRUE(allRanksAgree(runCase(c))) << dataTypeName(dtype) << " " << layout;
      }
    }
  }
}

TEST(RoutedExchange, CapacityDropsAndCountsPadding) {
  for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert}) {
    Case c = flatCase(2 * size(), 2, program);
    c.routing = Routing::Skewed;
    c.capacity = 2;
    RoutedStats stats;
    EXPECT_TRUE(allRanksAgree(runCase(c, &stats)));
    EXPECT_EQ(stats.countBytes, 0u);  // no count exchange in capacity mode
  }
}

// The (token, destination rank) pairs of this rank's tokens in `c` (flat mesh) whose
// destination is another rank; with `perExpert`, the (token, expert) pairs.
std::uint64_t offRankPairs(const Case& c, bool perExpert = false) {
  World w(c);
  const int me = worldRank();
  const Source s = w.source(me);
  const std::int64_t perRank = c.experts / size();
  std::uint64_t pairs = 0;
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    std::vector<bool> seen(static_cast<std::size_t>(size()), false);
    for (int k = 0; k < c.topK; ++k) {
      const auto d = static_cast<std::size_t>(s.ids[static_cast<std::size_t>(t * c.topK + k)] / perRank);
      if ((perExpert || !seen[d]) && static_cast<int>(d) != me) ++pairs;
      seen[d] = true;
    }
  }
  return pairs;
}

// Bytes of the fused dispatch: exactly the off-rank (token, destination rank) pairs x H x 4,
// headers within 3 %, the count exchange 4 bytes per peer (<= 4E), one round besides the data.
TEST(RoutedExchange, BytesSentArePairsTimesRow) {
  Case c = flatCase(8 * size(), 8);
  c.hidden = 1024;
  RoutedStats stats;
  EXPECT_TRUE(allRanksAgree(runCase(c, &stats)));
  const std::uint64_t pairs = offRankPairs(c);
  bool ok = stats.payloadBytes == pairs * 1024 * 4;
  EXPECT_EQ(stats.payloadBytes, pairs * 1024 * 4);
  if (pairs > 0) {
    EXPECT_LE(static_cast<double>(stats.headerBytes), 0.03 * static_cast<double>(stats.payloadBytes));
    ok = ok && static_cast<double>(stats.headerBytes) <= 0.03 * static_cast<double>(stats.payloadBytes);
  }
  EXPECT_EQ(stats.countBytes, 4u * static_cast<std::uint64_t>(size() - 1));
  EXPECT_LE(stats.countBytes, 4u * static_cast<std::uint64_t>(c.experts));
  EXPECT_EQ(stats.rounds, 2);  // the count exchange and the records
  EXPECT_TRUE(allRanksAgree(ok));
}

// The forward (dispatch and combine), summed over the ranks, sends no more than the per-(token,
// expert) dispatcher on the same routing: its rows and one weight per off-rank (token, expert)
// pair, an int64 count per local expert and peer, the rows back. A record's header holds its
// weights alone where its local experts are implied (one expert per rank; or one slot per
// record, ordered by local expert, the count exchange telling the records per (peer, local
// expert)), an int32 id and the weight per slot otherwise; the dispatch's blocks carry no word
// (the count exchange told the counts), combine's a 4-byte word per peer. Where each token
// reaches K distinct ranks through one expert each (one expert per rank), the bytes are equal.
TEST(RoutedExchange, NoMoreBytesThanThePerExpertDispatcher) {
  const auto R = static_cast<std::uint64_t>(size());
  struct Shape {
    std::int64_t experts;
    int topK;
    RoutedProgram program;
  };
  const std::vector<Shape> shapes = {
      {size(), 1, RoutedProgram::Planned},     {size(), std::min(2, size()), RoutedProgram::Planned},
      {2 * size(), 1, RoutedProgram::Planned}, {4 * size(), 1, RoutedProgram::Planned},
      {2 * size(), 2, RoutedProgram::Planned}, {2 * size(), 2, RoutedProgram::PerExpert}};
  for (const Shape& shape : shapes) {
    Case c = flatCase(shape.experts, shape.topK, shape.program);
    c.hidden = 64;
    RoutedStats dispatch, combine;
    EXPECT_TRUE(allRanksAgree(runCase(c, &dispatch, &combine)));
    const bool perRecord = shape.program == RoutedProgram::PerExpert;
    const std::uint64_t pairs = offRankPairs(c, perRecord), expertPairs = offRankPairs(c, true), row = 64 * 4;
    const std::uint64_t local = static_cast<std::uint64_t>(shape.experts) / R;
    const std::uint64_t slots = perRecord ? 1 : std::min<std::uint64_t>(static_cast<std::uint64_t>(shape.topK), local);
    const bool byOrder = slots == 1 && local > 1;
    const std::uint64_t id = local == 1 || byOrder ? 0 : 4, counts = 4 * (R - 1) * (byOrder ? local : 1);
    const std::uint64_t ours = sumOverRanks(dispatch.bytesSent() + combine.bytesSent());
    const std::uint64_t perExpert = sumOverRanks(expertPairs * (2 * row + 4) + 8 * local * (R - 1));
    const std::string label = "E=" + std::to_string(shape.experts) + " K=" + std::to_string(shape.topK) +
                              (perRecord ? " per expert" : " planned");
    EXPECT_EQ(dispatch.payloadBytes, pairs * row) << label;
    EXPECT_EQ(dispatch.headerBytes, pairs * slots * (id + 4)) << label;
    EXPECT_EQ(dispatch.countBytes, counts) << label;
    EXPECT_EQ(combine.headerBytes, 4 * (R - 1)) << label;
    EXPECT_LE(ours, perExpert) << label;
    if (local == 1) {
      EXPECT_EQ(ours, perExpert) << label;
    }
    const bool ok = dispatch.payloadBytes == pairs * row && dispatch.headerBytes == pairs * slots * (id + 4) &&
                    dispatch.countBytes == counts && combine.headerBytes == 4 * (R - 1) && ours <= perExpert &&
                    (local != 1 || ours == perExpert);
    EXPECT_TRUE(allRanksAgree(ok)) << label;
  }
}

// All tokens of every rank to expert 0 at T=4096, H=1024: the receiver's scratch is sized by
// the counts (128 MiB of rows here), the run completes and every expanded row is the sent one.
TEST(RoutedExchange, EveryTokenToOneExpert) {
  World w(meshCase(flatMesh()));
  ASSERT_TRUE(allRanksAgree(w.ok()));
  std::unique_ptr<RoutedExchange> exchange;
  ASSERT_TRUE(createOnEveryRank(w, exchangeOptions(size(), 1, 1024), exchange));
  const std::int64_t T = 4096;
  const std::int64_t H = 1024;
  // Row t of rank r holds 2 (r T + t) + (h odd): every row and position tells where it came from.
  const auto value = [&](int r, std::int64_t t, std::int64_t h) { return static_cast<float>(2 * (r * T + t) + h % 2); };
  std::vector<float> x(static_cast<std::size_t>(T * H)), weights(static_cast<std::size_t>(T), 1.0f);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < H; ++h) x[static_cast<std::size_t>(t * H + h)] = value(worldRank(), t, h);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(T), 0);
  RoutedDispatch handle;
  Status st = exchange->dispatch(x.data(), ids.data(), weights.data(), T, handle);
  EXPECT_TRUE(st.isOk()) << st.toString();
  const std::int64_t expected = worldRank() == 0 ? T * size() : 0;
  EXPECT_TRUE(allRanksAgree(st.isOk() && handle.rows() == expected));
  // Rank 0 expands 128 MiB of rows (streamed past the caches), from each source in token order.
  std::vector<float> recvX(static_cast<std::size_t>(handle.rows() * H), -1.0f);
  st = exchange->receive(handle, recvX.data(), nullptr, nullptr);
  EXPECT_TRUE(st.isOk()) << st.toString();
  std::int64_t wrong = 0;
  for (std::int64_t row = 0; row < handle.rows(); ++row)
    for (std::int64_t h = 0; h < H; ++h)
      wrong += recvX[static_cast<std::size_t>(row * H + h)] != value(static_cast<int>(row / T), row % T, h) ? 1 : 0;
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(allRanksAgree(st.isOk() && wrong == 0));
}

// A sender whose block to one rank passes the limit per peer (scratchLimitBytes / R) fails
// with a message naming both numbers, and its peers learn it in the count exchange (Mismatch
// naming it), before any data moves; blocks within the limit that all land on one rank pass.
TEST(RoutedExchange, ScratchLimitFailsEveryRankBeforeData) {
  World w(meshCase(flatMesh()));
  ASSERT_TRUE(allRanksAgree(w.ok()));
  RoutedExchangeOptions options = exchangeOptions(size(), 1, 256);     // 1 KiB rows, records of 1032 bytes
  options.scratchLimitBytes = static_cast<std::size_t>(size()) << 17;  // 128 KiB per peer
  std::unique_ptr<RoutedExchange> exchange;
  ASSERT_TRUE(createOnEveryRank(w, options, exchange));
  const int odd = size() - 1;
  for (const bool over : {false, true}) {
    // Every rank sends 120 rows to rank 0 (124 KiB, within the limit); with `over`, rank `odd` 160.
    const std::int64_t T = over && worldRank() == odd ? 160 : 120;
    RoutedDispatch handle;
    const Status st = dispatchToExpertZero(*exchange, T, handle);
    if (!over) {
      EXPECT_TRUE(st.isOk()) << st.toString();
      EXPECT_TRUE(allRanksAgree(st.isOk() && handle.rows() == (worldRank() == 0 ? 120 * size() : 0)));
      continue;
    }
    expectFailedAt(odd, st, "over the limit");
    const std::string names = worldRank() == odd ? "per peer" : "rank " + std::to_string(odd);
    EXPECT_NE(st.message().find(names), std::string::npos) << st.toString();
    EXPECT_TRUE(allRanksAgree(st.message().find(names) != std::string::npos));
  }
}

// Mismatched routing metadata: an error on every rank, never a hang or garbage.
TEST(RoutedExchange, MismatchedMetadataFailsEveryRank) {
  World w(meshCase(flatMesh()));
  ASSERT_TRUE(allRanksAgree(w.ok()));
  const int me = worldRank();
  const int odd = size() - 1;
  const std::int64_t T = 5;
  std::vector<float> x(static_cast<std::size_t>(T * 4), 1.0f), weights(static_cast<std::size_t>(T * 4), 0.5f);
  const auto make = [&](int topK, std::unique_ptr<RoutedExchange>& out) {
    return createOnEveryRank(w, exchangeOptions(2 * size(), topK, 4), out);
  };
  // An expert id out of range on one rank.
  {
    std::unique_ptr<RoutedExchange> exchange;
    ASSERT_TRUE(make(2, exchange));
    std::vector<std::int64_t> ids(static_cast<std::size_t>(T * 2));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i % 2 == 0 ? 0 : 3);
    if (me == odd) ids[3] = 2 * size();
    RoutedDispatch handle;
    expectFailedAt(odd, exchange->dispatch(x.data(), ids.data(), weights.data(), T, handle), "expert id out of range");
  }
  // K different on one rank (other record sizes): the ranks' creation of the exchange fails.
  {
    std::unique_ptr<RoutedExchange> exchange;
    const Status st = RoutedExchange::create(w.backend(), exchangeOptions(2 * size(), me == odd ? 3 : 2, 4), exchange);
    EXPECT_EQ(st.code(), StatusCode::Mismatch) << st.toString();
    EXPECT_TRUE(
        allRanksAgree(st.code() == StatusCode::Mismatch && st.message().find("other options") != std::string::npos));
  }
  // A local failure in combine (a binding's size check) on one rank.
  {
    std::unique_ptr<RoutedExchange> exchange;
    ASSERT_TRUE(make(2, exchange));
    std::vector<std::int64_t> ids(static_cast<std::size_t>(T * 2));
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<std::int64_t>((i * 5) % (2 * size()) / 2 * 2 + i % 2);
    RoutedDispatch handle;
    ASSERT_TRUE(allRanksAgree(exchange->dispatch(x.data(), ids.data(), weights.data(), T, handle).isOk()));
    std::vector<float> rows(static_cast<std::size_t>(handle.rows() * 4), 1.0f), y(static_cast<std::size_t>(T * 4));
    const Status local = me == odd ? Status::invalidArgument("expert_out has 3 rows, the handle 4") : Status::ok();
    expectFailedAt(odd, exchange->combine(rows.data(), nullptr, handle, y.data(), nullptr, local), "combine");
  }
}

// A local failure on one replica of partial tokens ("tp=P"): the replica still joins the
// reduction over tp with zeros, and every rank fails (its replicas learn it there, the rest of
// the group in the count exchange), with tp inside and outside the dispatch group, split or not.
TEST(RoutedExchange, PartialReplicaFailureFailsEveryRank) {
  if (size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  World w(meshCase(foldedMesh()));
  ASSERT_TRUE(allRanksAgree(w.ok()));
  const int odd = size() - 1;
  const std::int64_t T = 4;
  std::vector<float> x(static_cast<std::size_t>(T * 4), 1.0f), weights(static_cast<std::size_t>(T * 2), 0.5f);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(T * 2));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i % 2 == 0 ? 0 : size() - 1);
  for (const char* group : {"ep+tp", "ep"}) {
    for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert}) {
      RoutedExchangeOptions options = exchangeOptions(size(), 2, 4);
      options.tokenLayout = "tp=P";
      options.program = program;
      ASSERT_TRUE(w.mesh().parseAxes(group, options.group).isOk());
      std::unique_ptr<RoutedExchange> exchange;
      ASSERT_TRUE(createOnEveryRank(w, options, exchange));
      const Status local =
          worldRank() == odd ? Status::invalidArgument("x has 3 columns, the exchange 4") : Status::ok();
      RoutedDispatch handle;
      expectFailedAtAndNamed(odd, exchange->dispatch(x.data(), ids.data(), weights.data(), T, handle, local),
                             std::string(group) + " program " + std::to_string(static_cast<int>(program)));
    }
  }
}

// A replica of tp=R or tp=P tokens that passes another T than its replicas (T = 3 against 4:
// the same ceil(T/2) blocks, so the rows alone would not show it): the replicas' agreement fails
// them, and the count exchange tells the others. Every rank returns Mismatch; none waits.
TEST(RoutedExchange, ReplicasWithDifferentTokenCountsFailEveryRank) {
  if (size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  World w(meshCase(foldedMesh()));
  ASSERT_TRUE(allRanksAgree(w.ok()));
  const int odd = size() - 1;
  const std::int64_t T = worldRank() == odd ? 3 : 4;
  std::vector<float> x(static_cast<std::size_t>(T * 4), 1.0f), weights(static_cast<std::size_t>(T * 2), 0.5f);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(T * 2));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i % 2 == 0 ? 0 : size() - 1);
  for (const auto& [layout, group] : {std::pair{"tp=P", "ep+tp"}, {"tp=P", "ep"}, {"tp=R", "ep+tp"}, {"tp=R", "ep"}}) {
    RoutedExchangeOptions options = exchangeOptions(size(), 2, 4);
    options.tokenLayout = layout;
    ASSERT_TRUE(w.mesh().parseAxes(group, options.group).isOk());
    std::unique_ptr<RoutedExchange> exchange;
    ASSERT_TRUE(createOnEveryRank(w, options, exchange));
    RoutedDispatch handle;
    const auto start = std::chrono::steady_clock::now();
    const Status st = exchange->dispatch(x.data(), ids.data(), weights.data(), T, handle);
    const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(st.code(), StatusCode::Mismatch) << layout << " " << group << ": " << st.toString();
    EXPECT_TRUE(allRanksAgree(st.code() == StatusCode::Mismatch)) << layout << " " << group;
    EXPECT_LT(seconds, 5.0) << layout << " " << group << ": waited for the timeout";
  }
}

TEST(RoutedExchange, CapacityOverflowErrorFailsEveryRank) {
  World w(meshCase(flatMesh()));
  ASSERT_TRUE(allRanksAgree(w.ok()));
  RoutedExchangeOptions options = exchangeOptions(size(), 1, 2);
  options.capacity = 3;
  options.overflow = CapacityOverflow::Error;
  std::unique_ptr<RoutedExchange> exchange;
  ASSERT_TRUE(createOnEveryRank(w, options, exchange));
  const std::int64_t T = worldRank() == 0 ? 4 : 3;  // rank 0 overflows its capacity for rank 0
  RoutedDispatch handle;
  const Status st = dispatchToExpertZero(*exchange, T, handle);
  EXPECT_FALSE(st.isOk());
  EXPECT_TRUE(allRanksAgree(!st.isOk()));
}

// Seconds since `start`.
double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// An option that is bad on one rank alone: that rank's creation fails with InvalidArgument
// naming it, every other rank's with Mismatch naming that rank (the replicas of "tp=R" in the
// other ep groups included), in the creation's rounds (well under a second, not the timeout),
// with the groups' communicators still to be made (a fresh backend) and made already; a good
// creation then works.
TEST(RoutedExchange, CreateWithABadOptionOnOneRankFailsEveryRankAtOnce) {
  if (size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  const int me = worldRank();
  const int odd = size() - 1;
  struct Bad {
    const char* what;  // a word of the message on the rank at fault
    void (*spoil)(RoutedExchangeOptions&);
  };
  const Bad bads[] = {
      {"top", [](RoutedExchangeOptions& o) { o.topK = 0; }},
      {"top", [](RoutedExchangeOptions& o) { o.topK = static_cast<int>(o.numExperts) + 1; }},
      {"expert", [](RoutedExchangeOptions& o) { o.numExperts += 1; }},
      {"token layout", [](RoutedExchangeOptions& o) { o.tokenLayout = "tp=Q"; }},
      {"capacity", [](RoutedExchangeOptions& o) { o.capacity = -1; }},
      {"cost model", [](RoutedExchangeOptions& o) { o.topology = "/nonexistent/profile.json"; }},
      {"dtype", [](RoutedExchangeOptions& o) { o.dtype = DataType::I32; }},
  };
  for (const bool fresh : {true, false}) {
    World w(meshCase(foldedMesh()));
    ASSERT_TRUE(allRanksAgree(w.ok()));
    RoutedExchangeOptions good = exchangeOptions(size(), 2, 4);
    good.tokenLayout = "tp=R";
    ASSERT_TRUE(w.mesh().parseAxes("ep", good.group).isOk());
    if (!fresh) {
      std::unique_ptr<RoutedExchange> first;
      ASSERT_TRUE(createOnEveryRank(w, good, first));
    }
    for (const Bad& bad : bads) {
      // E + 1 experts split over a group of one rank.
      if (std::string(bad.what) == "expert" && w.mesh().groupSize(good.group) == 1) continue;
      const std::string label = std::string(fresh ? "fresh backend, " : "groups made, ") + bad.what;
      RoutedExchangeOptions options = good;
      if (me == odd) bad.spoil(options);
      std::unique_ptr<RoutedExchange> exchange;
      const auto start = std::chrono::steady_clock::now();
      const Status st = RoutedExchange::create(w.backend(), options, exchange);
      const double seconds = secondsSince(start);
      // InvalidArgument naming the option on rank `odd`, Mismatch naming it on every other rank:
      // its ep group in the options' round, the other ep groups through their replicas over tp.
      expectFailedAt(odd, st, label);
      const std::string names = me == odd ? bad.what : "rank " + std::to_string(odd);
      const bool named = st.message().find(names) != std::string::npos;
      EXPECT_TRUE(named) << label << ": " << st.toString();
      EXPECT_TRUE(allRanksAgree(named)) << label;
      EXPECT_LT(seconds, 1.0) << label << ": waited for the timeout";
      EXPECT_TRUE(allRanksAgree(seconds < 1.0)) << label;
      std::unique_ptr<RoutedExchange> next;
      EXPECT_TRUE(createOnEveryRank(w, good, next)) << label << ": the next good creation";
    }
  }
}

// A bad expert id in a replicated routing ("tp=R", "tp=P", split or not): every replica checks
// the whole routing before any of them returns, so every rank of the mesh fails, whether the
// replicas share the bad routing (InvalidArgument on each) or one replica alone has it
// (InvalidArgument there, Mismatch on the rest, naming a rank whose own check failed: that one
// replica, or a replica of the shared routing); none waits, and the next dispatch works.
TEST(RoutedExchange, ReplicatedRoutingWithABadIdFailsEveryRank) {
  if (size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  World w(meshCase(foldedMesh()));
  ASSERT_TRUE(allRanksAgree(w.ok()));
  const int me = worldRank();
  const int odd = size() - 1;
  AxisSet tp;
  ASSERT_TRUE(w.mesh().parseAxes("tp", tp).isOk());
  const std::vector<int> replicas = w.mesh().groupRanks(odd, tp);
  const bool replicaOfOdd = std::find(replicas.begin(), replicas.end(), me) != replicas.end();
  const std::int64_t T = 6;
  const std::int64_t E = size();
  std::vector<float> x(static_cast<std::size_t>(T * 4), 1.0f), weights(static_cast<std::size_t>(T * 2), 0.5f);
  std::vector<std::int64_t> good(static_cast<std::size_t>(T * 2));
  for (std::size_t i = 0; i < good.size(); ++i) good[i] = static_cast<std::int64_t>(i % 2 == 0 ? 0 : E - 1);
  for (const char* layout : {"tp=R", "tp=P"}) {
    for (RoutedProgram program : {RoutedProgram::Fused, RoutedProgram::PerExpert}) {
      RoutedExchangeOptions options = exchangeOptions(E, 2, 4);
      options.tokenLayout = layout;
      options.program = program;
      ASSERT_TRUE(w.mesh().parseAxes("ep", options.group).isOk());
      std::unique_ptr<RoutedExchange> exchange;
      ASSERT_TRUE(createOnEveryRank(w, options, exchange));
      for (const bool shared : {true, false}) {
        const std::string label = std::string(layout) + (program == RoutedProgram::Fused ? " fused" : " per expert") +
                                  (shared ? ", every replica" : ", one replica");
        std::vector<std::int64_t> ids = good;
        // The last token: dispatched by the last replica when they split their tokens.
        if (shared ? replicaOfOdd : me == odd) ids.back() = E;
        RoutedDispatch handle;
        const auto start = std::chrono::steady_clock::now();
        const Status st = exchange->dispatch(x.data(), ids.data(), weights.data(), T, handle);
        const double seconds = secondsSince(start);
        const bool atFault = shared ? replicaOfOdd : me == odd;
        const StatusCode want = atFault ? StatusCode::InvalidArgument : StatusCode::Mismatch;
        EXPECT_EQ(st.code(), want) << label << ": " << st.toString();
        EXPECT_TRUE(allRanksAgree(st.code() == want)) << label;
        const bool named = atFault || (shared ? std::any_of(replicas.begin(), replicas.end(),
                                                            [&](int r) { return namesRank(st.message(), r); })
                                              : namesRank(st.message(), odd));
        EXPECT_TRUE(named) << label << ": does not name a rank at fault: " << st.toString();
        EXPECT_TRUE(allRanksAgree(named)) << label << ": some rank does not name a rank at fault";
        EXPECT_TRUE(allRanksAgree(seconds < 1.0)) << label << ": waited for the timeout";
        RoutedDispatch next;
        EXPECT_TRUE(allRanksAgree(exchange->dispatch(x.data(), good.data(), weights.data(), T, next).isOk()))
            << label << ": the next good dispatch";
      }
    }
  }
}

// A handle belongs to the exchange that dispatched into it: another exchange's receive,
// combine and backwards refuse it with InvalidArgument before any communication (they would
// index its tables with their own slots, row size and group), and it still works on its own.
TEST(RoutedExchange, HandleOfAnotherExchangeIsRefused) {
  World w(meshCase(flatMesh()));
  ASSERT_TRUE(allRanksAgree(w.ok()));
  RoutedExchangeOptions a = exchangeOptions(size(), 1, 4);
  a.program = RoutedProgram::PerExpert;
  RoutedExchangeOptions b = exchangeOptions(size(), size() > 1 ? 2 : 1, 4);
  b.program = RoutedProgram::Fused;
  std::unique_ptr<RoutedExchange> first, second;
  ASSERT_TRUE(createOnEveryRank(w, a, first));
  ASSERT_TRUE(createOnEveryRank(w, b, second));
  const std::int64_t T = 5;
  RoutedDispatch handle;
  ASSERT_TRUE(allRanksAgree(dispatchToExpertZero(*first, T, handle).isOk()));
  const auto rows = static_cast<std::size_t>(handle.rows());
  std::vector<float> recvX(std::max<std::size_t>(1, rows) * 4 * 4), recvW(std::max<std::size_t>(1, rows) * 4);
  std::vector<float> y(static_cast<std::size_t>(T * 4)), grad(static_cast<std::size_t>(T * 4), 1.0f);
  const auto refused = [](const Status& st) {
    return st.code() == StatusCode::InvalidArgument &&
           st.message().find("another routed exchange") != std::string::npos;
  };
  const Status received = second->receive(handle, recvX.data(), nullptr, recvW.data());
  EXPECT_TRUE(refused(received)) << received.toString();
  const Status combined = second->combine(recvX.data(), recvW.data(), handle, y.data());
  EXPECT_TRUE(refused(combined)) << combined.toString();
  const Status back = second->combineBackward(grad.data(), recvX.data(), recvW.data(), handle, recvX.data(), nullptr);
  EXPECT_TRUE(refused(back)) << back.toString();
  const Status dispatchBack = second->dispatchBackward(recvX.data(), nullptr, handle, grad.data(), nullptr);
  EXPECT_TRUE(refused(dispatchBack)) << dispatchBack.toString();
  EXPECT_TRUE(allRanksAgree(refused(received) && refused(combined) && refused(back) && refused(dispatchBack)));
  // A handle that holds no dispatch is refused too; the right exchange takes the handle.
  RoutedDispatch empty;
  EXPECT_EQ(first->receive(empty, nullptr, nullptr, nullptr).code(), StatusCode::InvalidArgument);
  const Status own = first->receive(handle, recvX.data(), nullptr, recvW.data());
  EXPECT_TRUE(own.isOk()) << own.toString();
  const Status ownCombine = first->combine(recvX.data(), recvW.data(), handle, y.data());
  EXPECT_TRUE(allRanksAgree(own.isOk() && ownCombine.isOk())) << ownCombine.toString();
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], 1.0f) << i;  // weight 1 x row of ones, one expert
}

// The C API: every token of every rank to expert (rank + 1) % R and to expert rank, weights 1
// and 2; the identity expert gives y = 3 x.
TEST(RoutedExchange, CApiDispatchCombine) {
  chimeraComm_t comm = nullptr;
  ASSERT_TRUE(allRanksAgree(chimeraCommInitMpi(&comm, flatMesh().c_str()) == chimeraSuccess));
  chimeraRoutedOptions_t options = CHIMERA_ROUTED_OPTIONS_INITIALIZER;
  options.numExperts = size();
  options.topK = size() > 1 ? 2 : 1;
  options.hidden = 3;
  options.datatype = chimeraFloat32;
  options.weightType = chimeraFloat32;
  chimeraRoutedExchange_t exchange = nullptr;
  ASSERT_TRUE(allRanksAgree(chimeraRoutedExchangeCreate(comm, &options, &exchange) == chimeraSuccess));
  const int me = worldRank();
  const std::int64_t T = 4;
  std::vector<float> x(T * 3), weights, y(T * 3);
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < T * 3; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(me * 100 + i);
  for (std::int64_t t = 0; t < T; ++t) {
    ids.insert(ids.end(), {(me + 1) % size(), me});
    weights.insert(weights.end(), {1.0f, 2.0f});
  }
  chimeraRoutedHandle_t dispatch = nullptr;
  std::int64_t rows = 0;
  bool ok =
      chimeraRoutedDispatch(exchange, x.data(), ids.data(), weights.data(), T, &dispatch, &rows) == chimeraSuccess;
  ok = ok && rows == 2 * T;
  std::vector<float> recvX(static_cast<std::size_t>(rows * 3)), recvW(static_cast<std::size_t>(rows));
  std::vector<std::int64_t> perExpert(1);
  ok = ok && chimeraRoutedReceive(exchange, dispatch, recvX.data(), nullptr, recvW.data(), perExpert.data()) ==
                 chimeraSuccess;
  ok = ok && perExpert[0] == 2 * T;
  ok = ok && chimeraRoutedCombine(exchange, dispatch, recvX.data(), recvW.data(), y.data()) == chimeraSuccess;
  for (std::size_t i = 0; ok && i < y.size(); ++i) ok = y[i] == 3 * x[i];
  std::uint64_t bytes = 0;
  ok = ok && chimeraRoutedHandleBytes(dispatch, &bytes) == chimeraSuccess && bytes > 0;
  EXPECT_TRUE(ok) << chimeraGetLastError();
  EXPECT_TRUE(allRanksAgree(ok));
  chimeraRoutedHandleDestroy(dispatch);
  chimeraRoutedExchangeDestroy(exchange);
  chimeraCommDestroy(comm);
}

}  // namespace
}  // namespace chimera
