// SPDX-License-Identifier: Apache-2.0
// The plan executor: turns the planner's Plans into calls on a Backend, with plans and their
// scratch memory prepared once and cached, so a repeated chain pays a lookup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "chimera/backend.hpp"
#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/planning/plan.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera {

/// A chain to run: the tensor, where it starts, the ops as written, what is read at the end.
struct ChainRequest {
  TensorSpec spec;                ///< the logical tensor
  Layout from;                    ///< where it starts
  Chain chain;                    ///< the ops as written
  std::optional<Layout> consume;  ///< default: the chain's final layout
};

/// Which program runChain executes.
enum class ChainMode : std::uint8_t {
  Baseline,  ///< the ops exactly as written
  Planned,   ///< the planner's decision (fused only when the cost model predicts a gain)
  Fused,     ///< the best fused plan, even when the decision is baseline (benchmarks, tests)
};

/// Runs Plans on a Backend. Every plan step becomes backend calls made by the ranks that
/// hold the step's input (and, for Send/ManyToMany, output) buffer; local work (box
/// pack/unpack, copies, scaling) runs in the backend's memory space. Each distinct plan is
/// prepared once: this rank's part resolved, scratch allocated with `backend.allocate`. At most
/// `setPreparedPlanLimit` prepared plans are kept (default kDefaultPreparedPlanLimit): beyond
/// it the least recently run one is freed, with its scratch, and prepared again (collectively,
/// no new planning pass) when it runs next. Every rank frees the same plans, since all make
/// the same calls.
/// Not thread-safe; every rank of the mesh must make the same calls in the same order. The
/// stream belongs to each run call: on a device backend (NCCL) its work, agreements included,
/// is ordered on the `stream` it is given (a cudaStream_t; nullptr the legacy default stream)
/// and the call returns once it is enqueued: synchronize that stream before reading the
/// output on the host. Host backends ignore the stream.
class Executor {
 public:
  /// Runs on `backend` (not owned; must outlive the executor), pricing plans with `cost` (not
  /// owned). Null: the model `CHIMERA_TOPOLOGY` names when set, else the backend's own
  /// (`Backend::defaultTopology`: host:N on the MPI backend, bytes alone on NCCL), as a
  /// Session prices; an unknown `CHIMERA_TOPOLOGY` makes every planning call InvalidArgument
  /// naming it.
  explicit Executor(Backend& backend, const PlanCost* cost = nullptr);
  /// Frees every prepared plan's scratch.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// Plans `request` (cached by signature: chain text, layouts, mesh, shape, dtype, cost name) without running it.
  /// On first use of a signature all ranks of the world check that they agree on it (a hash compared by a MIN/MAX
  /// allReduce over the world); a rank with a different chain makes EVERY rank return Status::mismatch, no hang.
  /// `out` stays valid as long as the executor. The plans are this rank's (planChain with
  /// `rank`): each ManyToMany step holds only the transfers this rank sends or receives.
  [[nodiscard]] Status plan(const ChainRequest& request, const ChainPlan*& out);
  /// As `plan`, for a caller that has already agreed on `request` with every rank the plan
  /// touches (a Session recording per rank agrees within its groups and with its pipeline
  /// peers): nothing is agreed over the world, and the chain's programs are later prepared
  /// without communicating, so only the ranks that take part in a step make its calls. Every
  /// group a step uses must have been created (`Backend::createGroups`); running a program
  /// that uses one that was not is InvalidArgument naming the group.
  [[nodiscard]] Status planAgreed(const ChainRequest& request, const ChainPlan*& out);
  /// Plans (cached) and runs `request` in `mode`, ordered on `stream`. `input`/`output` are this rank's local
  /// buffers of the start and consumed layouts (nullptr allowed with 0 bytes on a rank that holds nothing there),
  /// with their sizes in bytes: a buffer smaller than the rank's local tensor is InvalidArgument naming both sizes.
  [[nodiscard]] Status runChain(const ChainRequest& request, ChainMode mode, const void* input, std::size_t inputBytes,
                                void* output, std::size_t outputBytes, Stream stream = nullptr);
  /// Moves a tensor of `spec` placed as `from` into `to` by the cheapest plan (planRedistribution), cached
  /// likewise, ordered on `stream`.
  [[nodiscard]] Status redistribute(const TensorSpec& spec, const Layout& from, const Layout& to, const void* input,
                                    std::size_t inputBytes, void* output, std::size_t outputBytes,
                                    Stream stream = nullptr);
  /// Runs an explicit plan (prepared once per distinct plan and cached), ordered on `stream`.
  [[nodiscard]] Status run(const Plan& plan, const void* input, std::size_t inputBytes, void* output,
                           std::size_t outputBytes, Stream stream = nullptr);
  /// Prepared plans an executor keeps unless told otherwise.
  static constexpr std::size_t kDefaultPreparedPlanLimit = 256;
  /// Keeps at most `limit` prepared plans, freeing the least recently run ones beyond it now and
  /// later. Call it with the same value on every rank. InvalidArgument when `limit` is 0.
  [[nodiscard]] Status setPreparedPlanLimit(std::size_t limit);
  /// Number of prepared plans held now.
  std::size_t cachedPlans() const;
  /// Number of prepared plans freed so far to stay within the limit.
  std::size_t evictedPlans() const;
  /// The cost model that prices this executor's plans: the one given, or the one the
  /// constructor chose (bytes alone while the environment's choice could not be loaded).
  const PlanCost& cost() const;
  /// Number of planning passes (planChain / planRedistribution calls) done so far.
  std::size_t planningPasses() const;
  /// Local copies the plans this executor ran made on this rank so far: every pack, unpack
  /// and copy call (a copy of a buffer onto itself is skipped and not counted), and their bytes.
  std::uint64_t localCopies() const;
  std::uint64_t localCopyBytes() const;
  /// Number of prepared plans pinned because they ran while their stream was being captured
  /// (`Backend::capturing`, a CUDA graph capture): a pinned plan is never freed by the limit, since the graph replays
  /// its scratch addresses; pinned plans do not count toward the limit.
  std::size_t pinnedPlans() const;
  /// Unpins every pinned plan, once the graphs captured over them are destroyed; plans beyond
  /// the limit are freed then. Call it with the same timing on every rank.
  void releaseCapturedPlans();
  /// Caps the scratch memory the backend's scratch pool holds (one pool per backend, shared
  /// by the prepared plans of every executor on it; default CHIMERA_SCRATCH_LIMIT_BYTES, else
  /// no cap). Free pool blocks beyond it are returned at once; preparing a plan that would
  /// pass it fails with BackendError naming the cap. Call it with the same value on every
  /// rank. InvalidArgument when `bytes` is 0; the environment's errors otherwise.
  [[nodiscard]] Status setScratchLimit(std::size_t bytes);
  /// Bytes the backend's scratch pool holds now (in use by prepared plans + free for reuse).
  std::size_t scratchBytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chimera
