// SPDX-License-Identifier: Apache-2.0
// The executor's local work on a recording host backend that plays one rank of a larger
// mesh (its collectives are local no-ops, its transfers recorded): batched pack/unpack
// calls, 256-byte staging offsets, and prepared plans pinned by a graph capture.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "box/box_ops.hpp"
#include "chimera/backend.hpp"
#include "chimera/executor.hpp"
#include "chimera/layout.hpp"
#include "chimera/planning/planner.hpp"
#include "common/host_reduce.hpp"
#include "exec/prepared_plan.hpp"
#include "exec/prepared_plan_cache.hpp"
#include "exec/scratch_pool.hpp"

namespace chimera {
namespace {

class RecordingBackend final : public Backend {
 public:
  RecordingBackend(const Mesh& mesh, int rank) : mesh_(mesh), rank_(rank) {}
  ~RecordingBackend() override {
    for (void* p : owned_) std::free(p);
  }
  std::string_view name() const override { return "recording"; }
  const Mesh& mesh() const override { return mesh_; }
  int rank() const override { return rank_; }
  Status allReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp, AxisSet,
                   Stream stream) override {
    if (send != recv) std::memcpy(recv, send, count * dataTypeSize(dtype));
    return on(stream);
  }
  Status reduceScatter(const void*, void*, std::size_t, DataType, ReduceOp, AxisSet, Stream stream) override {
    return on(stream);
  }
  Status allGather(const void* send, void* recv, std::size_t, DataType, AxisSet, Stream stream) override {
    gathers.push_back({send, recv});
    return on(stream);
  }
  Status allToAll(const void*, void*, std::size_t, DataType, AxisSet, Stream stream) override { return on(stream); }
  Status broadcast(const void*, void*, std::size_t, DataType, int, AxisSet, Stream stream) override {
    return on(stream);
  }
  Status send(const void*, std::size_t, DataType, int, Stream stream) override { return on(stream); }
  Status recv(void*, std::size_t, DataType, int, Stream stream) override { return on(stream); }
  Status groupedP2P(std::span<const P2POp> ops, Stream stream) override {
    for (const P2POp& op : ops) transfers.push_back(op);
    return on(stream);
  }
  Status allocate(std::size_t bytes, void** out) override {
    *out = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    owned_.push_back(*out);
    allocations.push_back(static_cast<std::byte*>(*out));
    return Status::ok();
  }
  void deallocate(void* ptr) override {
    std::erase(owned_, ptr);
    std::free(ptr);
    ++deallocations;
  }
  Status copy(void* dst, const void* src, std::size_t bytes, Stream stream) override {
    std::memmove(dst, src, bytes);
    return on(stream);
  }
  Status packBox(const void* tensor, std::span<const std::int64_t> shape, const Box& box, void* packed, DataType dtype,
                 Stream stream) override {
    ++singleCalls;
    streams.push_back(stream);
    return detail::hostPackBox(tensor, shape, box, packed, dtype);
  }
  Status unpackBox(const void* packed, void* tensor, std::span<const std::int64_t> shape, const Box& box,
                   DataType dtype, Stream stream) override {
    ++singleCalls;
    streams.push_back(stream);
    return detail::hostUnpackBox(packed, tensor, shape, box, dtype);
  }
  Status packBoxes(const void* tensor, std::span<const std::int64_t> shape, std::span<const Box> boxes,
                   std::span<void* const> packed, DataType dtype, Stream stream) override {
    streams.push_back(stream);
    batches.push_back(std::vector<void*>(packed.begin(), packed.end()));
    for (std::size_t i = 0; i < boxes.size(); ++i) {
      if (Status s = detail::hostPackBox(tensor, shape, boxes[i], packed[i], dtype); !s.isOk()) return s;
    }
    return Status::ok();
  }
  Status unpackBoxes(std::span<const void* const> packed, void* tensor, std::span<const std::int64_t> shape,
                     std::span<const Box> boxes, DataType dtype, Stream stream) override {
    streams.push_back(stream);
    std::vector<void*>& batch = batches.emplace_back();
    for (const void* p : packed) batch.push_back(const_cast<void*>(p));
    for (std::size_t i = 0; i < boxes.size(); ++i) {
      if (Status s = detail::hostUnpackBox(packed[i], tensor, shape, boxes[i], dtype); !s.isOk()) return s;
    }
    return Status::ok();
  }
  bool capturing(Stream stream) const override { return stream != nullptr && stream == captured; }
  Status createGroups(std::span<const AxisSet>) override { return Status::ok(); }
  bool hasGroup(AxisSet) const override { return true; }
  Status scale(const void* in, void* out, std::size_t count, DataType dtype, double factor, Stream stream) override {
    streams.push_back(stream);
    return detail::hostScale(in, out, count, dtype, factor);
  }
  Status synchronize(Stream stream) override { return on(stream); }
  bool movesBoxes(int) const override { return readsBoxes; }

  std::vector<Stream> streams;  // the stream of every call, in order
  bool readsBoxes = false;      // what movesBoxes answers for every peer

  std::vector<P2POp> transfers;
  std::vector<std::pair<const void*, void*>> gathers;  // (send, recv) per AllGather
  std::vector<std::vector<void*>> batches;             // packed pointers per batched call
  std::vector<std::byte*> allocations;
  int singleCalls = 0;
  int deallocations = 0;
  Stream captured = nullptr;  // the stream being captured into a graph, if any

 private:
  Status on(Stream stream) {
    streams.push_back(stream);
    return Status::ok();
  }
  Mesh mesh_;
  int rank_;
  std::vector<void*> owned_;
};

struct Scene {
  Mesh mesh;
  TensorSpec spec;
  Scene(std::vector<std::int64_t> shape) : spec{std::move(shape), DataType::BF16} {
    EXPECT_TRUE(Mesh::parse("pp=2,tp=4", 8, mesh).isOk());
  }
  Plan plan(const char* from, const char* to) const {
    Layout a;
    Layout b;
    EXPECT_TRUE(Layout::parse(from, mesh, a).isOk());
    EXPECT_TRUE(Layout::parse(to, mesh, b).isOk());
    Plan p;
    EXPECT_TRUE(planRedistribution(spec, a, b, 1, BytesCost(), p).isOk());
    return p;
  }
};

// The offset of `p` inside the allocation that holds it.
std::size_t offsetIn(const std::vector<std::byte*>& allocations, const void* p) {
  const auto* byte = static_cast<const std::byte*>(p);
  std::size_t best = SIZE_MAX;
  for (const std::byte* base : allocations) {
    if (byte >= base && static_cast<std::size_t>(byte - base) < best) best = static_cast<std::size_t>(byte - base);
  }
  return best;
}

TEST(PreparedPlanLocalWork, SenderPacksEveryBoxInOneCallAt256ByteStagingOffsets) {
  // Stage 0 rank 0 holds rows 0..1 of an 8x12 bf16 tensor; each stage-1 rank needs a 2x3
  // piece of them: four 12-byte boxes, which back to back would leave three of four
  // misaligned for the 16-byte vector path.
  Scene s({8, 12});
  const Plan plan = s.plan("pp=@0,tp=S0", "pp=@1,tp=S1");
  ASSERT_EQ(plan.steps.size(), 1u);
  ASSERT_EQ(plan.steps[0].kind, PlanStep::Kind::ManyToMany);
  RecordingBackend backend(s.mesh, 0);
  detail::PreparedPlan prepared;
  ASSERT_TRUE(prepared.prepare(backend, plan).isOk());
  std::vector<std::uint16_t> input(prepared.inputBytes() / 2);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<std::uint16_t>(i + 1);
  int callStream = 0;
  backend.streams.clear();  // prepare's agreement ran on the default stream
  ASSERT_TRUE(prepared.run(input.data(), prepared.inputBytes(), nullptr, 0, &callStream).isOk());
  ASSERT_FALSE(backend.streams.empty());
  for (Stream stream : backend.streams) EXPECT_EQ(stream, &callStream) << "every call is ordered on the run's stream";
  EXPECT_EQ(backend.singleCalls, 0);
  ASSERT_EQ(backend.batches.size(), 1u) << "one batched pack for the step";
  ASSERT_EQ(backend.batches[0].size(), 4u);
  ASSERT_EQ(backend.transfers.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(offsetIn(backend.allocations, backend.batches[0][i]) % detail::kStagingAlignment, 0u) << i;
    const P2POp& t = backend.transfers[i];
    EXPECT_EQ(t.buffer, backend.batches[0][i]);
    // Rank 4 + i gets columns 3i..3i+2 of rows 0..1.
    const auto* packed = static_cast<const std::uint16_t*>(t.buffer);
    ASSERT_EQ(t.count, 6u);
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(packed[r * 3 + c], input[static_cast<std::size_t>(r * 12 + 3 * t.peer - 12 + c)]);
    }
  }
}

TEST(PreparedPlanLocalWork, ReceiverUnpacksEveryBoxInOneCallFrom256ByteStagingOffsets) {
  // Columns to rows: stage-1 rank 5 gets rows 2..3 (2x12) as four 2x3 pieces, none
  // contiguous in its local tensor, so all are received into staging and unpacked.
  Scene s({8, 12});
  const Plan plan = s.plan("pp=@0,tp=S1", "pp=@1,tp=S0");
  RecordingBackend backend(s.mesh, 5);
  detail::PreparedPlan prepared;
  ASSERT_TRUE(prepared.prepare(backend, plan).isOk());
  std::vector<std::uint16_t> output(prepared.outputBytes() / 2, 0);
  ASSERT_TRUE(prepared.run(nullptr, 0, output.data(), prepared.outputBytes(), nullptr).isOk());
  ASSERT_EQ(backend.transfers.size(), 4u);
  ASSERT_EQ(backend.batches.size(), 1u) << "one batched unpack for the step";
  ASSERT_EQ(backend.batches[0].size(), 4u);
  EXPECT_EQ(backend.singleCalls, 0);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(backend.transfers[i].kind, P2POp::Kind::Recv);
    EXPECT_EQ(backend.transfers[i].buffer, backend.batches[0][i]);
    EXPECT_EQ(offsetIn(backend.allocations, backend.transfers[i].buffer) % detail::kStagingAlignment, 0u) << i;
    // Fill what "arrived" with the peer's index, then check where the unpack put it.
    auto* staged = static_cast<std::uint16_t*>(backend.transfers[i].buffer);
    for (int k = 0; k < 6; ++k) staged[k] = static_cast<std::uint16_t>(100 * backend.transfers[i].peer + k);
  }
  backend.batches.clear();
  ASSERT_TRUE(prepared.run(nullptr, 0, output.data(), prepared.outputBytes(), nullptr).isOk());
  for (std::size_t i = 0; i < 4; ++i) {
    const int peer = backend.transfers[i].peer;  // peer p holds columns 3p..3p+2
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(output[static_cast<std::size_t>(r * 12 + 3 * peer + c)], 100 * peer + r * 3 + c);
      }
    }
  }
}

// Where the backend moves boxes, a many-to-many box of 64 KiB or more whose runs are a page or
// longer (8 KiB here) goes as a box straight from the input into the output. With shorter runs
// (2 KiB) the sender packs it, and the packed copy, one run like the receiver's whole rows, goes
// as a plain transfer: a box read would only add the address and the answer.
TEST(PreparedPlanLocalWork, BoxesMoveStraightOrFromAPackedCopy) {
  for (const std::int64_t columns : {16384, 4096}) {
    Scene s({256, columns});  // stage-0 rank 0 holds rows 0..63; stage-1 rank 4 + j columns of block j
    const Plan plan = s.plan("pp=@0,tp=S0", "pp=@1,tp=S1");
    ASSERT_EQ(plan.steps.size(), 1u);
    ASSERT_EQ(plan.steps[0].kind, PlanStep::Kind::ManyToMany);
    const bool wholeRuns = columns / 4 * 2 >= 4096;  // bytes of one source run
    RecordingBackend sender(s.mesh, 0), receiver(s.mesh, 5);
    sender.readsBoxes = receiver.readsBoxes = true;
    detail::PreparedPlan sending, receiving;
    ASSERT_TRUE(sending.prepare(sender, plan).isOk());
    ASSERT_TRUE(receiving.prepare(receiver, plan).isOk());
    std::vector<std::uint16_t> input(sending.inputBytes() / 2), output(receiving.outputBytes() / 2);
    ASSERT_TRUE(sending.run(input.data(), sending.inputBytes(), nullptr, 0, nullptr).isOk());
    ASSERT_TRUE(receiving.run(nullptr, 0, output.data(), receiving.outputBytes(), nullptr).isOk());
    ASSERT_EQ(sender.transfers.size(), 4u);
    EXPECT_EQ(sender.batches.size(), wholeRuns ? 0u : 1u) << columns << " columns: packs on the sender";
    for (const P2POp& t : sender.transfers) {
      EXPECT_EQ(t.count, std::size_t{64} * static_cast<std::size_t>(columns / 4));
      if (wholeRuns) {
        ASSERT_NE(t.box, nullptr) << columns << " columns";
        EXPECT_EQ(t.box->extent, (std::vector<std::int64_t>{64, columns / 4}));
        EXPECT_EQ(t.buffer, input.data());
        EXPECT_EQ(std::vector<std::int64_t>(t.shape.begin(), t.shape.end()), (std::vector<std::int64_t>{64, columns}));
        EXPECT_EQ(t.box->offset, (std::vector<std::int64_t>{0, (t.peer - 4) * columns / 4}));
      } else {
        EXPECT_EQ(t.box, nullptr) << columns << " columns: the packed copy goes as a plain transfer";
      }
    }
    ASSERT_EQ(receiver.transfers.size(), 4u);
    EXPECT_TRUE(receiver.batches.empty()) << "the receiver's boxes are whole rows: nothing to unpack";
    for (const P2POp& t : receiver.transfers) {
      if (wholeRuns) {
        ASSERT_NE(t.box, nullptr);
        EXPECT_EQ(t.buffer, output.data());
        EXPECT_EQ(t.box->offset, (std::vector<std::int64_t>{64 * t.peer, 0}));
      } else {
        EXPECT_EQ(t.box, nullptr);
        EXPECT_EQ(t.buffer, output.data() + 64 * t.peer * (columns / 4)) << "straight into its rows of the output";
      }
    }
  }
}

TEST(PreparedPlanLocalWork, GatherAfterReceivedShardsRunsInPlaceInTheOutput) {
  // The receiving side of a fused hand-off (ReduceScatter, shards sent, AllGather): stage-1
  // rank 5 (tp index 1) receives its shard straight into its block of the output, and the
  // gather runs in place there; no scratch is allocated for the shard.
  Scene s({8, 12});
  Layout from, to;
  Chain chain;
  ASSERT_TRUE(Layout::parse("pp=@0,tp=P", s.mesh, from).isOk());
  ASSERT_TRUE(Layout::parse("pp=@1,tp=R", s.mesh, to).isOk());
  ASSERT_TRUE(Chain::parse("allreduce:tp,send:pp", s.mesh, chain).isOk());
  ChainPlan planned;
  ASSERT_TRUE(planChain(s.spec, from, chain, to, BytesCost(), planned).isOk());
  RecordingBackend backend(s.mesh, 5);
  detail::PreparedPlan prepared;
  ASSERT_TRUE(prepared.prepareAgreed(backend, planned.fused).isOk());  // as a per-rank Session does
  std::vector<std::uint16_t> output(prepared.outputBytes() / 2, 0);
  ASSERT_EQ(output.size(), 8u * 12u);
  ASSERT_TRUE(prepared.run(nullptr, 0, output.data(), prepared.outputBytes(), nullptr).isOk());
  const std::size_t block = 2 * 12 * 2;  // two rows of bf16
  ASSERT_EQ(backend.transfers.size(), 1u);
  EXPECT_EQ(backend.transfers[0].kind, P2POp::Kind::Recv);
  EXPECT_EQ(backend.transfers[0].buffer, reinterpret_cast<std::byte*>(output.data()) + block);
  ASSERT_EQ(backend.gathers.size(), 1u);
  EXPECT_EQ(backend.gathers[0].second, output.data());
  EXPECT_EQ(backend.gathers[0].first, reinterpret_cast<std::byte*>(output.data()) + block) << "not in place";
  EXPECT_TRUE(backend.allocations.empty()) << "scratch allocated for the shard";
}

TEST(PreparedPlanLocalWork, MergeKeepsSingleBoxesAndSeparatesTensors) {
  const Box box{{0}, {2}};
  std::vector<detail::LocalAction> actions = {
      detail::packAction({0, 0}, {2, 0}, {8}, box),    detail::packAction({0, 0}, {2, 256}, {8}, box),
      detail::copyAction({0, 0}, {1, 0}, 4),           detail::packAction({0, 0}, {2, 512}, {8}, box),
      detail::packAction({3, 0}, {2, 768}, {8}, box),  detail::unpackAction({2, 0}, {1, 0}, {8}, box),
      detail::unpackAction({2, 256}, {1, 0}, {8}, box)};
  detail::mergeBoxActions(actions);
  ASSERT_EQ(actions.size(), 5u);
  EXPECT_EQ(actions[0].boxes.size(), 2u);
  EXPECT_EQ(actions[0].packed[1].offset, 256u);
  EXPECT_EQ(actions[1].kind, detail::LocalAction::Kind::Copy);
  EXPECT_EQ(actions[2].boxes.size(), 1u) << "a copy in between ends the batch";
  EXPECT_EQ(actions[3].boxes.size(), 1u) << "another tensor is another batch";
  EXPECT_EQ(actions[4].boxes.size(), 2u);
  EXPECT_EQ(actions[4].packed[1].offset, 256u);
}

TEST(PreparedPlanCache, PinnedPlansSurviveTheLimitUntilReleased) {
  detail::PreparedPlanCache cache(1);
  std::vector<detail::PreparedPlanCache::Slot> slots(3);
  for (auto& slot : slots) slot = std::make_unique<detail::PreparedPlan>();
  cache.added(slots[0]);
  cache.pin(slots[0]);
  cache.added(slots[1]);
  EXPECT_TRUE(slots[0]) << "pinned: a graph replays its scratch";
  EXPECT_TRUE(slots[1]) << "over the limit only because of the pinned plan";
  cache.added(slots[2]);
  EXPECT_TRUE(slots[0]);
  EXPECT_FALSE(slots[1]) << "unpinned plans beyond the limit are still freed, oldest first";
  EXPECT_TRUE(slots[2]);
  EXPECT_EQ(cache.evictions(), 1u);
  cache.unpinAll();
  EXPECT_FALSE(slots[0]) << "released: the oldest is freed";
  EXPECT_TRUE(slots[2]);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.pinned(), 0u);
}

TEST(ExecutorCapture, PlansRunDuringACaptureArePinned) {
  Scene s({8, 12});
  const Plan a = s.plan("pp=@0,tp=S0", "pp=@1,tp=S1");
  Scene t({8, 16});
  const Plan b = t.plan("pp=@0,tp=S0", "pp=@1,tp=S1");
  RecordingBackend backend(s.mesh, 0);
  Executor executor(backend);
  ASSERT_TRUE(executor.setPreparedPlanLimit(1).isOk());
  std::vector<std::uint16_t> input(64, 1);
  int captureStream = 0;
  int otherStream = 0;
  backend.captured = &captureStream;
  ASSERT_TRUE(executor.run(a, input.data(), 2 * 2 * 12, nullptr, 0, &otherStream).isOk());  // another stream
  EXPECT_EQ(executor.pinnedPlans(), 0u) << "only a run on the captured stream pins its plan";
  ASSERT_TRUE(executor.run(a, input.data(), 2 * 2 * 12, nullptr, 0, &captureStream).isOk());  // captured: pinned
  backend.captured = nullptr;
  EXPECT_EQ(executor.pinnedPlans(), 1u);
  ASSERT_TRUE(executor.run(b, input.data(), 2 * 2 * 16, nullptr, 0).isOk());
  EXPECT_EQ(executor.cachedPlans(), 2u) << "the captured plan keeps its scratch";
  EXPECT_EQ(executor.evictedPlans(), 0u);
  executor.releaseCapturedPlans();
  EXPECT_EQ(executor.cachedPlans(), 1u);
  EXPECT_EQ(executor.evictedPlans(), 1u);
}

TEST(ScratchPool, ReusesFreedBlocksOfAFittingSize) {
  RecordingBackend backend(Mesh::flat(1), 0);
  detail::ScratchPool pool(backend, SIZE_MAX);
  void* a = nullptr;
  ASSERT_TRUE(pool.acquire(1000, &a).isOk());
  EXPECT_EQ(pool.heldBytes(), 1024u) << "rounded to 256 bytes";
  pool.release(a);
  void* b = nullptr;
  ASSERT_TRUE(pool.acquire(900, &b).isOk());
  EXPECT_EQ(b, a) << "a free block of the same rounded size is reused";
  void* small = nullptr;
  pool.release(b);
  ASSERT_TRUE(pool.acquire(100, &small).isOk());
  EXPECT_NE(small, a) << "a block more than twice the request is not wasted on it";
  EXPECT_EQ(pool.backendAllocations(), 2u);
  EXPECT_EQ(pool.inUseBytes(), 256u);
  pool.release(small);
  pool.trim();
  EXPECT_EQ(pool.heldBytes(), 0u);
  EXPECT_EQ(backend.deallocations, 2);
}

TEST(ScratchPool, CapReturnsFreeBlocksFirstThenFailsNamingIt) {
  RecordingBackend backend(Mesh::flat(1), 0);
  detail::ScratchPool pool(backend, 2048);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_TRUE(pool.acquire(1024, &a).isOk());
  ASSERT_TRUE(pool.acquire(1024, &b).isOk());
  void* c = nullptr;
  const Status full = pool.acquire(256, &c);
  EXPECT_EQ(full.code(), StatusCode::BackendError);
  EXPECT_NE(full.message().find("scratch limit of 2048 bytes"), std::string::npos) << full.message();
  EXPECT_NE(full.message().find("2048 bytes in use"), std::string::npos) << full.message();
  pool.release(a);
  pool.release(b);
  ASSERT_TRUE(pool.acquire(1536, &c).isOk()) << "free blocks go back to the backend to make room";
  EXPECT_EQ(pool.heldBytes(), 1536u);
  EXPECT_EQ(backend.deallocations, 2);
  pool.setLimit(1024);
  EXPECT_EQ(pool.heldBytes(), 1536u) << "blocks in use are never taken away";
  pool.release(c);
  EXPECT_EQ(pool.heldBytes(), 0u) << "a released block beyond the new cap goes back at once";
}

TEST(ScratchPool, EveryExecutorOfABackendSharesOnePoolAndEvictedPlansFeedIt) {
  // Both plans pack four boxes into staging on rank 0 (1 KiB of 256-byte-aligned staging each).
  Scene s({8, 12});
  const Plan a = s.plan("pp=@0,tp=S0", "pp=@1,tp=S1");
  Scene wide({8, 24});
  const Plan b = wide.plan("pp=@0,tp=S0", "pp=@1,tp=S1");
  RecordingBackend backend(s.mesh, 0);
  Executor first(backend);
  Executor second(backend);
  ASSERT_TRUE(first.setPreparedPlanLimit(1).isOk());
  std::vector<std::uint16_t> input(64, 1);
  ASSERT_TRUE(first.run(a, input.data(), 2 * 2 * 12, nullptr, 0).isOk());
  const std::size_t held = first.scratchBytes();
  EXPECT_GT(held, 0u);
  ASSERT_TRUE(first.run(b, input.data(), 2 * 2 * 24, nullptr, 0).isOk());  // evicts a: its scratch goes to the pool
  ASSERT_TRUE(first.run(a, input.data(), 2 * 2 * 12, nullptr, 0).isOk());  // evicts b, a prepared again
  EXPECT_EQ(first.evictedPlans(), 2u);
  EXPECT_LE(first.scratchBytes(), 2 * held) << "freed blocks were reused, not added to";
  const std::size_t settled = first.scratchBytes();
  ASSERT_TRUE(first.run(b, input.data(), 2 * 2 * 24, nullptr, 0).isOk());
  EXPECT_EQ(first.scratchBytes(), settled) << "steady state: evictions and re-preparations allocate nothing new";
  ASSERT_TRUE(second.run(a, input.data(), 2 * 2 * 12, nullptr, 0).isOk());
  EXPECT_EQ(second.scratchBytes(), first.scratchBytes()) << "one pool per backend";
  ASSERT_TRUE(second.setScratchLimit(256).isOk());
  const Status capped = first.run(a, input.data(), 2 * 2 * 12, nullptr, 0);  // a was evicted by b: prepared again
  EXPECT_EQ(capped.code(), StatusCode::BackendError)
      << "the cap set through one executor holds for the other: " << capped.toString();
  EXPECT_EQ(first.setScratchLimit(0).code(), StatusCode::InvalidArgument);
}

TEST(ScratchPool, LimitComesFromTheEnvironment) {
  std::size_t limit = 0;
  ::unsetenv("CHIMERA_SCRATCH_LIMIT_BYTES");
  ASSERT_TRUE(detail::scratchLimitFromEnv(limit).isOk());
  EXPECT_EQ(limit, SIZE_MAX);
  ::setenv("CHIMERA_SCRATCH_LIMIT_BYTES", "1048576", 1);
  ASSERT_TRUE(detail::scratchLimitFromEnv(limit).isOk());
  EXPECT_EQ(limit, 1048576u);
  ::setenv("CHIMERA_SCRATCH_LIMIT_BYTES", "1G", 1);
  const Status bad = detail::scratchLimitFromEnv(limit);
  EXPECT_EQ(bad.code(), StatusCode::InvalidArgument);
  EXPECT_NE(bad.message().find("CHIMERA_SCRATCH_LIMIT_BYTES"), std::string::npos) << bad.message();
  ::unsetenv("CHIMERA_SCRATCH_LIMIT_BYTES");
}

}  // namespace
}  // namespace chimera
