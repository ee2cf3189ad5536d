// SPDX-License-Identifier: Apache-2.0
// CUDA kernels against the host reference: pack/unpack vs common/box_pack (bit-exact),
// reduce vs common/host_reduce, scale vs the documented formula. Every dtype, odd sizes,
// misaligned bases. Argument checks run without a device too (they precede any CUDA call).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "box/box_pack.hpp"
#include "common/host_reduce.hpp"
#include "core/type_lists.hpp"
#include "gpu_test_util.hpp"
#include "kernels/pack.hpp"
#include "kernels/reduce.hpp"
#include "typed_values.hpp"

namespace chimera {
namespace {

using test::DeviceBuffer;

TensorBox makeBox(std::vector<std::int64_t> dims, std::vector<std::int64_t> offset, std::vector<std::int64_t> extent) {
  TensorBox box;
  box.ndims = static_cast<int>(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    box.dims[d] = dims[d];
    box.offset[d] = offset[d];
    box.extent[d] = extent[d];
  }
  return box;
}

std::vector<std::uint8_t> patternBytes(std::size_t bytes, std::uint32_t seed) {
  std::vector<std::uint8_t> out(bytes);
  std::uint32_t state = seed * 2654435761u + 1;
  for (auto& byte : out) {
    state = state * 1664525u + 1013904223u;
    byte = static_cast<std::uint8_t>(state >> 24);
  }
  return out;
}

// "" when equal, else where and how they first differ (never prints whole buffers).
std::string firstDifference(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want) {
  if (got.size() != want.size()) return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return "byte " + std::to_string(i) + ": got " + std::to_string(got[i]) + " want " + std::to_string(want[i]);
    }
  }
  return "";
}

void expectSynchronized() {
  const cudaError_t error = cudaDeviceSynchronize();
  ASSERT_EQ(error, cudaSuccess) << cudaGetErrorString(error);
}

const std::vector<TensorBox>& packShapes() {
  static const std::vector<TensorBox> shapes = {
      makeBox({1000, 4099}, {3, 5}, {997, 4000}),         // runs longer than a 4 KiB piece, odd
      makeBox({64, 33, 17}, {1, 2, 3}, {60, 30, 13}),     // short runs of 13
      makeBox({7, 5, 3, 9}, {0, 0, 0, 0}, {7, 5, 3, 9}),  // whole tensor: one run
      makeBox({100003}, {1}, {99997}),                    // 1-D, odd
      makeBox({3, 1, 1 << 20}, {1, 0, 7}, {2, 1, (1 << 20) - 9}),
      makeBox({2048, 2}, {0, 1}, {2048, 1}),  // a column: runs of one element
  };
  return shapes;
}

// Packs `box` on the device with the tensor and packed buffer shifted by whole elements,
// then unpacks into a fresh tensor; both compared bit for bit with the host path.
void checkPackRoundTrip(const TensorBox& box, DataType dtype, std::size_t tensorShift, std::size_t packedShift) {
  const std::size_t size = dataTypeSize(dtype);
  const auto tensorBytes = static_cast<std::size_t>(tensorVolume(box)) * size;
  const auto packedBytes = static_cast<std::size_t>(boxVolume(box)) * size;
  const std::vector<std::uint8_t> tensor = patternBytes(tensorBytes, 1);
  std::vector<std::uint8_t> wantPacked(packedBytes);
  ASSERT_TRUE(detail::packBoxHost(tensor.data(), wantPacked.data(), box, size).isOk());

  DeviceBuffer deviceTensor(tensorBytes + tensorShift * size);
  DeviceBuffer devicePacked(packedBytes + packedShift * size);
  deviceTensor.upload(tensor, tensorShift * size);
  detail::BoxCopy copy{box, deviceTensor.data() + tensorShift * size, devicePacked.data() + packedShift * size};
  const Status packed = detail::packBoxes(&copy, 1, dtype, nullptr);
  ASSERT_TRUE(packed.isOk()) << packed.toString();
  expectSynchronized();
  EXPECT_EQ(firstDifference(devicePacked.download(packedBytes, packedShift * size), wantPacked), "")
      << "pack " << dataTypeName(dtype) << " box " << detail::describeBox(box) << " shifts " << tensorShift << ","
      << packedShift;

  std::vector<std::uint8_t> wantTensor(tensorBytes, 0xEE);
  ASSERT_TRUE(detail::unpackBoxHost(wantPacked.data(), wantTensor.data(), box, size).isOk());
  deviceTensor.upload(std::vector<std::uint8_t>(tensorBytes, 0xEE), tensorShift * size);
  const Status unpacked = detail::unpackBoxes(&copy, 1, dtype, nullptr);
  ASSERT_TRUE(unpacked.isOk()) << unpacked.toString();
  expectSynchronized();
  EXPECT_EQ(firstDifference(deviceTensor.download(tensorBytes, tensorShift * size), wantTensor), "")
      << "unpack " << dataTypeName(dtype) << " box " << detail::describeBox(box) << " shifts " << tensorShift << ","
      << packedShift;
}

TEST(PackKernel, MatchesHostForEveryDtypeShapeAndAlignment) {
  CHIMERA_REQUIRE_DEVICES(1);
  // (0,0) vector path; (1,1) head then vectors; (0,1) and (3,0) relatively misaligned: scalar.
  const std::size_t shifts[][2] = {{0, 0}, {1, 1}, {0, 1}, {3, 0}};
  for (DataType dtype : kAllDataTypes) {
    for (const TensorBox& box : packShapes()) {
      for (const auto& shift : shifts) {
        checkPackRoundTrip(box, dtype, shift[0], shift[1]);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(PackKernel, ManyBoxesToDifferentPeersInOneCall) {
  CHIMERA_REQUIRE_DEVICES(1);
  // A [64 x 1000] tensor cut into 20 disjoint blocks (more than one launch holds), each
  // packed at its own offset of one send buffer, as a many-to-many transfer would.
  constexpr int kBoxes = 20;
  const DataType dtype = DataType::BF16;
  const std::size_t size = dataTypeSize(dtype);
  const std::int64_t rows = 64;
  const std::int64_t cols = 1000;
  const std::vector<std::uint8_t> tensor = patternBytes(static_cast<std::size_t>(rows * cols) * size, 2);
  DeviceBuffer deviceTensor(tensor.size());
  deviceTensor.upload(tensor);
  DeviceBuffer devicePacked(tensor.size());
  std::vector<detail::BoxCopy> copies;
  std::vector<std::uint8_t> wantPacked(tensor.size(), 0);
  std::size_t packedOffset = 0;
  for (int k = 0; k < kBoxes; ++k) {
    const TensorBox box = makeBox({rows, cols}, {3 * k, 50 * k}, {3 + k % 2, 50 - k});
    ASSERT_TRUE(detail::packBoxHost(tensor.data(), wantPacked.data() + packedOffset, box, size).isOk());
    copies.push_back({box, deviceTensor.data(), devicePacked.data() + packedOffset});
    packedOffset += static_cast<std::size_t>(boxVolume(box)) * size;
  }
  ASSERT_TRUE(detail::packBoxes(copies.data(), copies.size(), dtype, nullptr).isOk());
  expectSynchronized();
  EXPECT_EQ(firstDifference(devicePacked.download(packedOffset),
                            std::vector(wantPacked.begin(), wantPacked.begin() + packedOffset)),
            "");

  std::vector<std::uint8_t> wantTensor(tensor.size(), 0xEE);
  for (const auto& copy : copies) {
    const auto offset = static_cast<std::size_t>(static_cast<std::byte*>(copy.packed) - devicePacked.data());
    ASSERT_TRUE(detail::unpackBoxHost(wantPacked.data() + offset, wantTensor.data(), copy.box, size).isOk());
  }
  deviceTensor.upload(std::vector<std::uint8_t>(tensor.size(), 0xEE));
  ASSERT_TRUE(detail::unpackBoxes(copies.data(), copies.size(), dtype, nullptr).isOk());
  expectSynchronized();
  EXPECT_EQ(firstDifference(deviceTensor.download(tensor.size()), wantTensor), "");
}

TEST(PackKernel, BadArgumentsAreRejectedBeforeAnyLaunch) {
  // Runs without a device: validation precedes every CUDA call. The pointers are never
  // dereferenced.
  auto* tensor = reinterpret_cast<std::byte*>(std::uintptr_t{1} << 20);
  auto* packed = reinterpret_cast<std::byte*>(std::uintptr_t{1} << 30);
  const TensorBox box = makeBox({8, 8}, {0, 4}, {8, 4});
  EXPECT_EQ(detail::packBoxes(nullptr, 1, DataType::F32, nullptr).code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(detail::packBoxes(nullptr, 0, DataType::F32, nullptr).isOk());

  detail::BoxCopy badBox{makeBox({8, 8}, {0, 6}, {8, 4}), tensor, packed};
  const Status boxStatus = detail::packBoxes(&badBox, 1, DataType::F32, nullptr);
  EXPECT_EQ(boxStatus.code(), StatusCode::InvalidArgument);
  EXPECT_NE(boxStatus.message().find("exceeds"), std::string::npos) << boxStatus.message();

  detail::BoxCopy nullTensor{box, nullptr, packed};
  EXPECT_EQ(detail::unpackBoxes(&nullTensor, 1, DataType::F32, nullptr).code(), StatusCode::InvalidArgument);

  detail::BoxCopy misaligned{box, tensor + 2, packed};
  const Status alignStatus = detail::packBoxes(&misaligned, 1, DataType::F32, nullptr);
  EXPECT_EQ(alignStatus.code(), StatusCode::InvalidArgument);
  EXPECT_NE(alignStatus.message().find("aligned"), std::string::npos) << alignStatus.message();

  detail::BoxCopy overlapping{box, tensor, tensor + 64};
  const Status overlapStatus = detail::packBoxes(&overlapping, 1, DataType::F32, nullptr);
  EXPECT_EQ(overlapStatus.code(), StatusCode::InvalidArgument);
  EXPECT_NE(overlapStatus.message().find("overlaps"), std::string::npos) << overlapStatus.message();
}

// Small integers whose sums, products and quotients are exact in every dtype, so the host
// fold (rounding per step) and the kernel (rounding once) must agree bit for bit.
std::vector<double> reduceInputValues(DataType dtype, ReduceOp op, int numInputs, std::size_t count, int input) {
  std::mt19937 rng(static_cast<unsigned>(1000 * input + static_cast<int>(op) * 10 + static_cast<int>(dtype)));
  const bool unsignedType = dtype == DataType::U8;
  std::vector<double> values(count);
  for (double& value : values) {
    if (op == ReduceOp::Prod) {
      const int choices[] = {-2, -1, 1, 2};
      const int pick = std::uniform_int_distribution<int>(numInputs > 3 ? 1 : 0, numInputs > 3 ? 2 : 3)(rng);
      value = unsignedType ? std::abs(choices[pick]) : choices[pick];
    } else if (op == ReduceOp::Min || op == ReduceOp::Max) {
      value = std::uniform_int_distribution<int>(unsignedType ? 0 : -100, 100)(rng);
    } else {
      value = std::uniform_int_distribution<int>(unsignedType ? 0 : -8, 8)(rng);
    }
  }
  return values;
}

struct ReduceCase {
  int numInputs;
  std::size_t inputShift;   // elements added to every input's base
  std::size_t outputShift;  // elements added to the output's base
  bool inPlace;             // output = input 0
};

void checkReduce(DataType dtype, ReduceOp op, const ReduceCase& c) {
  const std::size_t count = 100003;
  const std::size_t size = dataTypeSize(dtype);
  const std::size_t bytes = count * size;
  std::vector<std::vector<std::uint8_t>> inputs;
  for (int k = 0; k < c.numInputs; ++k) {
    inputs.push_back(test::encodeValues(dtype, reduceInputValues(dtype, op, c.numInputs, count, k)));
  }
  std::vector<std::uint8_t> want = inputs[0];
  for (int k = 1; k < c.numInputs; ++k)
    detail::reduceInto(want.data(), inputs[static_cast<std::size_t>(k)].data(), count, dtype, op);
  if (op == ReduceOp::Avg) detail::divideByCount(want.data(), count, dtype, c.numInputs);

  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<const void*> pointers;
  for (int k = 0; k < c.numInputs; ++k) {
    buffers.push_back(std::make_unique<DeviceBuffer>(bytes + 8 * size));
    // Input 1 of the odd case sits one element further: a mixed alignment, scalar path.
    const std::size_t shift = c.inputShift + (c.inputShift != c.outputShift && k == 1 ? 1 : 0);
    buffers.back()->upload(inputs[static_cast<std::size_t>(k)], shift * size);
    pointers.push_back(buffers.back()->data() + shift * size);
  }
  DeviceBuffer separateOutput(bytes + 8 * size);
  void* output = c.inPlace ? const_cast<void*>(pointers[0]) : separateOutput.data() + c.outputShift * size;
  const Status status = detail::reduceBuffers(pointers.data(), c.numInputs, output, count, dtype, op, nullptr);
  ASSERT_TRUE(status.isOk()) << status.toString();
  expectSynchronized();
  std::vector<std::uint8_t> got(bytes);
  ASSERT_EQ(cudaMemcpy(got.data(), output, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(firstDifference(got, want), "")
      << dataTypeName(dtype) << " " << reduceOpName(op) << " inputs " << c.numInputs << " shifts " << c.inputShift
      << "," << c.outputShift << (c.inPlace ? " in place" : "");
}

TEST(ReduceKernel, MatchesHostFoldForEveryDtypeAndOp) {
  CHIMERA_REQUIRE_DEVICES(1);
  // 17 inputs take two launches (kMaxReduceInputs = 16); shifts cover vector, head+vector
  // and scalar paths.
  const ReduceCase cases[] = {{1, 0, 0, false}, {2, 0, 0, false},  {3, 1, 1, false},
                              {3, 0, 3, false}, {17, 2, 2, false}, {4, 0, 0, true}};
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (const ReduceCase& c : cases) {
        checkReduce(dtype, op, c);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The documented formula of scaleBuffer, on the host.
double expectedScaled(DataType dtype, double value, double factor) {
  switch (dtype) {
    case DataType::F32:
    case DataType::F16:
    case DataType::BF16: return static_cast<double>(static_cast<float>(value) * static_cast<float>(factor));
    case DataType::F64: return value * factor;
    case DataType::I32: return std::clamp(std::trunc(value * factor), -2147483648.0, 2147483647.0);
    case DataType::I64: return std::clamp(std::trunc(value * factor), -9223372036854775808.0, 9223372036854774784.0);
    case DataType::U8: return std::clamp(std::trunc(value * factor), 0.0, 255.0);
  }
  return 0;
}

TEST(ScaleKernel, MatchesFormulaForEveryDtypeWithSaturation) {
  CHIMERA_REQUIRE_DEVICES(1);
  const std::size_t count = 4099;
  for (DataType dtype : kAllDataTypes) {
    const std::size_t size = dataTypeSize(dtype);
    std::vector<double> values(count);
    for (std::size_t i = 0; i < count; ++i)
      values[i] = static_cast<double>(static_cast<int>(i % 201) - (dtype == DataType::U8 ? 0 : 100));
    if (dtype == DataType::I32) values[7] = 2147483647.0;  // saturates when scaled by -3
    for (double factor : {0.5, -3.0, 1.25}) {
      const std::vector<std::uint8_t> input = test::encodeValues(dtype, values);
      std::vector<double> expected(count);
      for (std::size_t i = 0; i < count; ++i)
        expected[i] = expectedScaled(dtype, test::loadValue(dtype, input.data() + i * size), factor);
      const std::vector<std::uint8_t> want = test::encodeValues(dtype, expected);
      DeviceBuffer buffer(input.size() + size);
      buffer.upload(input, size);  // odd base: head, vectors, tail
      void* data = buffer.data() + size;
      const Status status = detail::scaleBuffer(data, data, count, dtype, factor, nullptr);
      ASSERT_TRUE(status.isOk()) << status.toString();
      expectSynchronized();
      EXPECT_EQ(firstDifference(buffer.download(input.size(), size), want), "")
          << dataTypeName(dtype) << " factor " << factor;
    }
  }
}

TEST(ReduceKernel, BadArgumentsAreRejectedBeforeAnyLaunch) {
  auto* a = reinterpret_cast<std::byte*>(std::uintptr_t{1} << 20);
  auto* b = reinterpret_cast<std::byte*>(std::uintptr_t{1} << 30);
  const void* inputs[] = {a, b};
  EXPECT_EQ(detail::reduceBuffers(inputs, 0, a, 16, DataType::F32, ReduceOp::Sum, nullptr).code(),
            StatusCode::InvalidArgument);
  const void* withNull[] = {a, nullptr};
  EXPECT_EQ(detail::reduceBuffers(withNull, 2, a, 16, DataType::F32, ReduceOp::Sum, nullptr).code(),
            StatusCode::InvalidArgument);
  const Status overlap = detail::reduceBuffers(inputs, 2, a + 4, 16, DataType::F32, ReduceOp::Sum, nullptr);
  EXPECT_EQ(overlap.code(), StatusCode::InvalidArgument);
  EXPECT_NE(overlap.message().find("overlaps"), std::string::npos) << overlap.message();
  EXPECT_EQ(detail::reduceBuffers(inputs, 2, a + 2, 16, DataType::F64, ReduceOp::Max, nullptr).code(),
            StatusCode::InvalidArgument);
  EXPECT_EQ(detail::scaleBuffer(a, b, 16, DataType::I32, std::nan(""), nullptr).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(detail::scaleBuffer(nullptr, b, 16, DataType::F32, 2.0, nullptr).code(), StatusCode::InvalidArgument);
  EXPECT_TRUE(detail::reduceBuffers(inputs, 2, b, 0, DataType::F32, ReduceOp::Sum, nullptr).isOk());
}

TEST(Kernels, CaptureIntoCudaGraphAndReplay) {
  CHIMERA_REQUIRE_DEVICES(1);
  const TensorBox box = makeBox({256, 300}, {10, 20}, {200, 256});
  const DataType dtype = DataType::F32;
  const std::size_t size = dataTypeSize(dtype);
  const std::vector<std::uint8_t> tensor = patternBytes(static_cast<std::size_t>(tensorVolume(box)) * size, 3);
  const std::size_t packedBytes = static_cast<std::size_t>(boxVolume(box)) * size;
  DeviceBuffer deviceTensor(tensor.size());
  DeviceBuffer packed(packedBytes);
  deviceTensor.upload(tensor);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  detail::BoxCopy copy{box, deviceTensor.data(), packed.data()};
  const Status captured = detail::packBoxes(&copy, 1, dtype, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.isOk()) << captured.toString();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<std::uint8_t> want(packedBytes);
  ASSERT_TRUE(detail::packBoxHost(tensor.data(), want.data(), box, size).isOk());
  EXPECT_EQ(firstDifference(packed.download(packedBytes), want), "");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace chimera
