// SPDX-License-Identifier: Apache-2.0
// The routed exchange of a mixture-of-experts layer (stable API): top-k token dispatch to the
// ranks that hold the chosen experts and the weighted combine back, with uneven counts that
// change every step, each token sent once per destination rank (across hosts, where it pays,
// once per destination host and fanned out there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera {

/// Which program a routed exchange runs.
enum class RoutedProgram : std::uint8_t {
  Planned,    ///< the planner's decision: each fusion only when the cost model says it pays
  Fused,      ///< every fusion the token layout allows (tests, benchmarks)
  PerExpert,  ///< the chain as frameworks issue it: one row per (token, expert), every replica dispatching
};

/// A rank's part in a routed exchange. Every layout but "pp=@k" has one: Both. With "pp=@k" the
/// tokens are on pipeline stage k and the experts on stage k+1 (docs/moe.md, section 2).
enum class RoutedRole : std::uint8_t {
  Both,     ///< holds tokens and experts: makes every call
  Source,   ///< stage k: holds the tokens; calls dispatch (its tokens) and dispatchBackward (writes grad x, grad w)
  Experts,  ///< stage k+1: holds the experts and owns the tokens after the hand-off; calls dispatch (no tokens),
            ///< receive, combine, combineBackward and dispatchBackward (its rows' gradients, no grad x)
  Outside,  ///< another stage: makes no call (each returns InvalidArgument)
};

/// What happens to tokens beyond the capacity of a (source, destination rank) pair.
enum class CapacityOverflow : std::uint8_t {
  Drop,   ///< dropped (their contribution to the combine is 0) and counted in RoutedStats
  Error,  ///< the dispatch fails with InvalidArgument on every rank of the group
};

/// A routed exchange's configuration: everything its programs are keyed by. Counts are not
/// part of it: they are data of each dispatch.
struct RoutedExchangeOptions {
  /// E, the number of experts; experts are placed in contiguous blocks of E/R over the R ranks
  /// of `group`, by group index (expert e lives on group index e / (E/R)). E % R must be 0.
  std::int64_t numExperts = 0;
  /// K, the experts each token is routed to (distinct per token).
  int topK = 0;
  /// H, the elements of one token row.
  std::int64_t hidden = 0;
  /// Element type of token rows (F32, F64, F16 or BF16; 16-bit rows are summed in float and
  /// rounded after every product and sum).
  DataType dtype = DataType::F32;
  /// Element type of the routing weights (F32, F64, F16 or BF16).
  DataType weightDtype = DataType::F32;
  /// The dispatch group ("ep", or "ep+tp" folded); empty: every axis of the mesh.
  AxisSet group;
  /// Where this rank's tokens come from, as layout text over the token axes: "" (each rank owns
  /// its rows), "tp=S0" / "sp=S0" (SP/TP shards: the same as owned rows, dispatched from and
  /// combined back to the owner), "tp=R" (every rank of the tp group holds the same tokens and
  /// routing), "tp=P" (partial sums over tp, e.g. a row-parallel linear's output; the routing is
  /// replicated over tp), "pp=@k" (held by pipeline stage k of axis pp; the experts are on the
  /// dispatch group of stage k+1, whose ranks own the tokens after the hand-off: see RoutedRole).
  /// The token axes must lie inside `group` or outside it, never partly; a pipeline axis outside
  /// it (an empty `group` is then every other axis).
  std::string tokenLayout;
  /// Tokens per (source rank, destination rank) pair in capacity mode; 0 (default) is dropless.
  /// Capacity mode sends fixed blocks (no count exchange; the padding bytes are counted). Not
  /// with "pp=@k" (create returns Unsupported).
  std::int64_t capacity = 0;
  /// Capacity mode's overflow policy.
  CapacityOverflow overflow = CapacityOverflow::Drop;
  /// Most bytes of send scratch, and of receive scratch, one dispatch may hold on a rank. So that
  /// the receive side is known to fit before any data moves, one sender's block to one rank may
  /// hold scratchLimitBytes / R; a dispatch past that fails with InvalidArgument on the sender
  /// (naming both numbers) and Mismatch on its peers, in the count exchange (capacity mode:
  /// create fails). 0: CHIMERA_ROUTED_SCRATCH_LIMIT_BYTES, else 16 GiB.
  std::size_t scratchLimitBytes = 0;
  /// Which program to run.
  RoutedProgram program = RoutedProgram::Planned;
  /// Cost model the Planned decision prices with: a topology preset or profile path
  /// (include/chimera/planning/topology.hpp), or "bytes" for bytes alone. Empty (default):
  /// `CHIMERA_TOPOLOGY`, else the backend's own (`Backend::defaultTopology`: host:N on MPI), as a Session
  /// and an Executor price; create fails naming a model it cannot load.
  std::string topology;
  /// Tokens per rank the decision is priced at (the decision is made once, not per dispatch).
  std::int64_t plannedTokens = 4096;
};

/// Bytes and counts of one exchange on this rank (payload and headers to other ranks only).
struct RoutedStats {
  std::uint64_t payloadBytes = 0;   ///< token rows sent to other ranks
  std::uint64_t headerBytes = 0;    ///< routing headers (local expert ids, weights) and block words
  std::uint64_t countBytes = 0;     ///< the count exchange (dispatch only)
  std::uint64_t paddingBytes = 0;   ///< empty capacity slots sent (capacity mode)
  std::uint64_t reduceBytes = 0;    ///< the ReduceScatter / AllReduce / AllGather over the token axes
  std::uint64_t droppedTokens = 0;  ///< (token, destination rank) pairs dropped by capacity
  int rounds = 0;                   ///< communication rounds (collective calls) of the exchange
  /// Of payload, header and count bytes, those sent to members of the exchange on another host
  /// (Backend::hostOfRank): what crosses the network between hosts.
  std::uint64_t crossHostBytes = 0;
  /// Everything this rank sent: payload + headers + counts + padding + reductions.
  std::uint64_t bytesSent() const { return payloadBytes + headerBytes + countBytes + paddingBytes + reduceBytes; }
};

/// The state of one dispatch: who sent what where, so that combine and both backwards reuse it
/// without another count exchange. Produced by RoutedExchange::dispatch; move-only. A handle
/// belongs to the exchange that dispatched into it: receive, combine and both backwards of any
/// other exchange return InvalidArgument for it, before any communication (as for a handle that
/// holds no completed dispatch), on the calling rank only.
class RoutedDispatch {
 public:
  RoutedDispatch();
  ~RoutedDispatch();
  RoutedDispatch(RoutedDispatch&&) noexcept;
  RoutedDispatch& operator=(RoutedDispatch&&) noexcept;
  RoutedDispatch(const RoutedDispatch&) = delete;
  RoutedDispatch& operator=(const RoutedDispatch&) = delete;

  /// Rows this rank received: one per (received token, local expert).
  std::int64_t rows() const;
  /// Rows per local expert, in local expert order (E/R entries).
  const std::vector<std::int64_t>& tokensPerExpert() const;
  /// This rank's tokens (T).
  std::int64_t tokens() const;
  /// The dispatch's bytes on this rank.
  const RoutedStats& stats() const;

  struct State;
  /// Internal.
  State& state() { return *state_; }
  const State& state() const { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

/// A routed exchange over one group of a Backend: dispatch, receive, combine, and the backward
/// of each. Create once per configuration and reuse for every step: the programs, decisions
/// and scratch are kept across dispatches, keyed by the options (shapes, layout, group), never
/// by counts, so fresh routings every step prepare nothing new. Runs on host memory (the MPI
/// backend); on NCCL the backend primitives exist (allToAllV, exchangeCounts) but the local
/// row work does not yet: create returns Unsupported.
///
/// Every call is collective over the dispatch group (and, for "tp=R" / "tp=P", the token axes):
/// each rank makes the same calls in the same order. Rows are row-major with `hidden` elements.
/// With "pp=@k" the calls are collective over the dispatch groups of stages k and k+1 together,
/// each rank in its role (role()); a call outside the role is InvalidArgument on that rank, and
/// in dispatch and dispatchBackward it fails the ranks it exchanges with as well.
/// Errors: InvalidArgument for a bad argument on this rank (Mismatch naming this rank on the
/// others of the call, in the call's first round, except for a handle from another exchange or
/// without a completed dispatch: that rank knows no sizes to take part with, so it fails before
/// any message and announces the failure (Backend::announceFault)); an
/// expert id out of range on any replica of "tp=R" / "tp=P" fails every replica, whether or not
/// it dispatches that token; routing metadata that does not agree between ranks (an expert id out of range, K or H or
/// the program different on one rank, a buffer of the wrong size reported by a binding) is an error on every rank of
/// the group (Mismatch on the ranks that learn it from a peer), never a hang or garbage.
class RoutedExchange {
 public:
  /// Checks `options` against `backend`'s mesh and decides the program. Creates the
  /// communicators of the dispatch group and of the token axes that do not exist yet
  /// (Backend::createGroups: collective over the mesh, as every rank creates the exchange with
  /// the same group and layout), then agrees on the options over the dispatch group (one small
  /// AllReduce). Every check that can fail on one rank (layout, dtypes, capacity, K in [1, E],
  /// E divisible by R, the cost model, capacity blocks over the scratch limit) runs before any
  /// message, and a rank whose check failed still takes part: it returns InvalidArgument naming
  /// the argument, and every other rank of the group Mismatch naming that rank, in the same
  /// round; where the options of the ranks differ, every rank returns Mismatch. `localError`,
  /// when not Ok, is this rank's own failure found before the call (a binding's check): it takes
  /// part the same way and returns it. No exchange is made unless every rank returns Ok.
  [[nodiscard]] static Status create(Backend& backend, const RoutedExchangeOptions& options,
                                     std::unique_ptr<RoutedExchange>& out, const Status& localError = Status::ok());
  ~RoutedExchange();
  RoutedExchange(const RoutedExchange&) = delete;
  RoutedExchange& operator=(const RoutedExchange&) = delete;

  /// Forward dispatch of `tokens` rows of `x` routed by `topkIdx` ([tokens, K] global expert ids,
  /// distinct per token) and `topkWeights` ([tokens, K] of weightDtype): one count exchange
  /// (dropless), then one uneven all-to-all of records (token row + its local experts and
  /// weights) into scratch; once per host (oncePerHost()), the count exchange, then the records
  /// to this host's ranks and to a forwarder on each other host, then the forwarders' fan-out. `localError`, when not
  /// Ok, is this rank's own failure (a binding's check): the rank still takes part and every rank returns an error.
  /// Afterwards `handle` says how many rows arrived; call receive to expand them. "pp=@k": stage k passes its tokens;
  /// stage k+1 passes none (tokens 0, null pointers) and its handle takes the tokens of its stage-k peer
  /// (handle.tokens()).
  [[nodiscard]] Status dispatch(const void* x, const std::int64_t* topkIdx, const void* topkWeights,
                                std::int64_t tokens, RoutedDispatch& handle, const Status& localError = Status::ok());
  /// Writes the received rows, grouped by local expert in order (within one expert by source
  /// group index, then source token order): `recvX` [rows, H], `recvExpert` [rows] global ids,
  /// `recvWeight` [rows] of weightDtype (any may be null to skip). Local; frees the handle's
  /// received records.
  [[nodiscard]] Status receive(RoutedDispatch& handle, void* recvX, std::int64_t* recvExpert, void* recvWeight) const;
  /// y[t] = sum over k of w[t,k] * expertOut[row of (t, k)], `y` [tokens, H]; `rowWeights`
  /// [rows] (the received weights, or null for weights of 1). The rows of one token on one
  /// rank are summed there first and sent back as one row. Dropped pairs contribute 0.
  [[nodiscard]] Status combine(const void* expertOut, const void* rowWeights, const RoutedDispatch& handle, void* y,
                               RoutedStats* stats = nullptr, const Status& localError = Status::ok());
  /// Backward of combine: from `gradY` [tokens, H] writes `gradExpertOut` [rows, H] = w * dy and
  /// `gradRowWeights` [rows] = <dy, expertOut row> (null to skip). One exchange, the dispatch's way
  /// (once per host, oncePerHost(): dy to a forwarder on each other host, then its fan-out).
  [[nodiscard]] Status combineBackward(const void* gradY, const void* expertOut, const void* rowWeights,
                                       const RoutedDispatch& handle, void* gradExpertOut, void* gradRowWeights,
                                       RoutedStats* stats = nullptr, const Status& localError = Status::ok());
  /// Backward of dispatch: gradX [tokens, H] = sum of the gradients of a token's rows;
  /// gradWeights [tokens, K] from `gradRowWeights` [rows] (both of the latter may be null). One
  /// exchange, the combine's way (once per host, oncePerHost(): a host's rows summed at the
  /// forwarder, one row per token crossing back). "pp=@k": stage k+1 passes its rows' gradients
  /// and null gradX and gradWeights; stage k passes null gradRecvX and receives gradX and gradWeights.
  [[nodiscard]] Status dispatchBackward(const void* gradRecvX, const void* gradRowWeights, const RoutedDispatch& handle,
                                        void* gradX, void* gradWeights, RoutedStats* stats = nullptr,
                                        const Status& localError = Status::ok());

  /// The options in force (defaults resolved).
  const RoutedExchangeOptions& options() const;
  /// Whether the Planned decision took each fusion, and why ("once per rank: 1.89 vs 2 rows
  /// per token ..."), one line per rule.
  const std::vector<std::string>& explain() const;
  /// Whether the token-axes fusion (tp=R split, tp=P ReduceScatter) runs.
  bool splitsReplicas() const;
  /// Whether a stage's tokens ("pp=@k") go straight to the next stage's experts (else the
  /// hand-off to the peer first, then the dispatch there).
  bool straightFromStage() const;
  /// This rank's part in the exchange.
  RoutedRole role() const;
  /// Whether a token is sent once per destination rank (else once per expert).
  bool oncePerRank() const;
  /// Whether a token crosses to another host once per destination host, to a forwarder there
  /// that fans it out to that host's ranks (rule 6; only where the dispatch group spans hosts).
  bool oncePerHost() const;
  /// Bytes of send scratch held for reuse: the largest set of blocks sent so far (it grows
  /// with the counts up to scratchLimitBytes and is never keyed by them).
  std::size_t scratchBytes() const;

  struct Impl;

 private:
  explicit RoutedExchange(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chimera
