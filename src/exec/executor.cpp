// SPDX-License-Identifier: Apache-2.0
// Implements the Executor: plan, agree, prepare once, then run chains and plans on a Backend.
#include "chimera/executor.hpp"

#include <fmt/format.h>

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "chimera/planning/topology_cost.hpp"
#include "common/env.hpp"
#include "common/hash.hpp"
#include "common/log.hpp"
#include "core/check.hpp"
#include "exec/agreement.hpp"
#include "exec/prepared_plan.hpp"
#include "exec/prepared_plan_cache.hpp"
#include "exec/scratch_pool.hpp"
#include "exec/signature.hpp"

namespace chimera {
namespace {

constexpr const char* kLog = "exec";

// CHIMERA_CHECK_ARGS as `backend` reads it: on by default in every build on host backends,
// whose agreement is one small exchange (a rank with a bad buffer then fails every rank at
// once instead of leaving its peers waiting for the timeout), in debug builds only on NCCL,
// whose agreement synchronises the stream. A malformed value keeps the default here (the
// backend refused it already when it was created).
bool checkBuffersFromEnv(const Backend& backend) {
  const bool fallback = backend.name() == "nccl" ? detail::kCheckArgsByDefault : detail::kMpiCheckArgsByDefault;
  bool on = fallback;
  if (!detail::checkArgsFromEnv(on, fallback).isOk()) on = fallback;
  return on;
}

// True when the exec logger prints debug messages: the plan texts logged below are built
// only then (formatting them took about 5 % of a cold Session window).
bool debugLogging() { return detail::logger(kLog)->should_log(spdlog::level::debug); }

// A planned chain and its two programs, prepared on first use.
struct ChainEntry {
  ChainPlan plan;
  bool agreed = false;  // the caller agreed on it with the ranks it touches: prepare without communicating
  std::unique_ptr<detail::PreparedPlan> baseline;
  std::unique_ptr<detail::PreparedPlan> fused;
};

// A planned redistribution, prepared at once.
struct RedistributionEntry {
  Plan plan;
  std::unique_ptr<detail::PreparedPlan> prepared;
};

}  // namespace

struct Executor::Impl {
  Impl(Backend& b, const PlanCost* c) : backend(b), cost(c), agreement(b) {
    if (cost == nullptr) chooseCost();
  }
  ~Impl() {
    chains.clear();
    redistributions.clear();
    plans.clear();
  }

  // The model CHIMERA_TOPOLOGY names, else the backend's own; bytes alone and `costError` set
  // when it cannot be loaded or does not fit the mesh.
  void chooseCost();
  Status agree(const std::string& signature, const Status& local, std::string_view failure, Stream stream);
  Status execute(detail::PreparedPlan& plan, const void* input, std::size_t inputBytes, void* output,
                 std::size_t outputBytes, bool agreed, Stream stream);
  Status prepare(const Plan& plan, std::unique_ptr<detail::PreparedPlan>& slot, bool agreed, Stream stream);
  // Prepares `slot` from `plan` unless it holds a plan (freed ones are prepared again), then
  // runs it on `stream`. `agreed`: prepared without communicating, buffers checked locally.
  Status runSlot(const Plan& plan, std::unique_ptr<detail::PreparedPlan>& slot, const void* input,
                 std::size_t inputBytes, void* output, std::size_t outputBytes, bool agreed, Stream stream);
  Status findChain(const ChainRequest& request, bool agreed, Stream stream, ChainEntry*& out);

  Backend& backend;
  std::shared_ptr<detail::ScratchPool> scratch;  // the backend's; declared first, destroyed after the plans
  std::unique_ptr<PlanCost> ownCost;
  const PlanCost* cost;
  Status costError = Status::ok();  // returned by every planning call
  std::unordered_map<detail::ChainKey, std::unique_ptr<ChainEntry>, detail::ChainKeyHash> chains;
  std::unordered_map<std::string, std::unique_ptr<RedistributionEntry>> redistributions;
  std::unordered_map<std::string, std::unique_ptr<detail::PreparedPlan>> plans;
  detail::PreparedPlanCache preparedPlans{Executor::kDefaultPreparedPlanLimit};
  std::size_t passes = 0;
  detail::BackendReduction agreement;
  bool checkBuffers = checkBuffersFromEnv(backend);
  detail::CopyCount copies;  // the local copies of every plan run
};

void Executor::Impl::chooseCost() {
  const std::string name = detail::topologyFromEnv(backend.defaultTopology());
  Status loaded = loadPlanCost(name, ownCost, backend.movesBoxesEverywhere());
  if (loaded.isOk()) loaded = ownCost->checkMesh(backend.mesh());
  if (!loaded.isOk()) {
    costError = Status::invalidArgument(
        fmt::format("executor cost model '{}' (CHIMERA_TOPOLOGY, else the backend's own): {}", name, loaded.message()));
    ownCost = std::make_unique<BytesCost>();
  }
  cost = ownCost.get();
}

// Agrees over the world on the signature's hash and whether any rank failed. Every rank takes
// part whatever its local verdict.
Status Executor::Impl::agree(const std::string& signature, const Status& local, std::string_view failure,
                             Stream stream) {
  const std::int64_t hash = detail::Hasher().add(signature).agreementValue();
  const AxisSet world[] = {backend.mesh().allAxes()};
  detail::SignatureVerdict verdict;
  CHIMERA_RETURN_IF_ERROR(
      detail::agreeOnSignature(hash, !local.isOk(), backend.rank(), {}, agreement.over(world, stream), verdict));
  if (!local.isOk()) return local;
  if (verdict.anyFailed) {
    return Status::mismatch(
        fmt::format("rank {} failed to {}; this rank has {}", verdict.failedRank, failure, signature));
  }
  if (!verdict.sameHash()) {
    return Status::mismatch(fmt::format(
        "ranks disagree on what to plan: this rank has {} (hash {:#x}), the world's hashes range over [{:#x}, {:#x}]",
        signature, hash, verdict.lowHash, verdict.highHash));
  }
  return Status::ok();
}

// With argument checking on, the buffer sizes are agreed on before running, so a rank with a
// bad buffer fails every rank instead of leaving its peers waiting in a collective.
Status Executor::Impl::execute(detail::PreparedPlan& plan, const void* input, std::size_t inputBytes, void* output,
                               std::size_t outputBytes, bool agreed, Stream stream) {
  if (checkBuffers && !agreed) {
    CHIMERA_RETURN_IF_ERROR(agree("buffers that fit", plan.checkBuffers(input, inputBytes, output, outputBytes),
                                  "pass buffers that fit the plan", stream));
  }
  const detail::CopyCount before = plan.copies();
  const Status status = plan.run(input, inputBytes, output, outputBytes, stream);
  copies.calls += plan.copies().calls - before.calls;
  copies.bytes += plan.copies().bytes - before.bytes;
  return status;
}

Status Executor::Impl::prepare(const Plan& plan, std::unique_ptr<detail::PreparedPlan>& slot, bool agreed,
                               Stream stream) {
  auto preparedPlan = std::make_unique<detail::PreparedPlan>();
  if (!scratch) CHIMERA_RETURN_IF_ERROR(detail::scratchPoolFor(backend, scratch));
  CHIMERA_RETURN_IF_ERROR(agreed ? preparedPlan->prepareAgreed(backend, plan, scratch.get())
                                 : preparedPlan->prepare(backend, plan, scratch.get(), stream));
  slot = std::move(preparedPlan);
  preparedPlans.added(slot);
  return Status::ok();
}

Status Executor::Impl::runSlot(const Plan& plan, std::unique_ptr<detail::PreparedPlan>& slot, const void* input,
                               std::size_t inputBytes, void* output, std::size_t outputBytes, bool agreed,
                               Stream stream) {
  if (slot) {
    preparedPlans.ran(slot);
  } else {
    CHIMERA_RETURN_IF_ERROR(prepare(plan, slot, agreed, stream));
  }
  // A graph captured now replays this plan's scratch addresses: keep the plan alive.
  if (backend.capturing(stream)) preparedPlans.pin(slot);
  return execute(*slot, input, inputBytes, output, outputBytes, agreed, stream);
}

Status Executor::Impl::findChain(const ChainRequest& request, bool agreed, Stream stream, ChainEntry*& out) {
  Status local = costError.isOk() ? detail::checkRequestMesh(request, backend.mesh()) : costError;
  detail::ChainKey key;
  if (local.isOk()) {
    key = detail::chainKey(request);
    if (auto it = chains.find(key); it != chains.end()) {
      out = it->second.get();
      return Status::ok();
    }
  }
  const std::string signature =
      local.isOk() ? detail::chainSignature(request, cost->name()) : "invalid request: " + local.message();
  auto entry = std::make_unique<ChainEntry>();
  if (local.isOk()) {
    ++passes;
    local = planChain(request.spec, request.from, request.chain, request.consume, *cost, entry->plan, backend.rank());
  }
  if (agreed) {
    CHIMERA_RETURN_IF_ERROR(local);
    entry->agreed = true;
  } else {
    CHIMERA_RETURN_IF_ERROR(agree(signature, local, "plan the request", stream));
  }
  const ChainPlan& p = entry->plan;
  if (debugLogging()) {
    CHIMERA_LOG_DEBUG(kLog, "planned {}: {} ({} candidates; baseline {}, fused {})\nbaseline:\n{}fused:\n{}", signature,
                      p.useFused ? "fused" : "baseline", p.candidates, p.baselineCost.summary, p.fusedCost.summary,
                      p.baseline.toString(), p.fused.toString());
  }
  out = entry.get();
  chains.emplace(std::move(key), std::move(entry));
  return Status::ok();
}

Executor::Executor(Backend& backend, const PlanCost* cost) : impl_(std::make_unique<Impl>(backend, cost)) {}

Executor::~Executor() = default;

Status Executor::plan(const ChainRequest& request, const ChainPlan*& out) {
  ChainEntry* entry = nullptr;
  CHIMERA_RETURN_IF_ERROR(impl_->findChain(request, false, nullptr, entry));
  out = &entry->plan;
  return Status::ok();
}

Status Executor::planAgreed(const ChainRequest& request, const ChainPlan*& out) {
  ChainEntry* entry = nullptr;
  CHIMERA_RETURN_IF_ERROR(impl_->findChain(request, true, nullptr, entry));
  out = &entry->plan;
  return Status::ok();
}

Status Executor::runChain(const ChainRequest& request, ChainMode mode, const void* input, std::size_t inputBytes,
                          void* output, std::size_t outputBytes, Stream stream) {
  ChainEntry* entry = nullptr;
  CHIMERA_RETURN_IF_ERROR(impl_->findChain(request, false, stream, entry));
  const bool fused = mode == ChainMode::Fused || (mode == ChainMode::Planned && entry->plan.useFused);
  return impl_->runSlot(fused ? entry->plan.fused : entry->plan.baseline, fused ? entry->fused : entry->baseline, input,
                        inputBytes, output, outputBytes, entry->agreed, stream);
}

Status Executor::redistribute(const TensorSpec& spec, const Layout& from, const Layout& to, const void* input,
                              std::size_t inputBytes, void* output, std::size_t outputBytes, Stream stream) {
  const Mesh& mesh = impl_->backend.mesh();
  Status local = impl_->costError;
  if (local.isOk() && (!from.mesh().axesEqual(mesh) || !to.mesh().axesEqual(mesh))) {
    local = Status::invalidArgument(fmt::format("redistribution {} -> {} on meshes {} and {}, the backend is on {}",
                                                from.toString(), to.toString(), from.mesh().toString(),
                                                to.mesh().toString(), mesh.toString()));
  }
  const std::string signature = local.isOk() ? detail::redistributionSignature(spec, from, to, impl_->cost->name())
                                             : "invalid request: " + local.message();
  auto it = impl_->redistributions.find(signature);
  if (!local.isOk() || it == impl_->redistributions.end()) {
    auto entry = std::make_unique<RedistributionEntry>();
    if (local.isOk()) {
      ++impl_->passes;
      local = planRedistribution(spec, from, to, 1, *impl_->cost, entry->plan, nullptr, impl_->backend.rank());
    }
    CHIMERA_RETURN_IF_ERROR(impl_->agree(signature, local, "plan the redistribution", stream));
    if (debugLogging()) CHIMERA_LOG_DEBUG(kLog, "planned {}:\n{}", signature, entry->plan.toString());
    it = impl_->redistributions.emplace(signature, std::move(entry)).first;
  }
  RedistributionEntry& entry = *it->second;  // prepared (collectively) after agreeing
  return impl_->runSlot(entry.plan, entry.prepared, input, inputBytes, output, outputBytes, false, stream);
}

Status Executor::run(const Plan& plan, const void* input, std::size_t inputBytes, void* output, std::size_t outputBytes,
                     Stream stream) {
  const std::string key = detail::planKey(plan);
  auto it = impl_->plans.find(key);
  if (it == impl_->plans.end()) {
    if (debugLogging()) CHIMERA_LOG_DEBUG(kLog, "preparing an explicit plan:\n{}", plan.toString());
    it = impl_->plans.emplace(key, nullptr).first;  // the slot keeps its address in the map
  }
  return impl_->runSlot(plan, it->second, input, inputBytes, output, outputBytes, false, stream);
}

std::size_t Executor::cachedPlans() const { return impl_->preparedPlans.size(); }

std::size_t Executor::evictedPlans() const { return impl_->preparedPlans.evictions(); }

Status Executor::setPreparedPlanLimit(std::size_t limit) {
  CHIMERA_CHECK_ARG(limit >= 1, "prepared-plan limit {} (must be at least 1)", limit);
  impl_->preparedPlans.setLimit(limit);
  return Status::ok();
}

const PlanCost& Executor::cost() const { return *impl_->cost; }

std::size_t Executor::planningPasses() const { return impl_->passes; }

std::uint64_t Executor::localCopies() const { return impl_->copies.calls; }

std::uint64_t Executor::localCopyBytes() const { return impl_->copies.bytes; }

std::size_t Executor::pinnedPlans() const { return impl_->preparedPlans.pinned(); }

void Executor::releaseCapturedPlans() { impl_->preparedPlans.unpinAll(); }

Status Executor::setScratchLimit(std::size_t bytes) {
  CHIMERA_CHECK_ARG(bytes >= 1, "scratch limit of 0 bytes (must be at least 1)");
  if (!impl_->scratch) CHIMERA_RETURN_IF_ERROR(detail::scratchPoolFor(impl_->backend, impl_->scratch));
  impl_->scratch->setLimit(bytes);
  return Status::ok();
}

std::size_t Executor::scratchBytes() const { return impl_->scratch ? impl_->scratch->heldBytes() : 0; }

}  // namespace chimera
