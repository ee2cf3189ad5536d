// SPDX-License-Identifier: Apache-2.0
// Topologies (unstable tier): the presets (host, pcie-4080x8, nvswitch-h20x8, dgx-h100x8,
// multinode-ib:N, hosts:PLACEMENT) and calibrated profile files the cost model prices plans on.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/op_kind.hpp"
#include "chimera/status.hpp"

namespace chimera {

/// How the ranks of a topology are wired; decides which shared resources a transfer
/// occupies (see docs/cost_model.md).
enum class Fabric : std::uint8_t {
  /// Processes on one host exchanging through shared memory: every transfer uses one
  /// memory bus (`local` link); reductions run on `computeSlots` shared CPU cores.
  SharedMemory,
  /// GPUs on PCIe in NUMA domains of `ranksPerDomain`: each GPU has its own `local` link
  /// (transmit and receive directions separate); traffic between domains also crosses the
  /// one `cross` link (CPU / inter-socket) per direction, shared by all such transfers.
  PcieDomains,
  /// GPUs on an NVSwitch: each GPU has a `local` port per direction whose bandwidth is
  /// divided by 1 + peerPenalty * (peers - 1), peers = distinct GPUs it sends to
  /// (transmit) or receives from (receive) in the same step.
  NvSwitch,
  /// Nodes of `ranksPerDomain` GPUs on an NVSwitch (as NvSwitch) joined by a network: each
  /// GPU has its own NIC (`cross` link, per direction) used by its inter-node transfers.
  NvSwitchMultiNode,
  /// Hosts (the domains) joined by a network, processes exchanging through host memory: inside
  /// a host every transfer uses that host's memory bus (`local` link, as SharedMemory); a
  /// transfer between hosts uses the sending host's NIC transmit side and the receiving host's
  /// NIC receive side (`cross` link, per direction), shared by all ranks of the host crossing at
  /// once. Reductions run on `computeSlots` cores per host. AllReduce, ReduceScatter and
  /// AllGather over a group spanning hosts are priced hierarchically (inside each host, across
  /// hosts on the shard, inside again), as the MPI backend runs them.
  HostNetwork,
};

/// "shared-memory", "pcie-domains", "nvswitch", "nvswitch-multinode", "host-network".
std::string_view fabricName(Fabric fabric);
/// Parses a name as printed by fabricName. InvalidArgument naming the text when unknown.
[[nodiscard]] Status parseFabric(std::string_view text, Fabric& out);

/// Alpha-beta parameters of one link class.
struct LinkParams {
  double alphaSeconds = 0;    ///< latency of one message / ring step over this link class (>= 0)
  double bytesPerSecond = 0;  ///< bandwidth per direction (> 0)
};

/// The device each rank runs on, for the work the links do not price: local passes of
/// the planner's programs (pack, unpack, copy, scale) and compute (the roofline of
/// chimera-model). Zero fields mean "not modelled": that work is free / unknown.
struct DeviceParams {
  double memoryBytesPerSecond = 0;  ///< memory bandwidth of one rank's device (>= 0); a pass reads and writes
  double launchSeconds = 0;         ///< fixed cost of one local kernel: pack, unpack, copy or scale (>= 0)
  double peakFlopsPerSecond = 0;    ///< dense 16-bit tensor-core peak of one device (>= 0)
};

/// The primitives whose transfer time a profile can scale, in TransferFactors order: the
/// kinds of a communication program in the op table (kOpInProgram: the five collectives and
/// the many-to-many of point-to-point transfers).
inline constexpr auto kTransferKinds = opKindsIn<kOpInProgram>();

/// The index of `kind` in kTransferKinds, -1 for a kind that moves no bytes between ranks.
constexpr int transferKindIndex(OpKind kind) {
  for (std::size_t i = 0; i < kTransferKinds.size(); ++i) {
    if (kTransferKinds[i] == kind) return static_cast<int>(i);
  }
  return -1;
}

/// How a transport's own algorithm for each primitive compares with the model's (ring for
/// AllReduce, ReduceScatter and AllGather, a chain for Broadcast, direct transfers for
/// AllToAll and many-to-many): the primitive's transfer time is multiplied by its factor.
/// 1 = as modelled (every preset); calibration fits them, e.g. an MPI library whose
/// AllReduce moves fewer bytes through shared memory than a ring gets a factor below 1.
struct TransferFactors {
  /// In kTransferKinds order (> 0); every factor 1 by default.
  std::array<double, kTransferKinds.size()> values = [] {
    std::array<double, kTransferKinds.size()> ones{};
    ones.fill(1);
    return ones;
  }();
  /// The factor of `kind`; 1 for kinds that move no bytes between ranks.
  [[nodiscard]] double of(OpKind kind) const;
};

/// Provenance of a calibrated topology (zero samples: a preset, not calibrated).
struct CalibrationInfo {
  int samples = 0;              ///< number of measurements the fit used
  double rmsRelativeError = 0;  ///< root-mean-square of (predicted - measured) / measured over them
};

/// Most ranks a topology may describe: the cost model keeps per-rank state, so a profile
/// claiming more is refused rather than exhausting memory.
inline constexpr int kMaxTopologyRanks = 1 << 20;

/// A machine as the cost model sees it: a fabric plus the parameters of its link classes.
/// Plain data; obtain one from a preset or profile with loadTopology, check it with
/// validateTopology.
struct Topology {
  std::string name;  ///< preset name or the name stored in a profile
  Fabric fabric = Fabric::SharedMemory;
  int ranks = 0;  ///< world ranks it describes (1..kMaxTopologyRanks)
  /// Ranks per NUMA domain (PcieDomains), per node (NvSwitchMultiNode) or per host
  /// (HostNetwork) when the domains are blocks of consecutive ranks; divides `ranks`. Equal to
  /// `ranks` for the one-domain fabrics. 0 when `domains` lists the domain of every rank.
  int ranksPerDomain = 0;
  /// The domain (NUMA domain, node, host) of every rank, for any placement (round-robin,
  /// uneven hosts): `ranks` entries, domains numbered 0, 1, ... in the order of their lowest
  /// rank (as Backend::hostOfRank). Empty: blocks of `ranksPerDomain` consecutive ranks.
  std::vector<int> domains;
  LinkParams local;                 ///< per-GPU link / NVSwitch port / memory bus
  LinkParams cross;                 ///< CPU link between domains, or per-GPU NIC; unused otherwise
  double peerPenalty = 0;           ///< NVSwitch bandwidth drop per extra concurrent peer (>= 0)
  double reduceSecondsPerByte = 0;  ///< local reduction cost of one byte on one core / device (>= 0)
  /// Cores that all ranks' reductions share (SharedMemory), or that the ranks of one host share
  /// (HostNetwork); 0 = every rank reduces on its own device.
  int computeSlots = 0;
  /// Fixed cost of every communication step, paid once per step however many rounds it
  /// has: the collective's kernel launch and the synchronisation that ends the step (>= 0).
  double stepSeconds = 0;
  /// Per distinct peer of the busiest rank in one step: the setup of each point-to-point
  /// connection of a fan-out, on top of the link bandwidth (>= 0).
  double peerSeconds = 0;
  /// The share of a chain's predicted time a fused plan must save to be chosen, in [0, 1):
  /// the model's error where it is known to mislead (PlanCost::fusionMargin). 0 in the GPU
  /// presets, whose constants are estimates never measured against their decisions.
  double fusionMargin = 0;
  /// The transport moves a many-to-many box that is not one run straight from the sender's
  /// memory into the receiver's between every pair of ranks (Backend::movesBoxesEverywhere): no
  /// pack and no unpack where transferPasses says so. False in the presets; an Executor or
  /// Session sets it from its backend, whatever the preset or profile says.
  bool movesBoxes = false;
  TransferFactors transferFactors;  ///< per-primitive algorithm efficiency (calibrated; 1 in the presets)
  DeviceParams device;              ///< local passes and compute
  CalibrationInfo calibration;      ///< set by fitProfile; saved with the profile
};

/// Checks the fields of `topology` (ranges above, ranksPerDomain dividing ranks or domains
/// listing every rank, cross link set where the fabric uses it). InvalidArgument naming the
/// field and value otherwise.
[[nodiscard]] Status validateTopology(const Topology& topology);

/// The domain of `rank` (0 <= rank < topology.ranks): `domains[rank]`, else the block
/// rank / ranksPerDomain.
int domainOf(const Topology& topology, int rank);
/// The number of domains: one more than the largest domain of a rank.
int domainCount(const Topology& topology);

/// Sets the domain of every rank from `hostOfRank` (Backend::hostOfRank's numbering; it must
/// list `topology.ranks` hosts): equal blocks of consecutive ranks become `ranksPerDomain`,
/// any other placement `domains`. InvalidArgument naming the problem when the list does not
/// fit or the fabric has one domain.
[[nodiscard]] Status placeRanks(std::span<const int> hostOfRank, Topology& topology);

/// The preset names loadTopology accepts: "host", "pcie-4080x8", "nvswitch-h20x8",
/// "dgx-h100x8", "multinode-ib" (2 nodes; "multinode-ib:N" for N nodes).
std::vector<std::string> topologyPresetNames();

/// "hosts:H0,H1,...": the launch topology of ranks on hosts H0, H1, ... (the host of every
/// rank, numbered from 0 in the order of their lowest rank), as hostsTopologyName
/// (chimera/backend.hpp, the backends' default cost model) writes it.
inline constexpr std::string_view kHostsPresetPrefix = "hosts:";

/// The members of a group of world ranks `ranks` per host of `hostOfRank` (a rank past its end
/// counts as on host 0): positions in `ranks`, hosts in the order of their first member, each
/// host's positions in group order. The routed exchange's once-per-host program, its price and
/// chimera-model's all number a group's hosts and a member's place on its host this way.
std::vector<std::vector<int>> membersByHost(std::span<const int> ranks, std::span<const int> hostOfRank);

/// The layout key of a placement: ranks per host in host order joined by '+' ("4+4", "3+5"),
/// which names its cached calibration (calibrationCachePath).
std::string hostsLayoutKey(std::span<const int> hostOfRank);
/// Where the calibration of launches with layout `layoutKey` is cached:
/// $CHIMERA_TOPOLOGY_CACHE, else $XDG_CACHE_HOME/chimera/topology, else
/// $HOME/.cache/chimera/topology, then "hosts-<layoutKey>.json". Empty when none of the
/// variables is set, or CHIMERA_TOPOLOGY_CACHE is "none".
std::string calibrationCachePath(std::string_view layoutKey);

/// Finds a topology by preset name (see topologyPresetNames; "host:N" sets the number of
/// host processes, default 8; "hosts:H0,H1,..." the host-network topology of that placement,
/// with the links of the layout's cached calibration when one is stored, else the defaults
/// of docs/cost_model.md) or else by path of a profile JSON file written by saveTopology.
/// InvalidArgument when the text is neither a preset nor a readable file of at most 1 MiB
/// (the message lists the presets), or when the file (or the cached calibration) is
/// malformed (the message names the file, and the field or the parse position).
[[nodiscard]] Status loadTopology(std::string_view nameOrPath, Topology& out);

/// The profile JSON of `topology` (format "chimera-topology-1"), pretty-printed.
std::string topologyToJson(const Topology& topology);
/// Reads a profile JSON produced by topologyToJson; rejects missing, mistyped or unknown
/// fields and values validateTopology refuses, with a message naming the field.
[[nodiscard]] Status topologyFromJson(std::string_view text, Topology& out);
/// Writes topologyToJson(topology) to `path`. InvalidArgument if the topology is invalid
/// or the file cannot be written (the message names the path).
[[nodiscard]] Status saveTopology(const Topology& topology, const std::string& path);

}  // namespace chimera
