// SPDX-License-Identifier: Apache-2.0
// The routed exchange's implementation object (private): the options resolved against the
// mesh once, the program decided once, and the reusable send scratch. Nothing here depends on
// the counts of a dispatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "chimera/planning/routed_plan.hpp"
#include "chimera/routed_exchange.hpp"
#include "routed/routed_state.hpp"

namespace chimera {

// The received records' buffer while no dispatch holds it, one per thread for every exchange
// (a thread's dispatches run one at a time): a dispatch takes it, receive() gives it back with
// its size, so repeated dispatches write into pages touched before instead of zero-filling and
// faulting in fresh ones (128 MiB on one rank when every token goes to its experts), and the
// MoE layers of a model, each with its exchange, keep one such buffer between them, not one each.
std::vector<std::byte>& spareReceived();

struct RoutedExchange::Impl {
  Backend& backend;
  RoutedExchangeOptions options;
  // This exchange's identity in the process, never reused: the handles it dispatches carry it.
  std::uint64_t serial = 0;
  AxisSet group;
  std::vector<int> groupRanks;    // world rank of each group index
  int ranks = 1;                  // R
  int index = 0;                  // this rank's group index
  std::int64_t localExperts = 1;  // E / R
  AxisSet tokenAxes;
  TokenPlacement placement = TokenPlacement::Owned;
  std::vector<int> tokenRanks;  // world rank of each member of the token axes' group
  int tokenSize = 1;
  int tokenIndex = 0;
  RoutedDecision decision;
  std::vector<std::string> explanation;
  bool oncePerRank = true;
  bool split = false;
  // "pp=@k": the stage k of the tokens (tokenAxes is the pipeline axis, tokenIndex this rank's
  // stage), this rank's role, its peer on the other stage (same coordinates), and the members of
  // the peer's dispatch group (a source's destinations, an expert rank's sources).
  int stage = 0;
  RoutedRole role = RoutedRole::Both;
  bool straight = false;
  int stagePeer = -1;
  std::vector<int> stageRanks;
  int slots = 1;
  std::uint32_t tag = 0;
  std::size_t rowBytes = 0;     // H x element size
  std::size_t weightBytes = 0;  // one weight
  // A record of one slot per destination in local expert order, its expert told by the count
  // exchange's counts per (peer, local expert) (slots 1, several local experts, dropless, and not
  // straight from a stage).
  bool idsByOrder = false;
  std::size_t idBytes = 4;      // a slot's local expert id: 0 where implied (one expert per rank, or by order)
  std::size_t headerBytes = 0;  // slots x slotBytes()
  // A header slot: its local expert id (when not implied), then its weight.
  std::size_t slotBytes() const { return idBytes + weightBytes; }
  std::vector<std::byte> sendScratch;  // reused by every exchange; grows to the largest block set
  std::vector<std::byte> rowScratch;   // reduced tokens of tp=P
  std::vector<std::byte> back;         // received rows of combine / dispatchBackward
  std::vector<std::byte> hostBack;     // second-round blocks of combine and the backwards once per host (hostDispatch)
  // Where the ranks run: the host of every world rank (Backend::hostOfRank), and of each group
  // member (numbered by lowest group index), each host's members in group index order and each
  // member's place among them.
  std::vector<int> worldHosts;
  std::vector<int> hostOf;
  std::vector<std::vector<int>> hostMembers;
  std::vector<int> hostPlace;
  // Once per destination host (rule 6): a token's records for the ranks of another host travel
  // as one host record to a forwarder there, which fans them out (src/routed/host_dispatch.cpp).
  bool hostDispatch = false;
  int hostSlots = 0;                // slots of a host record: min(K, E/R x most ranks on a host)
  std::size_t hostHeaderBytes = 0;  // hostSlots x (global expert id, weight)

  Impl(Backend& b, const RoutedExchangeOptions& o);

  // create's steps. Every check that can fail on this rank alone (layout, dtypes, capacity, the
  // cost model, K, E, the scratch of capacity blocks), without communication; the group and the
  // token axes are set first, from whatever of the layout parses, so that a rank at fault still
  // joins its peers' first round.
  Status resolve();
  // The first round of create over the dispatch group: one MAX AllReduce of the options' tag and
  // of this rank's verdict `local` (and a second over the token axes where replicas lie outside
  // the group). Returns `local` when it failed; Mismatch naming the lowest failing rank on every
  // other rank, or naming the group when the options differ.
  Status agreeOnOptions(const Status& local);
  // InvalidArgument (returned before any communication) unless `st` was dispatched by this
  // exchange and completed.
  Status checkHandle(const RoutedDispatch::State& st, const char* call) const;

  // The calls over the dispatch group (every layout but "pp=@k", and stage k+1 of its hand-off).
  Status dispatchGroup(const void* x, const std::int64_t* topkIdx, const void* topkWeights, std::int64_t tokens,
                       RoutedDispatch::State& st, Status local);
  Status dispatchBackwardGroup(const void* gradRecvX, const void* gradRowWeights, const RoutedDispatch::State& st,
                               void* gradX, void* gradWeights, RoutedStats& stats, const Status& local);
  // "pp=@k" (src/routed/stage_exchange.cpp): this rank's side of the dispatch and of its
  // backward, straight or through the hand-off.
  Status dispatchStage(const void* x, const std::int64_t* topkIdx, const void* topkWeights, std::int64_t tokens,
                       RoutedDispatch::State& st, Status local);
  Status dispatchBackwardStage(const void* gradRecvX, const void* gradRowWeights, const RoutedDispatch::State& st,
                               void* gradX, void* gradWeights, RoutedStats& stats, Status local);
  // InvalidArgument unless this rank's role makes `call` (`experts`: a call of the experts' side).
  Status checkRole(const char* call, bool experts) const;

  // dispatch's steps.
  Status ownRange(std::int64_t tokens, std::int64_t& begin, std::int64_t& end) const;
  // tp=R, tp=P: the replicas agree (one MIN AllReduce of three words over the token axes) on
  // the lowest world rank of a replica whose own check failed and on T; either sets `local` to
  // Mismatch on the others (naming that rank, which `faultRank` receives). Returns only the
  // backend's errors.
  Status agreeReplicas(std::int64_t tokens, Status& local, int& faultRank, RoutedStats& stats);
  // tp=P: the reduction of this rank's T partial rows over the token axes (the replicas agreed).
  Status reducePartial(const void* x, std::int64_t tokens, const std::byte*& rows, std::int64_t& firstRow,
                       RoutedStats& stats);
  // InvalidArgument naming the first token of [begin, end) with an id outside 0..E-1 or a repeated id.
  Status checkRouting(const std::int64_t* topkIdx, std::int64_t begin, std::int64_t end) const;
  Status buildSendTable(const std::int64_t* topkIdx, RoutedDispatch::State& st) const;
  // InvalidArgument when a block of `records[p]` records of `perRecord` bytes to member p
  // passes the limit per peer (scratchLimitBytes / R).
  Status checkSendScratch(std::span<const std::size_t> records, std::size_t perRecord) const;
  // Writes into sendScratch, at sendOffset[p], the word of block p when st.wordBytes says it has
  // one (its record count and the tag, or `failed`) and its records: header slots, then the row
  // of token t at rows[t - firstRow].
  void packRecords(const RoutedDispatch::State& st, const std::int64_t* topkIdx, const void* topkWeights,
                   const std::byte* rows, std::int64_t firstRow, std::span<const std::size_t> sendOffset, bool failed);
  // Writes send record `rec` of st (header slots, then the row of its token) at `out`.
  void packRecord(const RoutedDispatch::State& st, std::size_t rec, const std::int64_t* topkIdx,
                  const void* topkWeights, const std::byte* rows, std::int64_t firstRow, std::byte* out) const;
  Status receivedTable(RoutedDispatch::State& st) const;
  // The block layout of one exchange: a `wordBytes` word, then `counts[p]` records of
  // `perRecord` bytes for member p (detail::blockOffsets); returns the bytes the blocks span.
  std::size_t blocks(std::span<const std::size_t> counts, std::size_t perRecord, std::size_t wordBytes,
                     std::vector<std::size_t>& offset, std::vector<std::size_t>& bytes) const;
  // AllGather over the token axes of this rank's block [ownBegin, ownEnd) of `rows` rows of
  // `rowSize` bytes (replicas split), in place in `data`.
  Status gatherReplicas(void* data, std::int64_t tokens, std::size_t rowSize, const Status& local, RoutedStats& stats);
  // Once per destination host (src/routed/host_dispatch.cpp). The forwarder of `source`'s
  // records on `host`: the member there with the source's place on its own host (modulo), so
  // that the ranks of a host spread their traffic over the other host's ranks.
  int forwarder(int source, int host) const {
    const std::vector<int>& members = hostMembers[static_cast<std::size_t>(host)];
    return members[static_cast<std::size_t>(hostPlace[static_cast<std::size_t>(source)]) % members.size()];
  }
  // The member through which `source`'s records reach member `at`: the source itself on at's
  // host, else its forwarder there.
  int route(int source, int at) const {
    const int host = hostOf[static_cast<std::size_t>(at)];
    return hostOf[static_cast<std::size_t>(source)] == host ? source : forwarder(source, host);
  }
  // The host records of st's once-per-rank table: per token and other host, the kept pairs.
  void buildHostTable(const std::int64_t* topkIdx, RoutedDispatch::State& st) const;
  // The dispatch's rounds once per host: the count exchange (two words per peer: records for
  // it, host records it forwards), the records to this host's ranks and the host records to
  // the forwarders, then each forwarder's records to its host's ranks; leaves st as the
  // once-per-rank dispatch would.
  Status dispatchHosts(RoutedDispatch::State& st, const std::int64_t* topkIdx, const void* topkWeights,
                       const std::byte* rows, std::int64_t firstRow, const Status& local);
  // For each source of another host, the place (in records) of its records in the block of its
  // forwarder on this host, and per forwarder the records of all its sources: the layout of the
  // dispatch's second round at a receiver, and of the combine's first at an expert rank.
  std::vector<std::size_t> viaForwarders(const RoutedDispatch::State& st, std::vector<std::size_t>& total) const;
  // As a forwarder: per member d of this host, the records it forwards to d of every source it
  // forwards for (`total[d]`), and where those of source p start among them (`start[p R + d]`),
  // sources in order: the layout of the dispatch's second round here, and of the combine's first.
  void forwardedSegments(const RoutedDispatch::State& st, std::vector<std::size_t>& total,
                         std::vector<std::size_t>& start) const;
  // combineBackward once per host (the dispatch's way): dy of each record's token straight to the
  // ranks of this host, once per host record to the forwarder of each other host, which fans it
  // out to the ranks the record names; each expert rank then has dy of the once-per-rank records.
  Status combineBackwardHosts(const void* gradY, const void* expertOut, const void* rowWeights,
                              const RoutedDispatch::State& st, void* gradExpertOut, void* gradRowWeights,
                              RoutedStats& stats, const Status& local);
  // The combine's way once per host (combine, dispatchBackward): per received record, its slots'
  // rows of `rows` times `weights` (null: 1) summed in slot order and, with `values`, each slot's
  // value of `slotValues` (one weight each; null: 0); those of sources on another host to the
  // source's forwarder here, which sums a host record's rows and gathers its slots' values, one
  // row crossing back; at the source `out` [tokens, H] (a token's rows summed in k order) and
  // `outValues` [tokens, K] (null: skipped). Returns the backend's errors; `verdict` the call's.
  Status returnHosts(const RoutedDispatch::State& st, const void* rows, const void* weights, bool values,
                     const void* slotValues, void* out, void* outValues, RoutedStats& stats, const Status& local,
                     const char* what, Status& verdict);
  // Whether world rank `rank` runs on another host than this rank (Backend::hostOfRank).
  bool onOtherHost(int rank) const;
  // Adds a block of `records` to member `member` (stage peers for a Source) to `stats`
  // (nothing for this rank's own), and to crossHostBytes when the member runs on another host.
  void countBlock(RoutedStats& stats, std::size_t member, std::size_t records, std::size_t perRecord,
                  std::size_t perHeader, std::size_t wordBytes) const;
  // Stats of an exchange that sent `counts` records of `perRecord` payload bytes and
  // `perHeader` header bytes, after a `wordBytes` word, to each member (other members only).
  void count(RoutedStats& stats, std::span<const std::size_t> counts, std::size_t perRecord, std::size_t perHeader,
             std::size_t wordBytes) const;
};

}  // namespace chimera
