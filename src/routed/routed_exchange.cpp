// SPDX-License-Identifier: Apache-2.0
// The routed exchange: options resolved against the mesh, the program decided by the fusion
// rules (src/cost/routed_plan.cpp), and the handle's accessors.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/planning/topology.hpp"
#include "common/env.hpp"
#include "common/hash.hpp"
#include "core/check.hpp"
#include "routed/exchange_blocks.hpp"
#include "routed/routed_impl.hpp"

namespace chimera {
namespace {

constexpr std::size_t kDefaultScratchLimit = std::size_t{16} << 30;

// "tp=S0", "sp=S0", "tp=R", "tp=P", "pp=@k", "" -> token axes, placement and stage.
Status parseTokenLayout(const Mesh& mesh, std::string_view text, AxisSet& axes, TokenPlacement& placement, int& stage) {
  axes = AxisSet();
  placement = TokenPlacement::Owned;
  stage = 0;
  if (text.empty()) return Status::ok();
  const std::size_t eq = text.find('=');
  CHIMERA_CHECK_ARG(eq != std::string_view::npos && text.find(',') == std::string_view::npos,
                    "token layout '{}': expected one AXES=PLACEMENT entry (tp=S0, sp=S0, tp=R, tp=P, pp=@k)", text);
  CHIMERA_RETURN_IF_ERROR(mesh.parseAxes(text.substr(0, eq), axes));
  const std::string_view p = text.substr(eq + 1);
  if (p == "S0") {
    placement = TokenPlacement::Owned;
  } else if (p == "R") {
    placement = TokenPlacement::Replicated;
  } else if (p == "P" || p == "P(sum)") {
    placement = TokenPlacement::Partial;
  } else if (!p.empty() && p.front() == '@') {
    placement = TokenPlacement::Stage;  // even when malformed: the group follows from it
    const std::string_view digits = p.substr(1);
    const bool number = !digits.empty() && digits.size() <= 6 &&
                        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    CHIMERA_CHECK_ARG(number, "token layout '{}': a pipeline stage is @k with k a stage index", text);
    CHIMERA_CHECK_ARG(mesh.groupSize(axes) > 1 && (axes.bits() & (axes.bits() - 1)) == 0,
                      "token layout '{}': the tokens of a stage need one pipeline axis of two stages or more", text);
    stage = std::stoi(std::string(digits));
  } else {
    return Status::invalidArgument(
        fmt::format("token layout '{}': placement '{}' is not one of S0 (owned shards), R (replicas), P (partial "
                    "sums), @k (pipeline stage k)",
                    text, p));
  }
  return Status::ok();
}

Status checkDtype(DataType dtype, const char* what) {
  CHIMERA_CHECK_ARG(
      dtype == DataType::F32 || dtype == DataType::F64 || dtype == DataType::F16 || dtype == DataType::BF16,
      "routed exchange: {} dtype {} is not supported (f32, f64, f16, bf16)", what, dataTypeName(dtype));
  return Status::ok();
}

// The communicators of the dispatch group and the token axes, made now rather than by a first
// collective: a transport without lazy creation (the gloo mesh backend) has none until then,
// and one whose creation is collective over the world (MPI) makes them here at a point every
// rank reaches together. Nothing to do (no communication) when they exist.
Status createGroups(Backend& backend, AxisSet group, AxisSet tokenAxes) {
  std::vector<AxisSet> missing;
  for (AxisSet axes : {group, tokenAxes}) {
    if (!axes.empty() && !backend.hasGroup(axes) && (missing.empty() || missing.front() != axes))
      missing.push_back(axes);
  }
  if (missing.empty()) return Status::ok();
  const Status st = backend.createGroups(missing);
  if (st.isOk()) return st;
  return Status(st.code(),
                fmt::format("routed exchange over group {} (token axes {}): {}", backend.mesh().axesName(group),
                            tokenAxes.empty() ? "none" : backend.mesh().axesName(tokenAxes), st.message()));
}

// The hosts of the dispatch group's members (Backend::hostOfRank), numbered by lowest group
// index, each host's members in group index order, and each member's place on its host.
void placeOnHosts(RoutedExchange::Impl& m) {
  m.hostMembers = membersByHost(m.groupRanks, m.worldHosts);
  m.hostOf.assign(m.groupRanks.size(), 0);
  m.hostPlace.assign(m.groupRanks.size(), 0);
  for (std::size_t h = 0; h < m.hostMembers.size(); ++h) {
    for (std::size_t place = 0; place < m.hostMembers[h].size(); ++place) {
      const auto g = static_cast<std::size_t>(m.hostMembers[h][place]);
      m.hostOf[g] = static_cast<int>(h);
      m.hostPlace[g] = static_cast<int>(place);
    }
  }
}

}  // namespace

RoutedExchange::Impl::Impl(Backend& b, const RoutedExchangeOptions& o) : backend(b), options(o) {
  static std::atomic<std::uint64_t> exchanges{0};
  serial = ++exchanges;
}

Status RoutedExchange::Impl::resolve() {
  Impl& m = *this;
  const Mesh& mesh = backend.mesh();
  const Status layout = parseTokenLayout(mesh, options.tokenLayout, m.tokenAxes, m.placement, m.stage);
  const bool staged = m.placement == TokenPlacement::Stage;
  // A stage's tokens dispatch over every axis but the pipeline's unless told otherwise.
  m.group = !options.group.empty() ? options.group
            : staged               ? AxisSet::fromBits(mesh.allAxes().bits() & ~m.tokenAxes.bits())
                                   : mesh.allAxes();
  m.ranks = mesh.groupSize(m.group);
  m.index = mesh.groupIndex(backend.rank(), m.group);
  m.groupRanks = mesh.groupRanks(backend.rank(), m.group);
  m.tokenSize = mesh.groupSize(m.tokenAxes);
  m.tokenIndex = mesh.groupIndex(backend.rank(), m.tokenAxes);
  m.tokenRanks = mesh.groupRanks(backend.rank(), m.tokenAxes);
  m.worldHosts = backend.hostOfRank();
  placeOnHosts(m);
  CHIMERA_RETURN_IF_ERROR(layout);
  CHIMERA_RETURN_IF_ERROR(checkDtype(options.dtype, "token"));
  CHIMERA_RETURN_IF_ERROR(checkDtype(options.weightDtype, "weight"));
  CHIMERA_CHECK_ARG(options.capacity >= 0 && options.capacity <= detail::kMaxCountRecords,
                    "routed exchange: capacity {} outside 0..{}", options.capacity, detail::kMaxCountRecords);
  if (m.tokenSize == 1 && m.placement != TokenPlacement::Partial && !staged) m.placement = TokenPlacement::Owned;

  RoutedRequest request;
  request.mesh = mesh;
  request.group = m.group;
  request.tokenAxes = m.tokenAxes;
  request.placement = m.placement;
  request.stage = m.stage;
  request.tokens = options.plannedTokens;
  request.hidden = options.hidden;
  request.dtype = options.dtype;
  request.weightDtype = options.weightDtype;
  request.experts = options.numExperts;
  request.topK = options.topK;
  request.hosts = m.worldHosts;
  std::unique_ptr<CostModel> model;
  const std::string costName =
      options.topology.empty() ? detail::topologyFromEnv(backend.defaultTopology()) : options.topology;
  if (costName != "bytes") {
    Topology topology;
    if (const Status loaded = loadTopology(costName, topology); !loaded.isOk()) {
      return Status::invalidArgument(fmt::format(
          "routed exchange cost model '{}' (RoutedExchangeOptions::topology, else CHIMERA_TOPOLOGY, else the "
          "backend's own): {}",
          costName, loaded.message()));
    }
    model = std::make_unique<CostModel>(std::move(topology));
  }
  CHIMERA_RETURN_IF_ERROR(planRouted(request, model.get(), m.decision));
  if (staged) {
    // Stage k holds the tokens, stage k+1 the experts; each rank's peer has its coordinates on
    // the other stage, and the peer's dispatch group holds a source's destinations (or an
    // expert rank's sources).
    const int rank = backend.rank();
    m.role = m.tokenIndex == m.stage       ? RoutedRole::Source
             : m.tokenIndex == m.stage + 1 ? RoutedRole::Experts
                                           : RoutedRole::Outside;
    if (m.role != RoutedRole::Outside) {
      m.stagePeer = mesh.groupPeer(rank, m.tokenAxes, m.role == RoutedRole::Source ? m.stage + 1 : m.stage);
      m.stageRanks = mesh.groupRanks(m.stagePeer, m.group);
    }
  }
  m.localExperts = options.numExperts / m.ranks;
  const bool replicated = m.placement == TokenPlacement::Replicated || m.placement == TokenPlacement::Partial;
  switch (options.program) {
    case RoutedProgram::Planned:
      m.oncePerRank = m.decision.oncePerRank;
      m.split = m.decision.splitReplicas;
      m.straight = m.decision.straightFromStage;
      // Planned once per host for a stage's tokens only after the hand-off: stage k+1 dispatches.
      m.hostDispatch = m.decision.oncePerHost && m.hostMembers.size() > 1 && m.role != RoutedRole::Source;
      m.explanation = m.decision.explanation;
      break;
    case RoutedProgram::Fused:
      m.oncePerRank = true;
      m.split = replicated;
      m.straight = staged;
      m.hostDispatch = !staged && m.hostMembers.size() > 1;
      m.explanation = {"every fusion forced (RoutedProgram::Fused)"};
      break;
    case RoutedProgram::PerExpert:
      m.oncePerRank = false;
      m.split = false;
      m.straight = false;
      m.explanation = {"the chain as issued forced (RoutedProgram::PerExpert)"};
      break;
    default:
      return Status::invalidArgument(
          fmt::format("routed exchange: program {} is not a RoutedProgram", static_cast<int>(options.program)));
  }
  m.slots = m.oncePerRank ? static_cast<int>(std::min<std::int64_t>(options.topK, m.localExperts)) : 1;
  m.rowBytes = static_cast<std::size_t>(options.hidden) * dataTypeSize(options.dtype);
  m.weightBytes = dataTypeSize(options.weightDtype);
  // A forwarder writes the records it fans out with their ids: none are implied by order there.
  m.idsByOrder =
      m.slots == 1 && m.localExperts > 1 && options.capacity == 0 && !(staged && m.straight) && !m.hostDispatch;
  m.idBytes = m.localExperts == 1 || m.idsByOrder ? 0 : 4;  // one expert per rank: every slot's id is 0
  m.headerBytes = static_cast<std::size_t>(m.slots) * m.slotBytes();
  if (m.hostDispatch) {
    std::size_t most = 0;
    for (const std::vector<int>& members : m.hostMembers) most = std::max(most, members.size());
    m.hostSlots =
        static_cast<int>(std::min<std::int64_t>(options.topK, m.localExperts * static_cast<std::int64_t>(most)));
    m.hostHeaderBytes = static_cast<std::size_t>(m.hostSlots) * (sizeof(std::int32_t) + m.weightBytes);
  }
  if (m.options.scratchLimitBytes == 0) {
    m.options.scratchLimitBytes = kDefaultScratchLimit;
    CHIMERA_RETURN_IF_ERROR(detail::readEnvSize("CHIMERA_ROUTED_SCRATCH_LIMIT_BYTES", m.options.scratchLimitBytes));
  }
  if (options.capacity > 0) {  // fixed blocks: their size is known now, on every rank alike
    const std::vector<std::size_t> blocks(static_cast<std::size_t>(m.ranks),
                                          static_cast<std::size_t>(options.capacity));
    CHIMERA_RETURN_IF_ERROR(m.checkSendScratch(blocks, m.headerBytes + m.rowBytes));
  }
  detail::Hasher hasher;
  hasher.add(static_cast<std::uint64_t>(options.numExperts))
      .add(static_cast<std::uint64_t>(options.topK))
      .add(static_cast<std::uint64_t>(options.hidden))
      .add(static_cast<std::uint64_t>(options.dtype))
      .add(static_cast<std::uint64_t>(options.weightDtype))
      .add(static_cast<std::uint64_t>(options.capacity))
      .add(static_cast<std::uint64_t>(m.placement))
      .add(static_cast<std::uint64_t>(m.tokenAxes.bits()))
      .add(static_cast<std::uint64_t>(m.group.bits()))
      .add(static_cast<std::uint64_t>(m.oncePerRank))
      .add(static_cast<std::uint64_t>(m.split))
      .add(static_cast<std::uint64_t>(m.stage))
      .add(static_cast<std::uint64_t>(m.straight));
  // Not hostDispatch: every member of a group decides it alike (from the same placement), and
  // the groups of one exchange may decide it differently (a group inside one host has nothing
  // to forward) while their replicas still meet over the token axes.
  m.tag = static_cast<std::uint32_t>(hasher.value());
  return Status::ok();
}

Status RoutedExchange::Impl::agreeOnOptions(const Status& local) {
  // MAX of {tag, -tag, failed, R - index of a failed member}: whether the tags differ, whether a
  // member failed and the lowest failing index, in the round that also agrees on the options.
  // The words of the exchange's later rounds carry 7 bits of the tag, which catch a call on
  // another exchange object.
  const bool failed = !local.isOk();
  std::int64_t words[4] = {static_cast<std::int64_t>(tag), -static_cast<std::int64_t>(tag), failed ? 1 : 0,
                           failed ? ranks - index : 0};
  CHIMERA_RETURN_IF_ERROR(backend.allReduce(words, words, 4, DataType::I64, ReduceOp::Max, group));
  bool anyFailed = words[2] > 0;
  int failedRank = anyFailed ? groupRanks[static_cast<std::size_t>(ranks - words[3])] : -1;
  bool tagsDiffer = words[0] != -words[1];
  // Replicas outside the dispatch group ("tp=R", "tp=P" over tp with group ep) meet in every
  // dispatch: the verdict of their groups crosses the token axes in a second round, so that no
  // group creates its exchange while a replica's group refused (its dispatch would then wait
  // for that replica).
  // Decided by the token axes alone (every rank parsed them, also one whose placement is
  // malformed), so that every member of the token axes makes the round.
  const bool replicasOutside =
      placement != TokenPlacement::Stage && tokenSize > 1 && (tokenAxes.bits() & ~group.bits()) != 0;
  if (replicasOutside) {
    const std::int64_t world = backend.mesh().size();
    std::int64_t more[3] = {anyFailed ? 1 : 0, anyFailed ? world - failedRank : 0, tagsDiffer ? 1 : 0};
    CHIMERA_RETURN_IF_ERROR(backend.allReduce(more, more, 3, DataType::I64, ReduceOp::Max, tokenAxes));
    anyFailed = more[0] > 0;
    failedRank = anyFailed ? static_cast<int>(world - more[1]) : -1;
    tagsDiffer = more[2] > 0;
  }
  if (failed) return local;
  const Mesh& mesh = backend.mesh();
  if (anyFailed)
    return Status::mismatch(
        fmt::format("routed exchange over group {}: rank {} refused its options (see its error); no exchange was "
                    "created",
                    mesh.axesName(group), failedRank));
  if (tagsDiffer)
    return Status::mismatch(
        fmt::format("routed exchange over group {}: its ranks create exchanges with other options (experts, top-k, "
                    "hidden size, dtypes, capacity, token layout or program differ)",
                    mesh.axesName(group)));
  return Status::ok();
}

Status RoutedExchange::create(Backend& backend, const RoutedExchangeOptions& options,
                              std::unique_ptr<RoutedExchange>& out, const Status& localError) {
  if (backend.name() == "nccl")
    return Status::unsupported(
        "routed exchange: the row packing and expansion run on host memory only so far; the NCCL backend has "
        "allToAllV and exchangeCounts, not the device kernels of the routed exchange");
  auto impl = std::make_unique<Impl>(backend, options);
  Impl& m = *impl;
  // Every check runs before the first message, and a rank whose check failed still makes the
  // same calls as its peers (the groups' creation, then the agreement), so that none waits for it.
  Status local = localError;
  if (const Status resolved = m.resolve(); local.isOk()) local = resolved;
  // A stage's tokens cross the pipeline axis point to point: no communicator over it is needed.
  const Status created = createGroups(backend, m.group, m.placement == TokenPlacement::Stage ? AxisSet() : m.tokenAxes);
  if (!created.isOk()) return local.isOk() ? created : local;
  CHIMERA_RETURN_IF_ERROR(m.agreeOnOptions(local));
  out.reset(new RoutedExchange(std::move(impl)));
  return Status::ok();
}

RoutedExchange::RoutedExchange(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RoutedExchange::~RoutedExchange() = default;

const RoutedExchangeOptions& RoutedExchange::options() const { return impl_->options; }
const std::vector<std::string>& RoutedExchange::explain() const { return impl_->explanation; }
bool RoutedExchange::splitsReplicas() const { return impl_->split; }
bool RoutedExchange::oncePerRank() const { return impl_->oncePerRank; }
bool RoutedExchange::oncePerHost() const { return impl_->hostDispatch; }
bool RoutedExchange::straightFromStage() const { return impl_->straight; }
RoutedRole RoutedExchange::role() const { return impl_->role; }
std::size_t RoutedExchange::scratchBytes() const { return impl_->sendScratch.capacity() + impl_->back.capacity(); }

RoutedDispatch::RoutedDispatch() : state_(std::make_unique<State>()) {}
RoutedDispatch::~RoutedDispatch() = default;
RoutedDispatch::RoutedDispatch(RoutedDispatch&&) noexcept = default;
RoutedDispatch& RoutedDispatch::operator=(RoutedDispatch&&) noexcept = default;
std::int64_t RoutedDispatch::rows() const { return state_->rows; }
const std::vector<std::int64_t>& RoutedDispatch::tokensPerExpert() const { return state_->tokensPerExpert; }
std::int64_t RoutedDispatch::tokens() const { return state_->tokens; }
const RoutedStats& RoutedDispatch::stats() const { return state_->stats; }

}  // namespace chimera
