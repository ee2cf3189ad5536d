// SPDX-License-Identifier: Apache-2.0
// Implements link sharing: the shared resources a round of transfers occupies, and its time.
#include "cost/fabric.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/check.hpp"

namespace chimera::detail {

namespace {

// Resources are numbered in one flat range so that loads add up in a vector:
//   [0, R) GPU transmit link/port, [R, 2R) receive, [2R, 3R) NIC transmit, [3R, 4R) NIC
//   receive (per GPU, or per host on a host network: host h uses the slots of rank h, as
//   there are never more hosts than ranks), 4R the memory bus, then one CPU link per ordered
//   pair of domains (PCIe), then one memory bus per host (host network).
class ResourceIndex {
 public:
  // CPU links between domains exist on PCIe only; other fabrics get none (a multi-node
  // topology of thousands of nodes would otherwise allocate nodes^2 unused resources).
  explicit ResourceIndex(const Topology& topology)
      : ranks_(topology.ranks),
        domains_(topology.fabric == Fabric::PcieDomains ? domainCount(topology) : 0),
        hosts_(topology.fabric == Fabric::HostNetwork ? domainCount(topology) : 0),
        perHost_(topology.fabric == Fabric::HostNetwork) {}

  int count() const { return 4 * ranks_ + 1 + domains_ * domains_ + hosts_; }
  int tx(int rank) const { return rank; }
  int rx(int rank) const { return ranks_ + rank; }
  int nicTx(int owner) const { return 2 * ranks_ + owner; }  // owner: the GPU, or the host
  int nicRx(int owner) const { return 3 * ranks_ + owner; }
  int bus() const { return 4 * ranks_; }
  int cpuLink(int fromDomain, int toDomain) const { return 4 * ranks_ + 1 + fromDomain * domains_ + toDomain; }
  int hostBus(int host) const { return 4 * ranks_ + 1 + domains_ * domains_ + host; }
  // Resources priced at the local link's bandwidth (the others are NICs or CPU links).
  bool isLocal(int resource) const { return resource < 2 * ranks_ || resource == bus() || resource >= hostBus(0); }

  std::string name(const Topology& topology, int resource) const {
    const char* gpu = topology.fabric == Fabric::SharedMemory ? "rank" : "gpu";
    const char* owner = perHost_ ? "host" : "gpu";
    if (resource < ranks_) return fmt::format("{} {} tx", gpu, resource);
    if (resource < 2 * ranks_) return fmt::format("{} {} rx", gpu, resource - ranks_);
    if (resource < 3 * ranks_) return fmt::format("nic of {} {} tx", owner, resource - 2 * ranks_);
    if (resource < 4 * ranks_) return fmt::format("nic of {} {} rx", owner, resource - 3 * ranks_);
    if (resource == bus()) return "memory bus";
    if (resource >= hostBus(0)) return fmt::format("memory bus of host {}", resource - hostBus(0));
    const int pair = resource - bus() - 1;
    return fmt::format("cpu link domain {}->{}", pair / domains_, pair % domains_);
  }

 private:
  int ranks_;
  int domains_;
  int hosts_;
  bool perHost_;
};

struct Route {
  int resources[3] = {-1, -1, -1};
  double alphaSeconds = 0;
  bool usesPorts = false;  // occupies the GPU's own tx/rx link or port (subject to the peer penalty)
};

Route routeOf(const Topology& topology, const ResourceIndex& index, int src, int dst) {
  Route route;
  const int srcDomain = domainOf(topology, src);
  const int dstDomain = domainOf(topology, dst);
  switch (topology.fabric) {
    case Fabric::SharedMemory:
      route.resources[0] = index.bus();
      route.alphaSeconds = topology.local.alphaSeconds;
      return route;
    case Fabric::PcieDomains:
      route.resources[0] = index.tx(src);
      route.resources[1] = index.rx(dst);
      route.usesPorts = true;
      route.alphaSeconds = topology.local.alphaSeconds;
      if (srcDomain != dstDomain) {
        route.resources[2] = index.cpuLink(srcDomain, dstDomain);
        route.alphaSeconds = topology.cross.alphaSeconds;
      }
      return route;
    case Fabric::NvSwitch:
    case Fabric::NvSwitchMultiNode:
      if (srcDomain == dstDomain) {
        route.resources[0] = index.tx(src);
        route.resources[1] = index.rx(dst);
        route.usesPorts = true;
        route.alphaSeconds = topology.local.alphaSeconds;
      } else {
        route.resources[0] = index.nicTx(src);
        route.resources[1] = index.nicRx(dst);
        route.alphaSeconds = topology.cross.alphaSeconds;
      }
      return route;
    case Fabric::HostNetwork:
      if (srcDomain == dstDomain) {
        route.resources[0] = index.hostBus(srcDomain);
        route.alphaSeconds = topology.local.alphaSeconds;
      } else {
        route.resources[0] = index.nicTx(srcDomain);
        route.resources[1] = index.nicRx(dstDomain);
        route.alphaSeconds = topology.cross.alphaSeconds;
      }
      return route;
  }
  CHIMERA_ASSERT(false);
  return route;
}

}  // namespace

namespace {

// What one round puts on each resource, before it is turned into time.
struct RoundLoad {
  explicit RoundLoad(const Topology& topology)
      : index(topology),
        load(static_cast<std::size_t>(index.count()), 0.0),
        peers(static_cast<std::size_t>(2 * topology.ranks), 0) {}
  ResourceIndex index;
  std::vector<double> load;  // bytes per resource
  std::vector<int> peers;    // distinct peers per GPU port (tx then rx), for the peer penalty
  double latencySeconds = 0;
  double crossBytes = 0;
};

RoundCost evaluate(const Topology& topology, const RoundLoad& round) {
  RoundCost cost;
  cost.latencySeconds = round.latencySeconds;
  cost.crossBytes = round.crossBytes;
  const ResourceIndex& index = round.index;
  for (int resource = 0; resource < index.count(); ++resource) {
    const double bytes = round.load[static_cast<std::size_t>(resource)];
    if (bytes <= 0) continue;
    double capacity = topology.local.bytesPerSecond;
    if (resource < 2 * topology.ranks) {
      const auto numPeers = static_cast<double>(round.peers[static_cast<std::size_t>(resource)]);
      capacity /= 1.0 + topology.peerPenalty * std::max(0.0, numPeers - 1.0);
    } else if (!index.isLocal(resource)) {
      capacity = topology.cross.bytesPerSecond;  // NIC or CPU link
    }
    const double seconds = bytes / capacity;
    if (seconds > cost.transferSeconds) {
      cost.transferSeconds = seconds;
      cost.bottleneck = index.name(topology, resource);
    }
  }
  return cost;
}

}  // namespace

RoundCost priceRound(const Topology& topology, std::span<const Flow> flows) {
  RoundLoad round(topology);
  const ResourceIndex& index = round.index;
  // Distinct peers per GPU port, for the NVSwitch fan-out / fan-in penalty.
  std::vector<std::vector<int>> peers(static_cast<std::size_t>(2 * topology.ranks));
  for (const Flow& flow : flows) {
    if (flow.src == flow.dst || flow.bytes <= 0) continue;
    const Route route = routeOf(topology, index, flow.src, flow.dst);
    if (domainOf(topology, flow.src) != domainOf(topology, flow.dst)) round.crossBytes += flow.bytes;
    round.latencySeconds = std::max(round.latencySeconds, route.alphaSeconds);
    for (const int resource : route.resources) {
      if (resource >= 0) round.load[static_cast<std::size_t>(resource)] += flow.bytes;
    }
    if (route.usesPorts) {
      auto addPeer = [](std::vector<int>& list, int peer) {
        if (std::find(list.begin(), list.end(), peer) == list.end()) list.push_back(peer);
      };
      addPeer(peers[static_cast<std::size_t>(index.tx(flow.src))], flow.dst);
      addPeer(peers[static_cast<std::size_t>(index.rx(flow.dst))], flow.src);
    }
  }
  for (std::size_t port = 0; port < peers.size(); ++port) round.peers[port] = static_cast<int>(peers[port].size());
  return evaluate(topology, round);
}

RoundCost priceAllToAllRound(const Topology& topology, const std::vector<std::vector<int>>& groups, double bytes) {
  RoundLoad round(topology);
  const ResourceIndex& index = round.index;
  if (bytes <= 0) return evaluate(topology, round);
  std::vector<std::pair<int, int>> counts;  // (domain, members of the group in it), by domain
  for (const auto& group : groups) {
    const auto n = static_cast<int>(group.size());
    if (n < 2) continue;
    std::vector<int> domains;
    domains.reserve(group.size());
    for (const int rank : group) domains.push_back(domainOf(topology, rank));
    std::sort(domains.begin(), domains.end());
    counts.clear();
    for (const int d : domains) {
      if (counts.empty() || counts.back().first != d) counts.push_back({d, 0});
      ++counts.back().second;
    }
    const bool crosses = counts.size() > 1;
    for (const auto& entry : counts) round.crossBytes += 1.0 * entry.second * (n - entry.second) * bytes;
    bool within = false;  // some pair of members shares a domain
    for (const auto& entry : counts) within = within || entry.second > 1;
    const double alpha = std::max(within ? topology.local.alphaSeconds : 0.0,
                                  crosses && topology.fabric != Fabric::NvSwitch ? topology.cross.alphaSeconds : 0.0);
    const auto countIn = [&](int domain) {
      return std::lower_bound(counts.begin(), counts.end(), std::make_pair(domain, 0))->second;
    };
    switch (topology.fabric) {
      case Fabric::SharedMemory:
        round.load[static_cast<std::size_t>(index.bus())] += static_cast<double>(n) * (n - 1) * bytes;
        round.latencySeconds = std::max(round.latencySeconds, topology.local.alphaSeconds);
        break;  // one domain: every route has the local alpha
      case Fabric::PcieDomains:
      case Fabric::NvSwitch:
        for (const int rank : group) {
          round.load[static_cast<std::size_t>(index.tx(rank))] += (n - 1) * bytes;
          round.load[static_cast<std::size_t>(index.rx(rank))] += (n - 1) * bytes;
          round.peers[static_cast<std::size_t>(index.tx(rank))] += n - 1;
          round.peers[static_cast<std::size_t>(index.rx(rank))] += n - 1;
        }
        round.latencySeconds = std::max(round.latencySeconds, alpha);
        if (topology.fabric == Fabric::PcieDomains && crosses) {
          for (const auto& [a, countA] : counts) {
            for (const auto& [b, countB] : counts) {
              if (a != b) round.load[static_cast<std::size_t>(index.cpuLink(a, b))] += 1.0 * countA * countB * bytes;
            }
          }
        }
        break;
      case Fabric::NvSwitchMultiNode:
        for (const int rank : group) {
          const int inNode = countIn(domainOf(topology, rank)) - 1;
          const int across = n - 1 - inNode;
          round.load[static_cast<std::size_t>(index.tx(rank))] += inNode * bytes;
          round.load[static_cast<std::size_t>(index.rx(rank))] += inNode * bytes;
          round.peers[static_cast<std::size_t>(index.tx(rank))] += inNode;
          round.peers[static_cast<std::size_t>(index.rx(rank))] += inNode;
          round.load[static_cast<std::size_t>(index.nicTx(rank))] += across * bytes;
          round.load[static_cast<std::size_t>(index.nicRx(rank))] += across * bytes;
        }
        round.latencySeconds = std::max(round.latencySeconds, alpha);
        break;
      case Fabric::HostNetwork:
        // A host's c members send to each other over its bus and to the n - c others over its NIC.
        for (const auto& [host, c] : counts) {
          round.load[static_cast<std::size_t>(index.hostBus(host))] += 1.0 * c * (c - 1) * bytes;
          round.load[static_cast<std::size_t>(index.nicTx(host))] += 1.0 * c * (n - c) * bytes;
          round.load[static_cast<std::size_t>(index.nicRx(host))] += 1.0 * c * (n - c) * bytes;
        }
        round.latencySeconds = std::max(round.latencySeconds, alpha);
        break;
    }
  }
  return evaluate(topology, round);
}

}  // namespace chimera::detail
