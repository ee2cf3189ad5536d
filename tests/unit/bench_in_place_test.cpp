// SPDX-License-Identifier: Apache-2.0
// chimera-bench's in-place column: the buffer placement of each collective (NCCL's
// conventions), and that the check reads the result where the call must leave it, so a call
// that ran on the wrong slot, or not at all, counts wrong elements.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "in_place.hpp"
#include "input_pattern.hpp"

namespace chimera::bench {
namespace {

constexpr int kGroup = 4;
constexpr Collective kInPlaceCollectives[] = {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather,
                                              Collective::Broadcast};

TEST(InPlaceLayout, FollowsNcclConventions) {
  // 4000 bytes of float on 4 ranks: 1000 elements, blocks of 250.
  const auto layoutOf = [](Collective collective, int g) {
    return inPlaceLayout(collective, bufferShape(collective, 4000, 4, kGroup), g);
  };
  const std::optional<InPlaceLayout> allReduce = layoutOf(Collective::AllReduce, 2);
  ASSERT_TRUE(allReduce.has_value());
  EXPECT_EQ(allReduce->bufferCount, 1000u);
  EXPECT_EQ(allReduce->sendOffset, 0u);  // send == recv
  EXPECT_EQ(allReduce->recvOffset, 0u);
  EXPECT_EQ(allReduce->recvCount, 1000u);
  const std::optional<InPlaceLayout> reduceScatter = layoutOf(Collective::ReduceScatter, 2);
  ASSERT_TRUE(reduceScatter.has_value());
  EXPECT_EQ(reduceScatter->bufferCount, 1000u);
  EXPECT_EQ(reduceScatter->sendOffset, 0u);
  EXPECT_EQ(reduceScatter->sendCount, 1000u);
  EXPECT_EQ(reduceScatter->recvOffset, 500u);  // recv = send + g*recvCount
  EXPECT_EQ(reduceScatter->recvCount, 250u);
  const std::optional<InPlaceLayout> allGather = layoutOf(Collective::AllGather, 3);
  ASSERT_TRUE(allGather.has_value());
  EXPECT_EQ(allGather->bufferCount, 1000u);
  EXPECT_EQ(allGather->sendOffset, 750u);  // send = recv + g*sendCount
  EXPECT_EQ(allGather->sendCount, 250u);
  EXPECT_EQ(allGather->recvOffset, 0u);
  EXPECT_EQ(allGather->recvCount, 1000u);
  const std::optional<InPlaceLayout> broadcast = layoutOf(Collective::Broadcast, 1);
  ASSERT_TRUE(broadcast.has_value());
  EXPECT_EQ(broadcast->sendOffset, 0u);
  EXPECT_EQ(broadcast->recvOffset, 0u);
  for (Collective collective : {Collective::AllToAll, Collective::Send}) {
    EXPECT_FALSE(hasInPlaceForm(collective));
    EXPECT_FALSE(layoutOf(collective, 0).has_value());
  }
}

TEST(InPlaceLayout, SlotsFitTheBufferForEveryMember) {
  for (Collective collective : kInPlaceCollectives) {
    for (std::size_t bytes : {std::size_t{4}, std::size_t{1001}, std::size_t{4096}}) {
      const BufferShape shape = bufferShape(collective, bytes, 2, kGroup);
      for (int g = 0; g < kGroup; ++g) {
        const std::optional<InPlaceLayout> layout = inPlaceLayout(collective, shape, g);
        ASSERT_TRUE(layout.has_value());
        EXPECT_LE(layout->sendOffset + layout->sendCount, layout->bufferCount) << collectiveName(collective);
        EXPECT_LE(layout->recvOffset + layout->recvCount, layout->bufferCount) << collectiveName(collective);
        EXPECT_EQ(layout->bufferCount * 2, shape.bytes);
      }
    }
  }
}

TEST(InPlaceLayout, ElementAddressesScaleWithTheType) {
  std::vector<std::byte> buffer(64);
  EXPECT_EQ(elementAt(buffer.data(), DataType::BF16, 3), buffer.data() + 6);
  EXPECT_EQ(elementAt(static_cast<const void*>(buffer.data()), DataType::F64, 2), buffer.data() + 16);
}

/// A group of kGroup members running one collective in place on float buffers, with a host
/// reference of the collective called the way our backend is: member m passes send(m), recv(m).
class InPlaceGroup {
 public:
  InPlaceGroup(Collective collective, std::optional<ReduceOp> op)
      : collective_(collective),
        shape_(bufferShape(collective, 4000, sizeof(float), kGroup)),
        inputs_(11, DataType::F32, op, {0, 1, 2, 3}) {
    for (int g = 0; g < kGroup; ++g) {
      layouts_.push_back(*inPlaceLayout(collective, shape_, g));
      buffers_.emplace_back(layouts_.back().bufferCount);
      writeInPlaceInput(buffers_.back().data(), DataType::F32, layouts_.back(),
                        [&](std::size_t i) { return inputs_.value(g, i); });
    }
  }

  /// Runs the reference with member m's send at sendOffset(m) and recv at recvOffset(m).
  template <typename SendOffset, typename RecvOffset>
  void run(SendOffset&& sendOffset, RecvOffset&& recvOffset) {
    const std::size_t b = shape_.paramCount;
    std::vector<std::vector<float>> results(kGroup, std::vector<float>(shape_.recvCount));
    for (int g = 0; g < kGroup; ++g) {
      for (std::size_t i = 0; i < shape_.recvCount; ++i) results[g][i] = referenceResult(sendOffset, g, i, b);
    }
    for (int g = 0; g < kGroup; ++g) {
      std::copy(results[g].begin(), results[g].end(), buffers_[g].begin() + static_cast<std::ptrdiff_t>(recvOffset(g)));
    }
  }
  /// Runs the reference on the layout's slots (a correct in-place call).
  void runInPlace() {
    run([&](int g) { return layouts_[g].sendOffset; }, [&](int g) { return layouts_[g].recvOffset; });
  }

  /// Wrong elements of member g's result, read where the layout says the result lives.
  std::uint64_t wrong(int g) const {
    return countInPlaceMismatches(buffers_[g].data(), DataType::F32, layouts_[g],
                                  [&](std::size_t i) { return expected(g, i); });
  }
  const InPlaceLayout& layout(int g) const { return layouts_[g]; }
  const std::vector<float>& buffer(int g) const { return buffers_[g]; }
  const InputPattern& inputs() const { return inputs_; }

 private:
  static constexpr int kRoot = 1;

  template <typename SendOffset>
  float referenceResult(SendOffset&& sendOffset, int g, std::size_t i, std::size_t b) const {
    const auto sent = [&](int m, std::size_t k) { return buffers_[m][sendOffset(m) + k]; };
    float sum = 0.0f;
    switch (collective_) {
      case Collective::AllReduce:
        for (int m = 0; m < kGroup; ++m) sum += sent(m, i);
        return sum;
      case Collective::ReduceScatter:
        for (int m = 0; m < kGroup; ++m) sum += sent(m, static_cast<std::size_t>(g) * b + i);
        return sum;
      case Collective::AllGather: return sent(static_cast<int>(i / b), i % b);
      default: return sent(kRoot, i);
    }
  }

  /// The values our runners expect (allreduce_runner.cpp, ...): the result's meaning.
  double expected(int g, std::size_t i) const {
    const std::size_t b = shape_.paramCount;
    switch (collective_) {
      case Collective::AllReduce: return inputs_.reduced(i);
      case Collective::ReduceScatter: return inputs_.reduced(static_cast<std::size_t>(g) * b + i);
      case Collective::AllGather: return inputs_.value(static_cast<int>(i / b), i % b);
      default: return inputs_.value(kRoot, i);
    }
  }

  Collective collective_;
  BufferShape shape_;
  InputPattern inputs_;
  std::vector<InPlaceLayout> layouts_;
  std::vector<std::vector<float>> buffers_;
};

std::optional<ReduceOp> opFor(Collective collective) {
  return collectiveReduces(collective) ? std::optional(ReduceOp::Sum) : std::nullopt;
}

TEST(InPlaceCheck, InputIsWrittenToTheSendSlotOfAPoisonedBuffer) {
  const InPlaceGroup group(Collective::AllGather, std::nullopt);
  const InPlaceLayout& layout = group.layout(2);
  const std::vector<float>& buffer = group.buffer(2);
  for (std::size_t k = 0; k < layout.bufferCount; ++k) {
    const bool inSlot = k >= layout.sendOffset && k < layout.sendOffset + layout.sendCount;
    if (inSlot) {
      EXPECT_EQ(buffer[k], group.inputs().value(2, k - layout.sendOffset)) << k;
    } else {
      EXPECT_TRUE(std::isnan(buffer[k])) << k;
    }
  }
}

TEST(InPlaceCheck, ACorrectInPlaceCallHasNoWrongElements) {
  for (Collective collective : kInPlaceCollectives) {
    InPlaceGroup group(collective, opFor(collective));
    group.runInPlace();
    for (int g = 0; g < kGroup; ++g) EXPECT_EQ(group.wrong(g), 0u) << collectiveName(collective) << " member " << g;
  }
}

TEST(InPlaceCheck, ACallThatDidNotRunIsWrong) {
  // The result slot still holds the input (or poison): every member but the broadcast
  // root, whose in-place result is its own input, must see wrong elements.
  for (Collective collective : kInPlaceCollectives) {
    const InPlaceGroup group(collective, opFor(collective));
    for (int g = 0; g < kGroup; ++g) {
      if (collective == Collective::Broadcast && g == 1) continue;
      EXPECT_GT(group.wrong(g), group.layout(g).recvCount / 2) << collectiveName(collective) << " member " << g;
    }
  }
}

TEST(InPlaceCheck, AReduceScatterResultLeftAtTheBufferStartIsWrong) {
  // The call ran as if recv were the buffer's start (out of place onto the wrong slot):
  // the result slot g*recvCount of members g > 0 keeps its input and is counted.
  InPlaceGroup group(Collective::ReduceScatter, ReduceOp::Sum);
  group.run([](int) { return std::size_t{0}; }, [](int) { return std::size_t{0}; });
  EXPECT_EQ(group.wrong(0), 0u);  // member 0's slots coincide
  for (int g = 1; g < kGroup; ++g) EXPECT_GT(group.wrong(g), group.layout(g).recvCount / 2) << g;
}

TEST(InPlaceCheck, AnAllGatherThatSentFromTheBufferStartIsWrong) {
  // The call read its input at the buffer's start instead of at g*sendCount: the blocks
  // of members g > 0 arrive as poison (or as another member's data) and are counted.
  InPlaceGroup group(Collective::AllGather, std::nullopt);
  group.run([](int) { return std::size_t{0}; }, [](int) { return std::size_t{0}; });
  for (int g = 0; g < kGroup; ++g) EXPECT_GT(group.wrong(g), group.layout(g).recvCount / 2) << g;
}

}  // namespace
}  // namespace chimera::bench
