// SPDX-License-Identifier: Apache-2.0
// Call-time fusion: a Session records the collectives a framework issues, one call at a time,
// and plans the recorded window only when a result is needed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "chimera/backend.hpp"
#include "chimera/executor.hpp"
#include "chimera/layout.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera {

/// A value the Session tracks: one tensor in one buffer at one point of the current window.
/// Every recorded call returns a new handle for its result (in-place calls too), so the
/// Session sees the dataflow. Handles expire when their window is flushed.
struct TensorHandle {
  std::uint32_t index = 0xffffffffu;  ///< position in the window's value table
  std::uint64_t window = 0;           ///< the window it belongs to
};

/// How a Session behaves.
struct SessionOptions {
  /// Plan and fuse recorded windows (true) or run exactly the recorded calls (false).
  bool fusion = true;
  /// Per-rank recording (the mode a training framework uses): each rank records only the
  /// calls it takes part in, on tensors it holds, and its own side of each pipeline hand-off
  /// (`send`/`sendBackward` on the sending stage, `recv`/`recvBackward` on the receiving one). A new
  /// window is agreed within the groups its tensors live on and with the hand-off peers,
  /// never over the world; every group a plan uses must exist (`Backend::createGroups`).
  /// False: SPMD recording, every rank records every call (see the class comment).
  bool perRank = false;
  /// Agree on the window at every flush (SPMD: over the world; per rank: within its groups
  /// and with its hand-off peers) instead of only when a window is planned for the first
  /// time. Catches a rank that changes its calls (or its consume declarations) alone after
  /// warm-up; costs one small allReduce (and, with hand-offs, one message exchange) per window.
  bool checkEveryWindow = false;
  /// The stream this session's work is ordered on (NCCL: a cudaStream_t; nullptr the legacy
  /// default stream): every backend call of a flush, agreements and hand-off exchanges
  /// included, is given it. The backend keeps no stream, so sessions on different streams
  /// share one backend.
  Stream stream = nullptr;
  /// Prices plans (not owned; must outlive the session). Null: the model `topology` names.
  const PlanCost* cost = nullptr;
  /// The cost model when `cost` is null (`loadPlanCost`): "bytes" (fuse whenever fewer bytes
  /// move), a topology preset ("host:8", "pcie-4080x8", ...) or a profile file from
  /// `chimera-bench --calibrate`. Empty: the backend's own (`Backend::defaultTopology`:
  /// "host:N" on MPI, whose margin keeps windows with little to gain as recorded; "bytes"
  /// on NCCL).
  std::string topology;
  /// Prepared plans (each with its scratch) the session's executor keeps; the least recently
  /// run are freed beyond it and prepared again when needed (`Executor::setPreparedPlanLimit`).
  std::size_t preparedPlanLimit = Executor::kDefaultPreparedPlanLimit;

  /// The defaults, overridden by the environment: `CHIMERA_FUSION=0|1` sets `fusion`,
  /// `CHIMERA_CHECK_EVERY_WINDOW=0|1` sets `checkEveryWindow`, `CHIMERA_PREPARED_PLAN_LIMIT=N` sets
  /// `preparedPlanLimit`, `CHIMERA_TOPOLOGY=NAME|FILE` sets `topology`. InvalidArgument naming
  /// the variable when a value is malformed (an unknown topology fails Session::create).
  [[nodiscard]] static Status fromEnvironment(SessionOptions& out);
};

/// Counters of a Session since it was created.
struct SessionStats {
  std::uint64_t recordedCalls = 0;    ///< calls recorded (collectives, slices, hand-offs)
  std::uint64_t windows = 0;          ///< windows run (non-empty flushes)
  std::uint64_t windowCacheHits = 0;  ///< windows whose plan came from the cache
  std::uint64_t chainsRun = 0;        ///< chains run (a recorded call that is not fused is a chain of one)
  std::uint64_t fusedChains = 0;      ///< chains that ran a fused plan
  /// Bytes all ranks together would send running the recorded calls as written
  /// (bandwidth-optimal formulas of the planner), and with the programs that ran (equal on
  /// every rank).
  std::uint64_t bytesAsRecorded = 0;
  std::uint64_t bytesSent = 0;
  /// This rank's share of the two above: bytes this rank would send running the recorded
  /// calls as written, and with the programs that ran. Per-rank recording fills only these
  /// (sum them over the ranks for the job's total).
  std::uint64_t rankBytesAsRecorded = 0;
  std::uint64_t rankBytesSent = 0;
  /// Agreement collectives and hand-off exchanges this session ran (the Executor's included
  /// in per-rank mode, where it has none of its own). A repeated window adds none unless
  /// `checkEveryWindow` is on.
  std::uint64_t agreements = 0;
  /// Local copies this rank made running the windows: the packs, unpacks and copies of the
  /// plans that ran, and the Session's own staging of a consumed part whose place in the
  /// output buffer is not one contiguous stretch (or that the plan could overwrite before
  /// reading). A window run as recorded makes none. `localCopyBytes` counts their bytes.
  std::uint64_t localCopies = 0;
  std::uint64_t localCopyBytes = 0;
};

/// One counter of SessionStats: its snake_case name (the Python dict key) and its member.
struct SessionStatsField {
  std::string_view name;
  std::uint64_t SessionStats::*member;
};

/// Every counter of SessionStats, in declaration order: the one list the bindings convert
/// from (Python's `Session.stats()`, the C API's chimeraSessionStats_t), so a counter added to
/// SessionStats reaches them all (the static_assert below fails until it is listed here).
inline constexpr std::array<SessionStatsField, 12> kSessionStatsFields{{
    {"recorded_calls", &SessionStats::recordedCalls},
    {"windows", &SessionStats::windows},
    {"window_cache_hits", &SessionStats::windowCacheHits},
    {"chains_run", &SessionStats::chainsRun},
    {"fused_chains", &SessionStats::fusedChains},
    {"bytes_as_recorded", &SessionStats::bytesAsRecorded},
    {"bytes_sent", &SessionStats::bytesSent},
    {"rank_bytes_as_recorded", &SessionStats::rankBytesAsRecorded},
    {"rank_bytes_sent", &SessionStats::rankBytesSent},
    {"agreements", &SessionStats::agreements},
    {"local_copies", &SessionStats::localCopies},
    {"local_copy_bytes", &SessionStats::localCopyBytes},
}};
static_assert(sizeof(SessionStats) == kSessionStatsFields.size() * sizeof(std::uint64_t),
              "every SessionStats counter is listed in kSessionStatsFields");

/// Records collectives on tensors as a framework issues them and runs them when a result is
/// needed: `flush`, `wait`, or `consume` (which also declares what the next computation reads).
///
/// Two recording modes. Per rank (`SessionOptions::perRank`, what a training framework's
/// schedule does): each rank records only the calls it takes part in, on the tensors it holds,
/// and its own side of each pipeline hand-off (`send`/`sendBackward` where the tensor leaves,
/// `recv`/`recvBackward` where it arrives); a hand-off still runs fused across the stage boundary.
/// SPMD (the default), as in the chain vocabulary: every rank of the mesh records the same
/// calls in the same order, describing the same logical tensors; a rank passes its own local
/// buffers, and nullptr with 0 bytes for a tensor it does not hold (e.g. the other pipeline
/// stage's activation). Calls are addressed by mesh axes and change the tensor's layout as the
/// chain ops of the same name do (`chain.hpp`), which also fixes the buffer sizes: each
/// buffer holds the rank's local tensor, row-major.
///
/// At a flush the Session builds the window's dataflow, joins the calls on one tensor into
/// chains, and plans every chain whose result carries a consume declaration (Planned mode of
/// the Executor). A value is *materialised* (written fully, exactly as the recorded call
/// writes it) when it is read by a later call of the window, read by two calls, has no
/// consume declaration at the end of its chain, or lives in a buffer that overlaps another
/// value's buffer (aliasing; decided over all ranks). Declarations therefore only unlock
/// fusion; without them the results are those of the recorded calls.
///
/// After a window with a declaration `consume(t, layout)`, the buffer of `t` holds, on every
/// rank, the part of `layout`'s local tensor at the place where the recorded calls would have
/// put it (its box within `t`'s local box); other bytes of that buffer, and the buffers of
/// the fused chain's intermediate values, are unspecified. A byte-range declaration
/// `consume(t, offset, bytes)` resolves to such a layout (the same on every rank).
///
/// Windows are cached by signature (calls, tensors, layouts, declarations, aliasing): a
/// repeated training step pays a lookup. On a miss the ranks agree on the window (SPMD: one
/// allReduce over the world; per rank: one within the window's groups, and one message
/// exchange with each hand-off peer): a rank with different calls or declarations makes every
/// rank involved return Mismatch, no hang (after warm-up only with `checkEveryWindow`; see
/// docs/session.md for the failure analysis).
///
/// Not thread-safe. Every call below is recorded locally and communicates nothing, except
/// `flush`, `wait` and `consume`, which are collective (SPMD: over the world; per rank: over
/// the ranks of the window's groups and hand-offs).
class Session {
 public:
  /// Most values (registered tensors plus call results) in one window; recording beyond it
  /// is InvalidArgument (flush first).
  static constexpr std::uint32_t kMaxWindowValues = 128;

  /// Creates a session on `backend` (not owned; must outlive the session).
  [[nodiscard]] static Status create(Backend& backend, const SessionOptions& options, std::unique_ptr<Session>& out);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Describes a tensor the framework holds: logical `spec` placed as `layout` on the
  /// backend's mesh, this rank's part in `buffer` (`bytes` long; nullptr and 0 on a rank
  /// that holds nothing). InvalidArgument when the layout does not fit the spec or the mesh,
  /// or the buffer is smaller than the rank's local tensor.
  [[nodiscard]] Status tensor(void* buffer, std::size_t bytes, const TensorSpec& spec, const Layout& layout,
                              TensorHandle& out);

  /// In place: reduces `in` over `axes` (needs `P` or `R` there) with the layout's op.
  [[nodiscard]] Status allReduce(TensorHandle in, AxisSet axes, TensorHandle& out);
  /// Reduces `in` over `axes` and keeps this rank's block of `dim` in `output`.
  [[nodiscard]] Status reduceScatter(TensorHandle in, AxisSet axes, int dim, void* output, std::size_t outputBytes,
                                     TensorHandle& out);
  /// Gathers `in`'s shards of `dim` over `axes` into `output`.
  [[nodiscard]] Status allGather(TensorHandle in, AxisSet axes, int dim, void* output, std::size_t outputBytes,
                                 TensorHandle& out);
  /// Re-shards `in` over `axes` from dim `fromDim` to dim `toDim` into `output`.
  [[nodiscard]] Status allToAll(TensorHandle in, AxisSet axes, int fromDim, int toDim, void* output,
                                std::size_t outputBytes, TensorHandle& out);
  /// Local: keeps this rank's block of `dim` over `axes` (`R` there) in `output`.
  [[nodiscard]] Status slice(TensorHandle in, AxisSet axes, int dim, void* output, std::size_t outputBytes,
                             TensorHandle& out);
  /// In place: the member with group index `root` over `axes` copies its value to all.
  [[nodiscard]] Status broadcast(TensorHandle in, AxisSet axes, int root, TensorHandle& out);
  /// Pipeline hand-off along the single axis `axis` (the `send:AX` chain op): the ranks of
  /// stage k (holders of `in`) send, the ranks of stage k+1 receive into `recvBuffer`. SPMD:
  /// both sides make this one call (a sender passes nullptr/0 as `recvBuffer`, a receiver the
  /// handle of the tensor it does not hold), which stands for a framework's send and recv.
  /// Per rank: only the sender makes it (nullptr/0 as `recvBuffer`); the receiver calls `recv`.
  /// The returned handle is then not held by this rank.
  [[nodiscard]] Status send(TensorHandle in, AxisSet axis, void* recvBuffer, std::size_t recvBytes, TensorHandle& out);
  /// The backward pass's hand-off (the `send:AX:backward` chain op): as `send`, from stage k to
  /// stage k-1.
  [[nodiscard]] Status sendBackward(TensorHandle in, AxisSet axis, void* recvBuffer, std::size_t recvBytes,
                                    TensorHandle& out);
  /// Per-rank recording: this rank's receiving side of `send` along `axis` from the previous
  /// stage. The tensor of `spec` arrives placed as `layout` (a stage placement on `axis`, this
  /// rank's stage; the layout the sender's calls give it), this rank's part into `buffer`.
  /// The returned handle may be read by later calls and declared (`consume`/`declareRead`);
  /// what the rank's group declares decides what the sending stage sends. InvalidArgument
  /// outside per-rank mode, when `layout` is not held by this rank, has no stage on `axis`,
  /// or the buffer is smaller than the local tensor.
  [[nodiscard]] Status recv(const TensorSpec& spec, const Layout& layout, AxisSet axis, void* buffer, std::size_t bytes,
                            TensorHandle& out);
  /// Per-rank recording: the receiving side of `sendBackward` (from the next stage).
  [[nodiscard]] Status recvBackward(const TensorSpec& spec, const Layout& layout, AxisSet axis, void* buffer,
                                    std::size_t bytes, TensorHandle& out);
  /// Records `op` given as a chain op (e.g. parsed from "alltoall:ep:0:1"): the same as the
  /// call of its kind above. In-place kinds (allreduce, broadcast) ignore `output`.
  [[nodiscard]] Status record(TensorHandle in, const ChainOp& op, void* output, std::size_t outputBytes,
                              TensorHandle& out);

  /// Declares that the next computation reads `t` as `layout` only (a layout readable from
  /// `t`'s, see `checkConsumable`), then flushes. InvalidArgument when it is not readable;
  /// the window is then dropped, and ranks that flush it on a first planning get Mismatch.
  [[nodiscard]] Status consume(TensorHandle t, const Layout& layout);
  /// The same declaration without the flush, to declare several values of one window.
  [[nodiscard]] Status declareRead(TensorHandle t, const Layout& layout);
  /// Declares that the next computation on this rank reads only bytes [offset, offset + bytes)
  /// of `t`'s buffer, then flushes. A rank that reads nothing (or holds nothing) passes 0
  /// bytes. Ranks may declare different ranges; at the flush they agree on the smallest
  /// layout readable from `t`'s (sharding some of its `R` axes) whose part on every rank holds
  /// that rank's range, and the range holds what the recorded calls would have put there.
  /// InvalidArgument when the range leaves the local tensor, splits an element, or is not
  /// empty on a rank that holds nothing.
  [[nodiscard]] Status consume(TensorHandle t, std::size_t offset, std::size_t bytes);
  /// The byte-range declaration without the flush.
  [[nodiscard]] Status declareRead(TensorHandle t, std::size_t offset, std::size_t bytes);
  /// Plans (or looks up) and runs every call recorded since the last flush. Collective.
  [[nodiscard]] Status flush();
  /// Hands `t`'s buffer back: flushes the window `t` belongs to (if not flushed yet).
  [[nodiscard]] Status wait(TensorHandle t);

  /// The layout `t` has on the current window. InvalidArgument on an expired handle.
  [[nodiscard]] Status layoutOf(TensorHandle t, Layout& out) const;
  /// Counters since creation.
  SessionStats stats() const;
  /// The options in force.
  const SessionOptions& options() const;
  /// The cost model that prices this session's plans: `options().cost`, or the one
  /// `options().topology` (or the backend's default) named.
  const PlanCost& cost() const;
  /// Orders this session's work on `stream` from the next flush (`SessionOptions::stream`).
  void setStream(Stream stream);

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chimera
