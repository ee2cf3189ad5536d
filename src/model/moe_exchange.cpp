// SPDX-License-Identifier: Apache-2.0
// MoE dispatch and combine as programs for the cost model: a framework's dispatcher vs
// chimera's routed exchange (docs/model.md, "MoE routing").
#include "model/moe_exchange.hpp"

#include "chimera/planning/routed_plan.hpp"
#include "chimera/planning/topology.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace chimera::detail {
namespace {

// Expert ids + weights each token carries in the AllGather dispatcher: int64 and f32.
constexpr std::int64_t kRoutingBytesPerExpert = 8 + 4;
// Per-expert counts are 4-byte integers.
constexpr std::int64_t kCountBytes = 4;

// Share of the mean rows that rank `index` of a group receives: the first rank `imbalance`,
// the others evenly what is left (the shares sum to n).
double loadShare(int index, int n, double imbalance) {
  if (n <= 1) return 1.0;
  return index == 0 ? imbalance : (n - imbalance) / (n - 1);
}

// Every rank of every group sends `rowsPerRank` x share(dst) rows to each other rank dst
// (reversed for a combine), with the pack and unpack passes of the busiest rank.
CommStep routedStep(const MoeExchange& x, double rowsPerRank) {
  std::vector<Transfer> transfers;
  std::map<int, std::uint64_t> passed;  // bytes each rank packs and unpacks
  for (const std::vector<int>& group : x.groups) {
    const int n = static_cast<int>(group.size());
    for (int s = 0; s < n; ++s) {
      for (int d = 0; d < n; ++d) {
        if (s == d) continue;
        const double rows = rowsPerRank * loadShare(d, n, x.imbalance);
        const auto bytes = static_cast<std::uint64_t>(std::llround(rows * static_cast<double>(x.rowBytes)));
        const int from = x.combine ? group[static_cast<std::size_t>(d)] : group[static_cast<std::size_t>(s)];
        const int to = x.combine ? group[static_cast<std::size_t>(s)] : group[static_cast<std::size_t>(d)];
        transfers.push_back({from, to, bytes});
        passed[from] += bytes;
        passed[to] += bytes;
      }
    }
  }
  CommStep step = CommStep::manyToMany(std::move(transfers));
  for (const auto& [rank, bytes] : passed) step.localBytes = std::max(step.localBytes, bytes);
  step.localLaunches = 2;
  return step;
}

void addCountExchange(const MoeExchange& x, CommProgram& program) {
  if (!x.countExchange || x.groups.empty() || x.groups.front().size() < 2) return;
  program.push_back(
      CommStep::collective(OpKind::AllToAll, x.groups, static_cast<std::uint64_t>(kCountBytes * x.experts)));
}

}  // namespace

CommProgram moeDispatcherProgram(const MoeExchange& x, MoeDispatcher dispatcher) {
  CommProgram program;
  if (x.groups.empty() || x.groups.front().size() < 2) return program;
  const auto n = static_cast<std::int64_t>(x.groups.front().size());
  if (dispatcher == MoeDispatcher::AllToAll) {
    addCountExchange(x, program);
    program.push_back(routedStep(x, static_cast<double>(x.tokens) * x.topK / static_cast<double>(n)));
    return program;
  }
  // The rows of its own experts the most loaded rank picks from (or puts back into) the
  // gathered tokens: imbalance x T K rows.
  const auto kept =
      static_cast<std::uint64_t>(std::llround(x.imbalance * static_cast<double>(x.tokens * x.topK * x.rowBytes)));
  CommStep step =
      x.combine
          ? CommStep::collective(OpKind::ReduceScatter, x.groups, static_cast<std::uint64_t>(n * x.tokens * x.rowBytes))
          : CommStep::collective(OpKind::AllGather, x.groups,
                                 static_cast<std::uint64_t>(x.tokens * (x.rowBytes + kRoutingBytesPerExpert * x.topK)));
  step.localBytes = kept;
  step.localLaunches = 1;
  program.push_back(std::move(step));
  return program;
}

CommProgram moeRoutedProgram(const MoeExchange& x) {
  CommProgram program;
  if (x.groups.empty() || x.groups.front().size() < 2) return program;
  const int n = static_cast<int>(x.groups.front().size());
  const double distinct = expectedDistinctRanks(x.experts, n, x.topK);
  addCountExchange(x, program);
  program.push_back(routedStep(x, static_cast<double>(x.tokens) * distinct / n));
  return program;
}

CommProgram moeHostProgram(const MoeExchange& x) {
  CommProgram program;
  if (x.groups.empty() || x.groups.front().size() < 2 || x.hosts.empty()) return program;
  const int n = static_cast<int>(x.groups.front().size());
  const double perRank = static_cast<double>(x.tokens) * expectedDistinctRanks(x.experts, n, x.topK) / n;
  const auto bytes = [&](double rows) {
    return static_cast<std::uint64_t>(std::llround(rows * static_cast<double>(x.rowBytes)));
  };
  // Round 1 (dispatch): straight inside the source's host, one row per token and other host
  // across; round 2: the forwarders' fan-out. A combine runs them the other way, in reverse.
  std::vector<Transfer> first, second;
  std::map<int, std::uint64_t> passedFirst, passedSecond;  // bytes each rank packs and unpacks per round
  bool spans = false;
  for (const std::vector<int>& group : x.groups) {
    const std::vector<std::vector<int>> members = membersByHost(group, x.hosts);  // group indices per host
    spans = spans || members.size() > 1;
    const auto add = [&](bool inFirst, int s, int d, std::uint64_t b) {
      if (s == d || b == 0) return;
      const int from = group[static_cast<std::size_t>(x.combine ? d : s)];
      const int to = group[static_cast<std::size_t>(x.combine ? s : d)];
      (inFirst ? first : second).push_back({from, to, b});
      std::map<int, std::uint64_t>& passed = inFirst ? passedFirst : passedSecond;
      passed[from] += b;
      passed[to] += b;
    };
    for (std::size_t own = 0; own < members.size(); ++own) {
      for (std::size_t place = 0; place < members[own].size(); ++place) {
        const int s = members[own][place];
        for (std::size_t h = 0; h < members.size(); ++h) {
          const std::vector<int>& there = members[h];
          if (h == own) {
            for (int d : there) add(true, s, d, bytes(perRank * loadShare(d, n, x.imbalance)));
            continue;
          }
          const int forwarder = there[place % there.size()];
          const auto held = static_cast<std::int64_t>(x.experts / n * static_cast<std::int64_t>(there.size()));
          add(true, s, forwarder, bytes(static_cast<double>(x.tokens) * expectedHit(x.experts, held, x.topK)));
          for (int d : there) add(false, forwarder, d, bytes(perRank * loadShare(d, n, x.imbalance)));
        }
      }
    }
  }
  if (!spans) return program;
  addCountExchange(x, program);
  const auto roundStep = [](std::vector<Transfer>& round, const std::map<int, std::uint64_t>& passed) {
    CommStep step = CommStep::manyToMany(std::move(round));
    for (const auto& [rank, b] : passed) step.localBytes = std::max(step.localBytes, b);
    step.localLaunches = 2;
    return step;
  };
  if (x.combine) {
    program.push_back(roundStep(second, passedSecond));
    program.push_back(roundStep(first, passedFirst));
  } else {
    program.push_back(roundStep(first, passedFirst));
    program.push_back(roundStep(second, passedSecond));
  }
  return program;
}

std::int64_t programBytes(const CommProgram& program) {
  std::int64_t total = 0;
  for (const CommStep& step : program) {
    if (step.kind == OpKind::ManyToMany) {
      for (const Transfer& t : step.transfers) total += t.src != t.dst ? static_cast<std::int64_t>(t.bytes) : 0;
      continue;
    }
    for (const std::vector<int>& group : step.groups) {
      const auto n = static_cast<std::int64_t>(group.size());
      const auto l = static_cast<std::int64_t>(step.bytesPerRank);
      switch (step.kind) {
        case OpKind::AllGather: total += n * (n - 1) * l; break;
        case OpKind::AllReduce: total += 2 * (n - 1) * l; break;
        case OpKind::Broadcast: total += (n - 1) * l; break;
        default:  // ReduceScatter, AllToAll: every rank sends (n-1)/n of its L
          total += (n - 1) * l;
          break;
      }
    }
  }
  return total;
}

}  // namespace chimera::detail
