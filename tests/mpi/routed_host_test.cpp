// SPDX-License-Identifier: Apache-2.0
// The routed exchange once per destination host (rule 6) on host placements faked on one
// machine (blocks, round-robin, uneven, three hosts, a host per rank) and where the ranks really run: every
// output of dispatch, receive, combine and both backwards equal bit for bit to the
// once-per-rank and per-(token, expert) programs on the same routing (small integers and
// quarter weights, so every sum is exact), and on values whose sums round, equal bit for bit
// except where the summation order differs (y and grad x, section 2 of docs/moe.md); the bytes
// each call sends as docs/moe.md says, and a bad routing on one rank failing every rank.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend_test_support.hpp"
#include "chimera/routed_exchange.hpp"
#include "common/half.hpp"
#include "mpi_test_util.hpp"

namespace chimera {
namespace {

using testing::allRanksAgree;
using testing::patternHash;
using testing::testOptions;
using testing::worldRank;
using testing::worldSize;

struct Placement {
  std::string name;
  std::vector<int> hosts;  // host of each world rank
};

std::vector<Placement> placements() {
  return {{"blocks 4+4", {0, 0, 0, 0, 1, 1, 1, 1}},
          {"round-robin", {0, 1, 0, 1, 0, 1, 0, 1}},
          {"uneven 3+5", {0, 0, 0, 1, 1, 1, 1, 1}},
          {"three hosts", {2, 2, 0, 0, 0, 1, 1, 2}},
          {"a host per rank", {0, 1, 2, 3, 4, 5, 6, 7}}};
}

struct Case {
  std::string mesh;
  std::string group;   // empty: every axis
  std::string layout;  // token layout
  std::int64_t experts = 8;
  int topK = 2;
  std::int64_t hidden = 4;
  std::int64_t capacity = 0;
  DataType dtype = DataType::F32;  // rows and weights
};

std::vector<Case> cases() {
  return {
      {"ep=8", "", "", 64, 8, 5, 0, DataType::F32},             // the target's shape, small rows
      {"ep=8", "", "", 16, 3, 4, 0, DataType::F32},             // two experts per rank
      {"ep=8", "", "", 8, 2, 3, 0, DataType::F32},              // one expert per rank: ids implied
      {"ep=8", "", "", 16, 4, 3, 2, DataType::F32},             // capacity 2, overflow dropped
      {"ep=8", "", "", 32, 4, 6, 0, DataType::BF16},            // 16-bit rows and weights
      {"tp=2,ep=4", "ep", "tp=P", 16, 4, 4, 0, DataType::F32},  // partial sums, replicas split
      {"tp=2,ep=4", "ep+tp", "tp=R", 16, 3, 4, 0, DataType::F32},
  };
}

std::vector<std::byte> encode(const std::vector<float>& v, DataType dtype) {
  std::vector<std::byte> out(v.size() * dataTypeSize(dtype));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DataType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const std::uint16_t bits = detail::floatToBf16(v[i]);
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

float decodeAt(const std::byte* b, DataType dtype, std::size_t i) {
  if (dtype == DataType::F32) {
    float v = 0;
    std::memcpy(&v, b + 4 * i, 4);
    return v;
  }
  std::uint16_t bits = 0;
  std::memcpy(&bits, b + 2 * i, 2);
  return detail::bf16ToFloat(bits);
}

// One source's tokens, recomputable on every rank from (seed, key).
struct Tokens {
  std::int64_t count = 0;
  std::vector<std::int64_t> ids;  // [T, K]
  std::vector<float> weights;     // [T, K]
  std::vector<float> x;           // [T, H]
};

// With `exact`, small integers and quarter weights (every sum exact); else values of 1/997ths
// and weights of 1/1000ths, whose sums round.
Tokens tokensOf(const Case& c, std::uint32_t seed, int key, bool exact = true) {
  Tokens s;
  s.count = key == 3 ? 0 : 4 + static_cast<std::int64_t>(patternHash(seed, key, 0) % 11);
  std::size_t draw = 1;
  for (std::int64_t t = 0; t < s.count; ++t) {
    std::vector<std::int64_t> chosen;
    while (static_cast<int>(chosen.size()) < c.topK) {
      const auto e = static_cast<std::int64_t>(patternHash(seed, key, draw++) % static_cast<std::uint32_t>(c.experts));
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int k = 0; k < c.topK; ++k) {
      s.ids.push_back(chosen[static_cast<std::size_t>(k)]);
      const std::uint32_t draw1 = patternHash(seed, key, draw++);
      s.weights.push_back(exact ? 0.25f * static_cast<float>(1 + draw1 % 4)
                                : static_cast<float>(1 + draw1 % 1000) / 1000.0f);
    }
    for (std::int64_t h = 0; h < c.hidden; ++h) {
      const std::uint32_t draw2 = patternHash(seed, key, draw++);
      s.x.push_back(exact ? static_cast<float>(static_cast<int>(draw2 % 9) - 4)
                          : static_cast<float>(static_cast<int>(draw2 % 2001) - 1000) / 997.0f);
    }
  }
  return s;
}

// Everything one program produced on this rank, as bytes, and its stats.
struct Outputs {
  Status status;
  std::vector<std::byte> recvX, recvWeight, y, gradExpertOut, gradRowWeights, gradX, gradWeights;
  std::vector<std::int64_t> recvExpert, tokensPerExpert;
  RoutedStats dispatchStats, combineStats, combineBackwardStats, dispatchBackwardStats;
  bool oncePerHost = false;
};

// Runs dispatch, receive, combine, combine backward and dispatch backward of `program` on
// `backend` with this rank's tokens of `seed` (`exact`: as tokensOf).
Outputs runProgram(Backend& backend, const Case& c, RoutedProgram program, std::uint32_t seed, bool exact = true) {
  Outputs o;
  const Mesh& mesh = backend.mesh();
  RoutedExchangeOptions options;
  options.numExperts = c.experts;
  options.topK = c.topK;
  options.hidden = c.hidden;
  options.dtype = c.dtype;
  options.weightDtype = c.dtype;
  options.tokenLayout = c.layout;
  options.capacity = c.capacity;
  options.program = program;
  if (!c.group.empty()) (void)mesh.parseAxes(c.group, options.group);
  std::unique_ptr<RoutedExchange> ex;
  o.status = RoutedExchange::create(backend, options, ex);
  if (!o.status.isOk()) return o;
  o.oncePerHost = ex->oncePerHost();
  // Replicas of the token axes share their tokens ("tp=R"); partial sums put them on replica 0.
  AxisSet tokenAxes;
  int key = backend.rank();
  bool partialZero = false;
  if (!c.layout.empty()) {
    (void)mesh.parseAxes(c.layout.substr(0, c.layout.find('=')), tokenAxes);
    key = mesh.groupPeer(backend.rank(), tokenAxes, 0);
    partialZero = c.layout.back() == 'P' && key != backend.rank();
  }
  Tokens s = tokensOf(c, seed, key, exact);
  if (partialZero) std::fill(s.x.begin(), s.x.end(), 0.0f);
  const std::vector<std::byte> x = encode(s.x, c.dtype), w = encode(s.weights, c.dtype);
  const std::size_t eb = dataTypeSize(c.dtype);
  const auto H = static_cast<std::size_t>(c.hidden);
  RoutedDispatch handle;
  o.status = ex->dispatch(x.data(), s.ids.data(), w.data(), s.count, handle);
  if (!o.status.isOk()) return o;
  o.dispatchStats = handle.stats();
  o.tokensPerExpert = handle.tokensPerExpert();
  const auto rows = static_cast<std::size_t>(handle.rows());
  o.recvX.resize(rows * H * eb);
  o.recvWeight.resize(rows * eb);
  o.recvExpert.resize(rows);
  o.status = ex->receive(handle, o.recvX.data(), o.recvExpert.data(), o.recvWeight.data());
  if (!o.status.isOk()) return o;
  // The experts: row r times (1 + its expert mod 3).
  std::vector<float> out(rows * H), gradRecv(rows * H), gradY(static_cast<std::size_t>(s.count) * H);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t h = 0; h < H; ++h) {
      const float v = decodeAt(o.recvX.data(), c.dtype, r * H + h);
      out[r * H + h] = v * static_cast<float>(1 + o.recvExpert[r] % 3);
      gradRecv[r * H + h] = v + static_cast<float>(o.recvExpert[r] % 5);
    }
  }
  for (std::size_t i = 0; i < gradY.size(); ++i)
    gradY[i] = exact ? static_cast<float>(static_cast<int>(patternHash(seed + 7, key, i) % 7) - 3)
                     : static_cast<float>(static_cast<int>(patternHash(seed + 7, key, i) % 2001) - 1000) / 991.0f;
  const std::vector<std::byte> expertOut = encode(out, c.dtype), gradRecvX = encode(gradRecv, c.dtype),
                               dy = encode(gradY, c.dtype);
  o.y.resize(static_cast<std::size_t>(s.count) * H * eb);
  o.status = ex->combine(expertOut.data(), o.recvWeight.data(), handle, o.y.data(), &o.combineStats);
  if (!o.status.isOk()) return o;
  o.gradExpertOut.resize(rows * H * eb);
  o.gradRowWeights.resize(rows * eb);
  o.status = ex->combineBackward(dy.data(), expertOut.data(), o.recvWeight.data(), handle, o.gradExpertOut.data(),
                                 o.gradRowWeights.data(), &o.combineBackwardStats);
  if (!o.status.isOk()) return o;
  o.gradX.resize(static_cast<std::size_t>(s.count) * H * eb);
  o.gradWeights.resize(static_cast<std::size_t>(s.count * c.topK) * eb);
  o.status = ex->dispatchBackward(gradRecvX.data(), o.recvWeight.data(), handle, o.gradX.data(), o.gradWeights.data(),
                                  &o.dispatchBackwardStats);
  return o;
}

// The first output of `got` that differs from `want`, or empty; with `received` false, only
// y and the gradients of x and the weights (the per-expert chain's replicas each dispatch
// their copy, so their received rows are tp times as many).
std::string firstDifference(const Outputs& got, const Outputs& want, bool received = true) {
  if (!got.status.isOk()) return "failed: " + got.status.toString();
  if (!want.status.isOk()) return "the reference failed: " + want.status.toString();
  const std::pair<const char*, std::pair<const std::vector<std::byte>*, const std::vector<std::byte>*>> bytes[] = {
      {"recv_x", {&got.recvX, &want.recvX}},
      {"recv_weight", {&got.recvWeight, &want.recvWeight}},
      {"y", {&got.y, &want.y}},
      {"grad expert_out", {&got.gradExpertOut, &want.gradExpertOut}},
      {"grad row weights", {&got.gradRowWeights, &want.gradRowWeights}},
      {"grad x", {&got.gradX, &want.gradX}},
      {"grad weights", {&got.gradWeights, &want.gradWeights}}};
  for (const auto& [name, pair] : bytes) {
    const bool output =
        std::string(name) == "y" || std::string(name) == "grad x" || std::string(name) == "grad weights";
    if ((received || output) && *pair.first != *pair.second) return name;
  }
  if (!received) return "";
  if (got.recvExpert != want.recvExpert) return "recv_expert";
  if (got.tokensPerExpert != want.tokensPerExpert) return "tokens per expert";
  return "";
}

// The bytes docs/moe.md (section 3) gives this rank for the dispatch, the combine and both
// backwards once per host, flat group ("ep=8"), dropless: computed from every rank's routing.
struct ExpectedBytes {
  std::uint64_t payload = 0, header = 0, count = 0, crossHost = 0, combineCrossHost = 0;
  // The combine backward sends the dispatch's rows (no headers, a word per block and round);
  // the dispatch backward the combine's, each with its slots' weight gradients.
  std::uint64_t combineBackwardPayload = 0, combineBackwardCrossHost = 0;
  std::uint64_t dispatchBackwardPayload = 0, dispatchBackwardHeader = 0, dispatchBackwardCrossHost = 0;
};

ExpectedBytes expectedBytes(const Case& c, const std::vector<int>& worldHosts, std::uint32_t seed) {
  const int R = worldSize();
  const int me = worldRank();
  const std::int64_t L = c.experts / R;
  const std::size_t w = dataTypeSize(c.dtype);
  const std::size_t row = static_cast<std::size_t>(c.hidden) * w;
  // Hosts numbered by lowest rank, members in rank order.
  std::vector<int> hostOf(static_cast<std::size_t>(R)), place(static_cast<std::size_t>(R));
  std::vector<std::vector<int>> members;
  std::vector<int> seen;
  for (int r = 0; r < R; ++r) {
    auto at = std::find(seen.begin(), seen.end(), worldHosts[static_cast<std::size_t>(r)]);
    if (at == seen.end()) {
      seen.push_back(worldHosts[static_cast<std::size_t>(r)]);
      members.emplace_back();
      at = seen.end() - 1;
    }
    const auto h = static_cast<std::size_t>(at - seen.begin());
    hostOf[static_cast<std::size_t>(r)] = static_cast<int>(h);
    place[static_cast<std::size_t>(r)] = static_cast<int>(members[h].size());
    members[h].push_back(r);
  }
  std::size_t most = 0;
  for (const auto& m : members) most = std::max(most, m.size());
  const std::size_t slots = static_cast<std::size_t>(std::min<std::int64_t>(c.topK, L));
  const std::size_t header = slots * ((L == 1 ? 0 : 4) + w);
  const std::size_t hostHeader =
      static_cast<std::size_t>(std::min<std::int64_t>(c.topK, L * static_cast<std::int64_t>(most))) * (4 + w);
  const auto forwarder = [&](int p, int h) {
    const auto& m = members[static_cast<std::size_t>(h)];
    return m[static_cast<std::size_t>(place[static_cast<std::size_t>(p)]) % m.size()];
  };
  // records[p][d]: tokens of p with an expert on d; hostRecords[p][h]: with one on host h.
  std::vector<std::vector<std::uint64_t>> records(static_cast<std::size_t>(R)),
      hostRecords(static_cast<std::size_t>(R));
  for (int p = 0; p < R; ++p) {
    const Tokens s = tokensOf(c, seed, p);
    records[static_cast<std::size_t>(p)].assign(static_cast<std::size_t>(R), 0);
    hostRecords[static_cast<std::size_t>(p)].assign(members.size(), 0);
    for (std::int64_t t = 0; t < s.count; ++t) {
      std::vector<bool> rank(static_cast<std::size_t>(R)), host(members.size());
      for (int k = 0; k < c.topK; ++k) {
        const auto d = static_cast<std::size_t>(s.ids[static_cast<std::size_t>(t * c.topK + k)] / L);
        rank[d] = true;
        host[static_cast<std::size_t>(hostOf[d])] = true;
      }
      for (std::size_t d = 0; d < rank.size(); ++d) records[static_cast<std::size_t>(p)][d] += rank[d] ? 1 : 0;
      for (std::size_t h = 0; h < host.size(); ++h) hostRecords[static_cast<std::size_t>(p)][h] += host[h] ? 1 : 0;
    }
  }
  ExpectedBytes e;
  const int mine = hostOf[static_cast<std::size_t>(me)];
  int remotePeers = 0;
  for (int d = 0; d < R; ++d) remotePeers += hostOf[static_cast<std::size_t>(d)] != mine ? 1 : 0;
  e.count = static_cast<std::uint64_t>(R - 1) * 8;
  e.crossHost = static_cast<std::uint64_t>(remotePeers) * 8;
  e.combineCrossHost = static_cast<std::uint64_t>(remotePeers) * 8;  // a word per peer in each round
  e.combineBackwardCrossHost = e.combineCrossHost;
  e.dispatchBackwardCrossHost = e.combineCrossHost;
  e.dispatchBackwardHeader = static_cast<std::uint64_t>(R - 1) * 8;
  for (int d = 0; d < R; ++d) {  // round 1: this host's ranks straight
    if (d == me || hostOf[static_cast<std::size_t>(d)] != mine) continue;
    const std::uint64_t n = records[static_cast<std::size_t>(me)][static_cast<std::size_t>(d)];
    e.payload += n * row;
    e.header += n * header;
    // The dispatch backward's round 2: this host's sources' record sums straight back.
    const std::uint64_t back = records[static_cast<std::size_t>(d)][static_cast<std::size_t>(me)];
    e.dispatchBackwardPayload += back * row;
    e.dispatchBackwardHeader += back * slots * w;
  }
  for (int p = 0; p < R; ++p) {  // the dispatch backward's round 1: sums of other hosts' sources to their forwarders
    if (hostOf[static_cast<std::size_t>(p)] == mine || forwarder(p, mine) == me) continue;
    const std::uint64_t n = records[static_cast<std::size_t>(p)][static_cast<std::size_t>(me)];
    e.dispatchBackwardPayload += n * row;
    e.dispatchBackwardHeader += n * slots * w;
  }
  for (std::size_t h = 0; h < members.size(); ++h) {  // round 1: one host record per token and other host
    if (static_cast<int>(h) == mine) continue;
    const std::uint64_t n = hostRecords[static_cast<std::size_t>(me)][h];
    e.payload += n * row;
    e.header += n * hostHeader;
    e.crossHost += n * (row + hostHeader);
    e.combineBackwardCrossHost += n * row;
  }
  for (int p = 0; p < R; ++p) {  // round 2: the records this rank forwards to its host's ranks
    if (hostOf[static_cast<std::size_t>(p)] == mine || forwarder(p, mine) != me) continue;
    const std::uint64_t crossing = hostRecords[static_cast<std::size_t>(p)][static_cast<std::size_t>(mine)];
    e.combineCrossHost += crossing * row;
    // The dispatch backward's round 2: per host record, its sum and one weight gradient per host slot.
    const std::uint64_t hostSlotCount = hostHeader / (4 + w);
    e.dispatchBackwardPayload += crossing * row;
    e.dispatchBackwardHeader += crossing * hostSlotCount * w;
    e.dispatchBackwardCrossHost += crossing * (row + hostSlotCount * w);
    for (int d : members[static_cast<std::size_t>(mine)]) {
      if (d == me) continue;
      const std::uint64_t n = records[static_cast<std::size_t>(p)][static_cast<std::size_t>(d)];
      e.payload += n * row;
      e.header += n * header;
    }
  }
  // The combine backward sends the dispatch's rows, without their headers.
  e.combineBackwardPayload = e.payload;
  return e;
}

// Whether this rank's dispatch group of `c` spans hosts of `backend`.
bool groupSpansHosts(Backend& backend, const Case& c) {
  const Mesh& mesh = backend.mesh();
  AxisSet group = mesh.allAxes();
  if (!c.group.empty()) (void)mesh.parseAxes(c.group, group);
  const std::vector<int> hosts = backend.hostOfRank();
  const std::vector<int> members = mesh.groupRanks(backend.rank(), group);
  return std::any_of(members.begin(), members.end(), [&](int r) {
    return hosts[static_cast<std::size_t>(r)] != hosts[static_cast<std::size_t>(members.front())];
  });
}

// Every case of `meshText` with the exchange Fused on `hosts` (once per host where its group
// spans hosts) against the once-per-rank and per-expert programs on `flat` (one host).
void checkCases(const std::string& meshText, Backend& hosts, Backend& flat, const std::string& placement,
                std::uint32_t& seed) {
  for (const Case& c : cases()) {
    if (c.mesh != meshText) continue;
    ++seed;
    const bool spans = groupSpansHosts(hosts, c);
    const Outputs host = runProgram(hosts, c, RoutedProgram::Fused, seed);
    const Outputs once = runProgram(flat, c, RoutedProgram::Fused, seed);
    // Capacity applies per record: per (token, expert) records drop other pairs than once per
    // rank, so the per-expert chain is compared on dropless cases only.
    const Outputs perExpert = c.capacity == 0 ? runProgram(flat, c, RoutedProgram::PerExpert, seed) : Outputs{host};
    const std::string what = fmt::format("{} E={} K={} H={} layout '{}' capacity {} on {}", c.mesh, c.experts, c.topK,
                                         c.hidden, c.layout, c.capacity, placement);
    const std::string vsOnce = firstDifference(host, once),
                      vsPerExpert = firstDifference(host, perExpert, c.layout.empty());
    EXPECT_TRUE(allRanksAgree(vsOnce.empty())) << what << ": differs from once per rank: " << vsOnce;
    EXPECT_TRUE(allRanksAgree(vsPerExpert.empty())) << what << ": differs from per expert: " << vsPerExpert;
    EXPECT_TRUE(allRanksAgree(host.oncePerHost == spans)) << what << ": once per host " << host.oncePerHost;
    EXPECT_TRUE(allRanksAgree(!once.oncePerHost)) << what << ": once per host on one host";
    if (c.mesh == "ep=8" && c.capacity == 0 && spans && host.status.isOk()) {
      const ExpectedBytes e = expectedBytes(c, hosts.hostOfRank(), seed);
      const RoutedStats& d = host.dispatchStats;
      const bool asModel = d.payloadBytes == e.payload && d.headerBytes == e.header && d.countBytes == e.count &&
                           d.crossHostBytes == e.crossHost && d.rounds == 3 &&
                           host.combineStats.crossHostBytes == e.combineCrossHost && host.combineStats.rounds == 2;
      EXPECT_TRUE(allRanksAgree(asModel))
          << what << " rank " << worldRank() << ": dispatch payload " << d.payloadBytes << " (want " << e.payload
          << "), header " << d.headerBytes << " (" << e.header << "), count " << d.countBytes << " (" << e.count
          << "), across hosts " << d.crossHostBytes << " (" << e.crossHost << "), rounds " << d.rounds
          << "; combine across hosts " << host.combineStats.crossHostBytes << " (" << e.combineCrossHost << ")";
      const RoutedStats& cb = host.combineBackwardStats;
      const RoutedStats& db = host.dispatchBackwardStats;
      const std::uint64_t words = static_cast<std::uint64_t>(worldSize() - 1) * 8;  // a word per peer and round
      const bool backwardsAsModel = cb.payloadBytes == e.combineBackwardPayload && cb.headerBytes == words &&
                                    cb.crossHostBytes == e.combineBackwardCrossHost && cb.rounds == 2 &&
                                    db.payloadBytes == e.dispatchBackwardPayload &&
                                    db.headerBytes == e.dispatchBackwardHeader &&
                                    db.crossHostBytes == e.dispatchBackwardCrossHost && db.rounds == 2;
      EXPECT_TRUE(allRanksAgree(backwardsAsModel))
          << what << " rank " << worldRank() << ": combine backward payload " << cb.payloadBytes << " (want "
          << e.combineBackwardPayload << "), header " << cb.headerBytes << " (" << words << "), across hosts "
          << cb.crossHostBytes << " (" << e.combineBackwardCrossHost << "), rounds " << cb.rounds
          << "; dispatch backward payload " << db.payloadBytes << " (" << e.dispatchBackwardPayload << "), header "
          << db.headerBytes << " (" << e.dispatchBackwardHeader << "), across hosts " << db.crossHostBytes << " ("
          << e.dispatchBackwardCrossHost << "), rounds " << db.rounds;
    }
  }
}

const char* const kMeshes[] = {"ep=8", "tp=2,ep=4"};

std::unique_ptr<Backend> backendOnHosts(const Mesh& mesh, const std::vector<int>& hosts) {
  std::unique_ptr<Backend> backend;
  const Status st = detail::createMpiBackendOnHosts(mesh, testOptions(detail::MpiAlgorithm::Auto), hosts, backend);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return backend;
}

TEST(RoutedHostDispatch, EqualsOncePerRankAndPerExpertOnEveryPlacement) {
  if (worldSize() != 8) GTEST_SKIP() << "the placements are of 8 ranks";
  std::uint32_t seed = 100;
  for (const char* meshText : kMeshes) {
    Mesh mesh;
    ASSERT_TRUE(Mesh::parse(meshText, worldSize(), mesh).isOk());
    const std::unique_ptr<Backend> flat = backendOnHosts(mesh, std::vector<int>(8, 0));
    ASSERT_TRUE(flat != nullptr);
    for (const Placement& p : placements()) {
      const std::unique_ptr<Backend> hosts = backendOnHosts(mesh, p.hosts);
      ASSERT_TRUE(hosts != nullptr);
      checkCases(meshText, *hosts, *flat, p.name, seed);
    }
  }
}

// The same where the ranks really run: one host in ordinary CI (the exchange is then once per
// rank); the multi-host tier runs it across the rig's hosts.
TEST(RoutedHostDispatch, EqualsOncePerRankAndPerExpertWhereTheRanksRun) {
  if (worldSize() != 8) GTEST_SKIP() << "the meshes are of 8 ranks";
  std::uint32_t seed = 500;
  for (const char* meshText : kMeshes) {
    Mesh mesh;
    ASSERT_TRUE(Mesh::parse(meshText, worldSize(), mesh).isOk());
    std::unique_ptr<Backend> real;
    ASSERT_TRUE(detail::createMpiBackend(mesh, testOptions(detail::MpiAlgorithm::Auto), real).isOk());
    const std::unique_ptr<Backend> flat = backendOnHosts(mesh, std::vector<int>(8, 0));
    ASSERT_TRUE(flat != nullptr);
    checkCases(meshText, *real, *flat, "where the ranks run", seed);
  }
}

// The largest |a[i] - b[i]| of two F32 buffers of one size (infinity when the sizes differ).
float largestDifference(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  if (a.size() != b.size()) return std::numeric_limits<float>::infinity();
  float most = 0;
  for (std::size_t i = 0; i < a.size() / 4; ++i)
    most = std::max(most, std::abs(decodeAt(a.data(), DataType::F32, i) - decodeAt(b.data(), DataType::F32, i)));
  return most;
}

// On values whose sums round (1/997ths, weights of 1/1000ths), once per host gives the
// once-per-rank program's received rows, its expert-side gradients (grad expert_out and grad
// row weights: dy reaches every row unchanged, through the forwarder's copy) and grad w (each
// value copied back, never summed) bit for bit. y and grad x are sums of a token's rows: once
// per rank the source adds every rank's row in k order; once per host a forwarder first adds
// the rows of its host's ranks and one sum crosses back, so a token whose experts lie on two or
// more ranks of another host has its terms added in another order. The two agree bit for bit
// where no token has two ranks on one other host (a host per rank), elsewhere up to the
// reassociation of a float sum (terms below 25 in size here, 8 per token: within 1e-4; in
// blocks of 4 + 4 the largest difference is 4e-6).
TEST(RoutedHostDispatch, RoundsOnlyWhereTheSummationOrderDiffers) {
  if (worldSize() != 8) GTEST_SKIP() << "the placements are of 8 ranks";
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("ep=8", worldSize(), mesh).isOk());
  const std::unique_ptr<Backend> flat = backendOnHosts(mesh, std::vector<int>(8, 0));
  ASSERT_TRUE(flat != nullptr);
  const Case c{"ep=8", "", "", 64, 8, 16, 0, DataType::F32};
  std::uint32_t seed = 900;
  for (const Placement& p : placements()) {
    ++seed;
    const std::unique_ptr<Backend> hosts = backendOnHosts(mesh, p.hosts);
    ASSERT_TRUE(hosts != nullptr);
    const Outputs host = runProgram(*hosts, c, RoutedProgram::Fused, seed, false);
    const Outputs once = runProgram(*flat, c, RoutedProgram::Fused, seed, false);
    ASSERT_TRUE(allRanksAgree(host.status.isOk() && once.status.isOk() && host.oncePerHost))
        << p.name << ": " << host.status.toString() << " / " << once.status.toString();
    Outputs unsummed = host;  // every output but the two sums
    unsummed.y = once.y;
    unsummed.gradX = once.gradX;
    const std::string differs = firstDifference(unsummed, once);
    EXPECT_TRUE(allRanksAgree(differs.empty())) << p.name << ": differs from once per rank: " << differs;
    if (p.name == "a host per rank") {
      EXPECT_TRUE(allRanksAgree(host.y == once.y && host.gradX == once.gradX))
          << p.name << ": y or grad x differ from once per rank with one rank per host";
    } else {
      const float y = largestDifference(host.y, once.y), gradX = largestDifference(host.gradX, once.gradX);
      EXPECT_TRUE(allRanksAgree(y <= 1e-4f && gradX <= 1e-4f))
          << p.name << " rank " << worldRank() << ": y differs by up to " << y << ", grad x by " << gradX;
      // With 8 experts a token, over 4 ranks of the other host, some sums do round otherwise:
      // the check above sees the reassociation it allows.
      if (p.name == "blocks 4+4") {
        EXPECT_FALSE(allRanksAgree(host.y == once.y && host.gradX == once.gradX))
            << p.name << ": y and grad x equal once per rank's bit for bit on every rank";
      }
    }
  }
}

// A bad routing on one rank fails every rank's dispatch, before any row moves: the count
// exchange carries its verdict to every peer, on whichever host.
TEST(RoutedHostDispatch, ABadRoutingOnOneRankFailsEveryRank) {
  if (worldSize() != 8) GTEST_SKIP() << "the placements are of 8 ranks";
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("ep=8", worldSize(), mesh).isOk());
  const std::unique_ptr<Backend> hosts = backendOnHosts(mesh, placements()[1].hosts);
  ASSERT_TRUE(hosts != nullptr);
  RoutedExchangeOptions options;
  options.numExperts = 16;
  options.topK = 2;
  options.hidden = 4;
  options.program = RoutedProgram::Fused;
  std::unique_ptr<RoutedExchange> ex;
  ASSERT_TRUE(RoutedExchange::create(*hosts, options, ex).isOk());
  ASSERT_TRUE(ex->oncePerHost());
  const std::vector<float> x(3 * 4, 1.0f), w(3 * 2, 0.5f);
  std::vector<std::int64_t> ids = {0, 9, 3, 12, 5, 15};
  if (worldRank() == 5) ids[3] = 16;  // out of range
  RoutedDispatch handle;
  const Status st = ex->dispatch(x.data(), ids.data(), w.data(), 3, handle);
  const StatusCode want = worldRank() == 5 ? StatusCode::InvalidArgument : StatusCode::Mismatch;
  EXPECT_TRUE(allRanksAgree(st.code() == want)) << st.toString();
  // The exchange still works afterwards.
  ids[3] = 12;
  const Status again = ex->dispatch(x.data(), ids.data(), w.data(), 3, handle);
  EXPECT_TRUE(allRanksAgree(again.isOk())) << again.toString();
}

// A null buffer on one rank fails combine and both backwards on every rank that exchanges with
// it (InvalidArgument there, Mismatch on the others, learnt from the words of the first round
// or, where replicas split their tokens, from the AllGather over tp that follows), never a
// hang; the handle still serves the calls afterwards.
TEST(RoutedHostDispatch, ANullBufferOnOneRankFailsEveryRankOfTheCall) {
  if (worldSize() != 8) GTEST_SKIP() << "the placements are of 8 ranks";
  struct Shape {
    const char* mesh;
    const char* group;
    const char* layout;
  };
  const int bad = 5;
  for (const Shape& shape : {Shape{"ep=8", "", ""}, Shape{"tp=2,ep=4", "ep", "tp=P"}}) {
    Mesh mesh;
    ASSERT_TRUE(Mesh::parse(shape.mesh, worldSize(), mesh).isOk());
    const std::unique_ptr<Backend> hosts = backendOnHosts(mesh, placements()[3].hosts);  // every group spans hosts
    ASSERT_TRUE(hosts != nullptr);
    RoutedExchangeOptions options;
    options.numExperts = 16;
    options.topK = 2;
    options.hidden = 4;
    options.tokenLayout = shape.layout;
    options.program = RoutedProgram::Fused;
    if (*shape.group != 0) {
      ASSERT_TRUE(mesh.parseAxes(shape.group, options.group).isOk());
    }
    std::unique_ptr<RoutedExchange> ex;
    ASSERT_TRUE(RoutedExchange::create(*hosts, options, ex).isOk());
    ASSERT_TRUE(allRanksAgree(ex->oncePerHost())) << shape.mesh;
    // The ranks that exchange with `bad` in a call without the AllGather over tp.
    const std::vector<int> group = mesh.groupRanks(bad, options.group.empty() ? mesh.allAxes() : options.group);
    const bool inGroup = std::find(group.begin(), group.end(), worldRank()) != group.end();
    const std::vector<float> x(3 * 4, 1.0f), w(3 * 2, 0.5f);
    const std::vector<std::int64_t> ids = {0, 9, 3, 12, 5, 15};
    RoutedDispatch handle;
    ASSERT_TRUE(allRanksAgree(ex->dispatch(x.data(), ids.data(), w.data(), 3, handle).isOk()));
    const auto rows = static_cast<std::size_t>(handle.rows());
    std::vector<float> recvWeight(rows), expertOut(rows * 4, 1.0f), gradExpertOut(rows * 4), gradRowWeights(rows);
    ASSERT_TRUE(allRanksAgree(ex->receive(handle, nullptr, nullptr, recvWeight.data()).isOk()));
    std::vector<float> y(3 * 4), dy(3 * 4, 1.0f), gradX(3 * 4), gradW(3 * 2);
    const bool mine = worldRank() == bad;
    // Where the call fails: on `bad` with InvalidArgument, on `others` with Mismatch.
    const auto failsAsItShould = [&](const Status& st, bool others) {
      if (mine) return st.code() == StatusCode::InvalidArgument;
      return others ? st.code() == StatusCode::Mismatch : st.isOk();
    };
    const bool split = *shape.layout != 0;
    const Status combined = ex->combine(expertOut.data(), recvWeight.data(), handle, mine ? nullptr : y.data());
    EXPECT_TRUE(allRanksAgree(failsAsItShould(combined, inGroup || split)))
        << shape.mesh << ": " << combined.toString();
    const Status combineBack = ex->combineBackward(mine ? nullptr : dy.data(), expertOut.data(), recvWeight.data(),
                                                   handle, gradExpertOut.data(), gradRowWeights.data());
    EXPECT_TRUE(allRanksAgree(failsAsItShould(combineBack, inGroup))) << shape.mesh << ": " << combineBack.toString();
    const Status dispatchBack = ex->dispatchBackward(expertOut.data(), gradRowWeights.data(), handle,
                                                     mine ? nullptr : gradX.data(), gradW.data());
    EXPECT_TRUE(allRanksAgree(failsAsItShould(dispatchBack, inGroup || split)))
        << shape.mesh << ": " << dispatchBack.toString();
    const Status again =
        ex->dispatchBackward(expertOut.data(), gradRowWeights.data(), handle, gradX.data(), gradW.data());
    EXPECT_TRUE(allRanksAgree(again.isOk())) << shape.mesh << ": " << again.toString();
  }
}

}  // namespace
}  // namespace chimera
