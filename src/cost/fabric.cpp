// SPDX-License-Identifier: Apache-2.0
#include "cost/fabric.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "common/check.hpp"

namespace chimera::detail {

namespace {

// Resources are numbered in one flat range so that loads add up in a vector:
//   [0, R) GPU transmit link/port, [R, 2R) receive, [2R, 3R) NIC transmit, [3R, 4R) NIC
//   receive, 4R the memory bus, then one CPU link per ordered pair of domains.
class ResourceIndex {
 public:
  explicit ResourceIndex(const Topology& topology)
      : ranks_(topology.ranks), domains_(topology.ranks / topology.ranksPerDomain) {}

  int count() const { return 4 * ranks_ + 1 + domains_ * domains_; }
  int tx(int rank) const { return rank; }
  int rx(int rank) const { return ranks_ + rank; }
  int nicTx(int rank) const { return 2 * ranks_ + rank; }
  int nicRx(int rank) const { return 3 * ranks_ + rank; }
  int bus() const { return 4 * ranks_; }
  int cpuLink(int fromDomain, int toDomain) const { return 4 * ranks_ + 1 + fromDomain * domains_ + toDomain; }

  std::string name(const Topology& topology, int resource) const {
    const char* gpu = topology.fabric == Fabric::SharedMemory ? "rank" : "gpu";
    if (resource < ranks_) return fmt::format("{} {} tx", gpu, resource);
    if (resource < 2 * ranks_) return fmt::format("{} {} rx", gpu, resource - ranks_);
    if (resource < 3 * ranks_) return fmt::format("nic of gpu {} tx", resource - 2 * ranks_);
    if (resource < 4 * ranks_) return fmt::format("nic of gpu {} rx", resource - 3 * ranks_);
    if (resource == bus()) return "memory bus";
    const int pair = resource - bus() - 1;
    return fmt::format("cpu link domain {}->{}", pair / domains_, pair % domains_);
  }

 private:
  int ranks_;
  int domains_;
};

struct Route {
  int resources[3] = {-1, -1, -1};
  double alphaSeconds = 0;
  bool usesPorts = false;  // occupies the GPU's own tx/rx link or port (subject to the peer penalty)
};

Route routeOf(const Topology& topology, const ResourceIndex& index, int src, int dst) {
  Route route;
  const int srcDomain = src / topology.ranksPerDomain;
  const int dstDomain = dst / topology.ranksPerDomain;
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
  }
  CHIMERA_ASSERT(false);
  return route;
}

}  // namespace

RoundCost priceRound(const Topology& topology, std::span<const Flow> flows) {
  const ResourceIndex index(topology);
  std::vector<double> load(static_cast<std::size_t>(index.count()), 0.0);
  // Distinct peers per GPU port, for the NVSwitch fan-out / fan-in penalty.
  std::vector<std::vector<int>> peers(static_cast<std::size_t>(2 * topology.ranks));
  RoundCost cost;
  for (const Flow& flow : flows) {
    if (flow.src == flow.dst || flow.bytes <= 0) continue;
    const Route route = routeOf(topology, index, flow.src, flow.dst);
    cost.latencySeconds = std::max(cost.latencySeconds, route.alphaSeconds);
    for (const int resource : route.resources) {
      if (resource >= 0) load[static_cast<std::size_t>(resource)] += flow.bytes;
    }
    if (route.usesPorts) {
      auto addPeer = [](std::vector<int>& list, int peer) {
        if (std::find(list.begin(), list.end(), peer) == list.end()) list.push_back(peer);
      };
      addPeer(peers[static_cast<std::size_t>(index.tx(flow.src))], flow.dst);
      addPeer(peers[static_cast<std::size_t>(index.rx(flow.dst))], flow.src);
    }
  }
  for (int resource = 0; resource < index.count(); ++resource) {
    const double bytes = load[static_cast<std::size_t>(resource)];
    if (bytes <= 0) continue;
    double capacity = topology.local.bytesPerSecond;
    if (resource < 2 * topology.ranks) {
      const auto numPeers = static_cast<double>(peers[static_cast<std::size_t>(resource)].size());
      capacity /= 1.0 + topology.peerPenalty * std::max(0.0, numPeers - 1.0);
    } else if (resource != index.bus()) {
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

}  // namespace chimera::detail
