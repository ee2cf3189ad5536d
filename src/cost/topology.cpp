// SPDX-License-Identifier: Apache-2.0
// Topology validation, the named presets and lookup by name or profile path. Every preset
// parameter and its source is listed in docs/cost_model.md; keep the two in step.
#include "chimera/planning/topology.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/check.hpp"

namespace chimera {

namespace {

constexpr std::array<std::pair<Fabric, std::string_view>, 5> kFabricNames = {{
    {Fabric::SharedMemory, "shared-memory"},
    {Fabric::PcieDomains, "pcie-domains"},
    {Fabric::NvSwitch, "nvswitch"},
    {Fabric::NvSwitchMultiNode, "nvswitch-multinode"},
    {Fabric::HostNetwork, "host-network"},
}};

constexpr double kGB = 1e9;  // GB/s as vendors quote it: 10^9 bytes per second
// Microseconds; dividing keeps 10 us == 1e-05 exactly, so profiles print round numbers.
constexpr double us(double x) { return x / 1e6; }
constexpr int kMaxPresetCount = 1 << 17;  // bound for "host:N" / "multinode-ib:N" (1M GPUs)

bool finiteNonNegative(double x) { return std::isfinite(x) && x >= 0; }
bool finitePositive(double x) { return std::isfinite(x) && x > 0; }

bool usesCrossLink(Fabric fabric) {
  return fabric == Fabric::PcieDomains || fabric == Fabric::NvSwitchMultiNode || fabric == Fabric::HostNetwork;
}

// This machine: 8 MPI processes on 2 cores, exchanging through one memory system. The median
// of four chimera-bench --calibrate runs on the quiet machine (docs/cost_model.md, "host"):
// per-primitive factors, a fixed step cost (mostly the scheduling delay of a step whose
// ranks take turns on 2 cores), the reductions inside the reducing primitives' factors, and
// the memory bandwidth of a pack on every rank at once, which prices the executor's local
// passes.
Topology hostPreset(int processes) {
  Topology t;
  t.name = processes == 8 ? "host" : fmt::format("host:{}", processes);
  t.fabric = Fabric::SharedMemory;
  t.ranks = processes;
  t.ranksPerDomain = processes;
  t.local = {us(9.8), 9.5 * kGB};
  t.computeSlots = 2;
  t.stepSeconds = us(72);
  t.peerSeconds = us(10);
  // At 4-64 KiB the model's predicted gains of a few percent were measured as losses of up
  // to 25 % and gains alike (docs/cost_model.md, "Decision margin").
  t.fusionMargin = 0.10;
  const auto factor = [&t](OpKind kind, double value) {
    t.transferFactors.values[static_cast<std::size_t>(transferKindIndex(kind))] = value;
  };
  factor(OpKind::AllReduce, 1.06);
  factor(OpKind::ReduceScatter, 1.05);
  factor(OpKind::AllGather, 1.04);
  factor(OpKind::AllToAll, 1.22);
  factor(OpKind::Broadcast, 0.91);
  factor(OpKind::ManyToMany, 0.79);
  t.device.memoryBytesPerSecond = 3.2 * kGB;
  return t;
}

// The paper's node: 8x RTX 4080 on PCIe 4.0 x16, two NUMA halves (GPUs 0-3, 4-7). GeForce
// cards have no peer-to-peer, so every copy is staged through host memory; cross-half
// traffic also crosses the inter-socket link.
Topology pcie4080Preset() {
  Topology t;
  t.name = "pcie-4080x8";
  t.fabric = Fabric::PcieDomains;
  t.ranks = 8;
  t.ranksPerDomain = 4;
  t.local = {us(10), 22 * kGB};
  t.cross = {us(15), 12 * kGB};
  // Staged copies: a step ends with a host round trip; every peer is its own staged copy.
  t.stepSeconds = us(12);
  t.peerSeconds = us(3);
  t.device = {716.8 * kGB, us(4), 97.5e12};  // 256-bit GDDR6X at 22.4 Gb/s; FP16 tensor dense
  return t;
}

// One NVSwitch node of 8 GPUs with NVLink 4 (900 GB/s bidirectional per GPU).
Topology nvswitchPreset(std::string name, double peerPenalty, DeviceParams device) {
  Topology t;
  t.name = std::move(name);
  t.fabric = Fabric::NvSwitch;
  t.ranks = 8;
  t.ranksPerDomain = 8;
  t.local = {us(3), 360 * kGB};
  t.peerPenalty = peerPenalty;
  t.stepSeconds = us(8);  // collective launch + end-of-step synchronisation
  t.peerSeconds = us(1);  // one more NVLink peer connection in a grouped send/recv
  t.device = device;
  return t;
}

// H100 SXM5: HBM3 3.35 TB/s, 989 TFLOP/s dense BF16. H20: HBM3 4.0 TB/s, 148 TFLOP/s dense BF16.
constexpr DeviceParams kH100 = {3350 * kGB, us(3), 989e12};
constexpr DeviceParams kH20 = {4000 * kGB, us(3), 148e12};

// Nodes of 8 H100 GPUs (as dgx-h100x8), one 400 Gb/s InfiniBand NDR NIC per GPU.
Topology multinodePreset(int nodes) {
  Topology t = nvswitchPreset(fmt::format("multinode-ib:{}", nodes), 0.0, kH100);
  t.fabric = Fabric::NvSwitchMultiNode;
  t.ranks = 8 * nodes;
  t.ranksPerDomain = 8;
  t.cross = {us(8), 45 * kGB};
  return t;
}

// Hosts of MPI processes joined by a network (docs/cost_model.md, "Across hosts"): inside a
// host the "host" preset's memory bus, factors and step costs; across hosts a 2 Gbit/s link
// (250 MB/s per direction, 50 us): the rig's link, 38x slower than the memory bus, in the range
// of a network against the memory inside a host (InfiniBand NDR 50 GB/s against NVLink 450 GB/s
// is 9x, 10 Gbit/s Ethernet against a host's memory 10-40x). Erring slow makes the planner
// spend local passes to cut the bytes that cross, which any such link repays; a calibration
// cached for the launch layout replaces both links.
Topology hostsPreset(int ranks) {
  Topology t = hostPreset(ranks);
  t.name = "hosts";
  t.fabric = Fabric::HostNetwork;
  t.cross = {us(50), 0.25 * kGB};
  return t;
}

// Fitted to the paper's observation (docs/cost_model.md): above 0.5 an 8-rank fan-out of
// 4 peers per port loses to a 1:1 send plus a 4-rank AllToAll.
constexpr double kH20PeerPenalty = 0.6;

// "host" / "host:N" style names: `count` is left unchanged when there is no ":N".
// Returns false when `text` is not `base` or `base:...`.
bool matchCounted(std::string_view text, std::string_view base, int& count, Status& status) {
  if (text.substr(0, base.size()) != base) return false;
  const std::string_view rest = text.substr(base.size());
  if (rest.empty()) return true;
  if (rest.front() != ':') return false;
  const std::string_view digits = rest.substr(1);
  int value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || value < 1 ||
      value > kMaxPresetCount) {
    status = Status::invalidArgument(
        fmt::format("topology '{}': expected {}:N with N an integer in [1, {}]", text, base, kMaxPresetCount));
  }
  count = value;
  return true;
}

// Profiles are a few KiB; anything past this is not one (and /dev/zero never ends).
constexpr std::size_t kMaxProfileBytes = std::size_t{1} << 20;

Status readFile(const std::string& path, std::string& out) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return Status::invalidArgument(fmt::format("cannot open '{}'", path));
  std::string text(kMaxProfileBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (file.bad()) return Status::invalidArgument(fmt::format("cannot read '{}'", path));
  const auto length = static_cast<std::size_t>(file.gcount());
  CHIMERA_CHECK_ARG(length <= kMaxProfileBytes, "'{}' is larger than {} bytes, too large for a topology profile", path,
                    kMaxProfileBytes);
  text.resize(length);
  out = std::move(text);
  return Status::ok();
}

// "hosts:H0,H1,...": the host of every rank.
Status parseHosts(std::string_view text, std::vector<int>& out) {
  std::vector<int> hosts;
  std::string_view rest = text.substr(kHostsPresetPrefix.size());
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    int host = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), host);
    CHIMERA_CHECK_ARG(!item.empty() && ec == std::errc() && ptr == item.data() + item.size() && host >= 0,
                      "topology '{}': expected hosts:H0,H1,... with the host (a number from 0) of every rank, got '{}'",
                      text.substr(0, 64), item);
    CHIMERA_CHECK_ARG(hosts.size() < static_cast<std::size_t>(kMaxTopologyRanks),
                      "topology hosts:...: more than {} ranks", kMaxTopologyRanks);
    hosts.push_back(host);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  out = std::move(hosts);
  return Status::ok();
}

// A profile file's text read as a topology; errors name the file.
Status parseProfile(const std::string& path, std::string_view text, Topology& out) {
  Topology loaded;
  const Status parsed = topologyFromJson(text, loaded);
  if (!parsed.isOk()) return Status(parsed.code(), fmt::format("profile '{}': {}", path, parsed.message()));
  out = std::move(loaded);
  return Status::ok();
}

// The launch topology of ranks on `hosts`: the layout's cached calibration when one is
// stored (its links, with this placement), else hostsPreset's defaults.
Status hostsTopology(std::string_view name, std::span<const int> hosts, Topology& out) {
  Topology t = hostsPreset(static_cast<int>(hosts.size()));
  const std::string cached = calibrationCachePath(hostsLayoutKey(hosts));
  if (!cached.empty() && std::filesystem::exists(cached)) {
    std::string text;
    CHIMERA_RETURN_IF_ERROR(readFile(cached, text));
    CHIMERA_RETURN_IF_ERROR(parseProfile(cached, text, t));
    CHIMERA_CHECK_ARG(t.fabric == Fabric::HostNetwork && t.ranks == static_cast<int>(hosts.size()),
                      "cached calibration '{}' is not a host-network profile of {} ranks (fabric {}, {} ranks)", cached,
                      hosts.size(), fabricName(t.fabric), t.ranks);
  }
  // The name shows in every explanation: a long placement is named by its layout instead.
  constexpr std::size_t kLongestName = 80;
  t.name = name.size() <= kLongestName ? std::string(name)
                                       : fmt::format("hosts {} ({} ranks)", hostsLayoutKey(hosts), hosts.size());
  CHIMERA_RETURN_IF_ERROR(placeRanks(hosts, t));
  CHIMERA_RETURN_IF_ERROR(validateTopology(t));
  out = std::move(t);
  return Status::ok();
}

}  // namespace

std::string_view fabricName(Fabric fabric) {
  for (const auto& [f, name] : kFabricNames) {
    if (f == fabric) return name;
  }
  return "unknown";
}

Status parseFabric(std::string_view text, Fabric& out) {
  for (const auto& [fabric, name] : kFabricNames) {
    if (name == text) {
      out = fabric;
      return Status::ok();
    }
  }
  return Status::invalidArgument(
      fmt::format("unknown fabric '{}' (expected shared-memory, pcie-domains, nvswitch or nvswitch-multinode)", text));
}

double TransferFactors::of(OpKind kind) const {
  const int index = transferKindIndex(kind);
  return index < 0 ? 1.0 : values[static_cast<std::size_t>(index)];
}

namespace {

Status validateDomains(const Topology& t) {
  if (t.domains.empty()) {
    CHIMERA_CHECK_ARG(t.ranksPerDomain >= 1 && t.ranks % t.ranksPerDomain == 0,
                      "topology '{}': ranks_per_domain {} must be >= 1 and divide ranks {}", t.name, t.ranksPerDomain,
                      t.ranks);
    CHIMERA_CHECK_ARG(usesCrossLink(t.fabric) || t.ranksPerDomain == t.ranks,
                      "topology '{}': fabric {} has one domain, so ranks_per_domain must equal ranks {}, got {}",
                      t.name, fabricName(t.fabric), t.ranks, t.ranksPerDomain);
    return Status::ok();
  }
  CHIMERA_CHECK_ARG(t.ranksPerDomain == 0, "topology '{}': give ranks_per_domain ({}) or domains, not both", t.name,
                    t.ranksPerDomain);
  CHIMERA_CHECK_ARG(usesCrossLink(t.fabric), "topology '{}': fabric {} has one domain, so it takes no domains", t.name,
                    fabricName(t.fabric));
  CHIMERA_CHECK_ARG(static_cast<int>(t.domains.size()) == t.ranks,
                    "topology '{}': domains lists {} ranks, the topology has {}", t.name, t.domains.size(), t.ranks);
  int next = 0;  // domains numbered in the order of their lowest rank
  for (std::size_t rank = 0; rank < t.domains.size(); ++rank) {
    const int domain = t.domains[rank];
    CHIMERA_CHECK_ARG(domain >= 0 && domain <= next,
                      "topology '{}': domain {} of rank {} must be in 0..{} (domains are numbered 0, 1, ... in the "
                      "order of their lowest rank)",
                      t.name, domain, rank, next);
    if (domain == next) ++next;
  }
  return Status::ok();
}

}  // namespace

int domainOf(const Topology& topology, int rank) {
  return topology.domains.empty() ? rank / topology.ranksPerDomain : topology.domains[static_cast<std::size_t>(rank)];
}

int domainCount(const Topology& topology) {
  if (topology.domains.empty()) return topology.ranks / topology.ranksPerDomain;
  return 1 + *std::max_element(topology.domains.begin(), topology.domains.end());
}

Status placeRanks(std::span<const int> hostOfRank, Topology& topology) {
  CHIMERA_CHECK_ARG(static_cast<int>(hostOfRank.size()) == topology.ranks,
                    "placement lists the hosts of {} ranks, topology '{}' has {}", hostOfRank.size(), topology.name,
                    topology.ranks);
  Topology placed = topology;
  placed.domains.assign(hostOfRank.begin(), hostOfRank.end());
  placed.ranksPerDomain = 0;
  const int hosts = placed.ranks == 0 ? 0 : domainCount(placed);
  CHIMERA_RETURN_IF_ERROR(validateDomains(placed));
  // Equal blocks of consecutive ranks: the ranks_per_domain form older profiles and presets use.
  const int block = placed.ranks / hosts;
  bool blocks = placed.ranks % hosts == 0;
  for (int rank = 0; blocks && rank < placed.ranks; ++rank) blocks = hostOfRank[rank] == rank / block;
  if (blocks) {
    placed.domains.clear();
    placed.ranksPerDomain = block;
  }
  topology = std::move(placed);
  return Status::ok();
}

std::vector<std::vector<int>> membersByHost(std::span<const int> ranks, std::span<const int> hostOfRank) {
  std::vector<std::vector<int>> members;
  std::vector<int> seen;  // the host of each entry of members
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const auto r = static_cast<std::size_t>(ranks[i]);
    const int host = r < hostOfRank.size() ? hostOfRank[r] : 0;
    const auto h = static_cast<std::size_t>(std::find(seen.begin(), seen.end(), host) - seen.begin());
    if (h == seen.size()) {
      seen.push_back(host);
      members.emplace_back();
    }
    members[h].push_back(static_cast<int>(i));
  }
  return members;
}

std::string hostsLayoutKey(std::span<const int> hostOfRank) {
  std::vector<int> counts;
  for (const int host : hostOfRank) {
    if (host < 0) continue;
    if (static_cast<std::size_t>(host) >= counts.size()) counts.resize(static_cast<std::size_t>(host) + 1, 0);
    ++counts[static_cast<std::size_t>(host)];
  }
  return fmt::format("{}", fmt::join(counts, "+"));
}

std::string calibrationCachePath(std::string_view layoutKey) {
  std::string dir;
  if (const char* own = std::getenv("CHIMERA_TOPOLOGY_CACHE"); own != nullptr && *own != '\0') {
    if (std::string_view(own) == "none") return {};
    dir = own;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    dir = fmt::format("{}/chimera/topology", xdg);
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    dir = fmt::format("{}/.cache/chimera/topology", home);
  } else {
    return {};
  }
  return fmt::format("{}/hosts-{}.json", dir, layoutKey);
}

Status validateTopology(const Topology& t) {
  CHIMERA_CHECK_ARG(!t.name.empty(), "topology name is empty");
  CHIMERA_CHECK_ARG(t.ranks >= 1 && t.ranks <= kMaxTopologyRanks, "topology '{}': ranks must be in 1..{}, got {}",
                    t.name, kMaxTopologyRanks, t.ranks);
  CHIMERA_RETURN_IF_ERROR(validateDomains(t));
  CHIMERA_CHECK_ARG(finiteNonNegative(t.local.alphaSeconds) && finitePositive(t.local.bytesPerSecond),
                    "topology '{}': local link needs alpha >= 0 and bandwidth > 0, got alpha {} s, {} B/s", t.name,
                    t.local.alphaSeconds, t.local.bytesPerSecond);
  CHIMERA_CHECK_ARG(finiteNonNegative(t.cross.alphaSeconds) && finiteNonNegative(t.cross.bytesPerSecond),
                    "topology '{}': cross link alpha and bandwidth must be >= 0, got {} s, {} B/s", t.name,
                    t.cross.alphaSeconds, t.cross.bytesPerSecond);
  CHIMERA_CHECK_ARG(!usesCrossLink(t.fabric) || t.cross.bytesPerSecond > 0,
                    "topology '{}': fabric {} needs a cross link bandwidth > 0", t.name, fabricName(t.fabric));
  CHIMERA_CHECK_ARG(finiteNonNegative(t.peerPenalty), "topology '{}': peer_penalty must be >= 0, got {}", t.name,
                    t.peerPenalty);
  CHIMERA_CHECK_ARG(finiteNonNegative(t.reduceSecondsPerByte), "topology '{}': reduction cost must be >= 0, got {} s/B",
                    t.name, t.reduceSecondsPerByte);
  CHIMERA_CHECK_ARG(t.computeSlots >= 0, "topology '{}': compute_slots must be >= 0, got {}", t.name, t.computeSlots);
  CHIMERA_CHECK_ARG(finiteNonNegative(t.stepSeconds) && finiteNonNegative(t.peerSeconds),
                    "topology '{}': step_s and peer_s must be >= 0, got {} s, {} s", t.name, t.stepSeconds,
                    t.peerSeconds);
  CHIMERA_CHECK_ARG(finiteNonNegative(t.fusionMargin) && t.fusionMargin < 1,
                    "topology '{}': fusion_margin must be in [0, 1), got {}", t.name, t.fusionMargin);
  CHIMERA_CHECK_ARG(finiteNonNegative(t.device.memoryBytesPerSecond) && finiteNonNegative(t.device.launchSeconds) &&
                        finiteNonNegative(t.device.peakFlopsPerSecond),
                    "topology '{}': device memory bandwidth, launch time and peak FLOP/s must be >= 0", t.name);
  for (std::size_t i = 0; i < kTransferKinds.size(); ++i) {
    CHIMERA_CHECK_ARG(finitePositive(t.transferFactors.values[i]),
                      "topology '{}': transfer factor of {} must be > 0, got {}", t.name, opKindName(kTransferKinds[i]),
                      t.transferFactors.values[i]);
  }
  CHIMERA_CHECK_ARG(t.calibration.samples >= 0 && finiteNonNegative(t.calibration.rmsRelativeError),
                    "topology '{}': calibration samples and error must be >= 0", t.name);
  return Status::ok();
}

std::vector<std::string> topologyPresetNames() {
  return {"host", "pcie-4080x8", "nvswitch-h20x8", "dgx-h100x8", "multinode-ib"};
}

Status loadTopology(std::string_view nameOrPath, Topology& out) {
  Status status;
  int count = 8;
  if (matchCounted(nameOrPath, "host", count, status)) {
    CHIMERA_RETURN_IF_ERROR(status);
    out = hostPreset(count);
    return Status::ok();
  }
  count = 2;
  if (matchCounted(nameOrPath, "multinode-ib", count, status)) {
    CHIMERA_RETURN_IF_ERROR(status);
    out = multinodePreset(count);
    return Status::ok();
  }
  if (nameOrPath.substr(0, kHostsPresetPrefix.size()) == kHostsPresetPrefix) {
    std::vector<int> hosts;
    CHIMERA_RETURN_IF_ERROR(parseHosts(nameOrPath, hosts));
    return hostsTopology(nameOrPath, hosts, out);
  }
  if (nameOrPath == "pcie-4080x8") {
    out = pcie4080Preset();
    return Status::ok();
  }
  // H20: the paper saw per-GPU switch bandwidth fall with more concurrent peers; H100 did not
  // show it in public all-to-all measurements (docs/cost_model.md).
  if (nameOrPath == "nvswitch-h20x8") {
    out = nvswitchPreset("nvswitch-h20x8", kH20PeerPenalty, kH20);
    return Status::ok();
  }
  if (nameOrPath == "dgx-h100x8") {
    out = nvswitchPreset("dgx-h100x8", 0.0, kH100);
    return Status::ok();
  }
  const std::string path(nameOrPath);
  std::string text;
  if (const Status read = readFile(path, text); !read.isOk()) {
    return Status::invalidArgument(fmt::format(
        "unknown topology '{}': not a preset ({}, multinode-ib:N, host:N, hosts:H0,H1,...) and not a readable "
        "profile file ({})",
        path, fmt::join(topologyPresetNames(), ", "), read.message()));
  }
  return parseProfile(path, text, out);
}

Status saveTopology(const Topology& topology, const std::string& path) {
  CHIMERA_RETURN_IF_ERROR(validateTopology(topology));
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return Status::invalidArgument(fmt::format("cannot open '{}' for writing", path));
  file << topologyToJson(topology) << '\n';
  file.close();
  if (!file) return Status::invalidArgument(fmt::format("cannot write '{}'", path));
  return Status::ok();
}

}  // namespace chimera
