// SPDX-License-Identifier: Apache-2.0
// The NCCL backend on device buffers: one rank per communicator on one GPU (every operation,
// both AllToAll paths, split sub-communicators, errors, the timeout abort), and a threaded
// multi-rank run for machines with several GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chimera/nccl_backend.hpp"
#include "chimera/tensor_spec.hpp"
#include "core/type_lists.hpp"
#include "gpu_test_util.hpp"
#include "typed_values.hpp"

namespace chimera {
namespace {

using test::DeviceBuffer;

// Sets an environment variable for the lifetime of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

std::vector<std::uint8_t> rampValues(DataType dtype, std::size_t count, int salt) {
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i)
    values[i] = static_cast<double>((i * 7 + static_cast<std::size_t>(salt)) % 100);
  return test::encodeValues(dtype, values);
}

class NcclSingleRank : public ::testing::Test {
 protected:
  void SetUp() override {
    CHIMERA_REQUIRE_DEVICES(1);
    ASSERT_TRUE(Mesh::create({{"a", 1}, {"b", 1}}, 1, mesh_).isOk());
    createBackend(backend_);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_TRUE(mesh_.parseAxes("a", axisA_).isOk());
  }
  void TearDown() override {
    backend_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void createBackend(std::unique_ptr<Backend>& out) {
    NcclUniqueId id;
    ASSERT_TRUE(createNcclUniqueId(id).isOk());
    const Status status = createNcclBackend(mesh_, 0, 0, id, out);
    ASSERT_TRUE(status.isOk()) << status.toString();
  }
  void sync(Backend& backend) {
    const Status status = backend.synchronize(stream_);
    ASSERT_TRUE(status.isOk()) << status.toString();
  }

  Mesh mesh_;
  AxisSet axisA_;
  std::unique_ptr<Backend> backend_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(NcclSingleRank, AllReduceIsIdentityForEveryDtypeOpAndGroup) {
  const std::size_t count = 1001;
  for (DataType dtype : kAllDataTypes) {
    const std::size_t bytes = count * dataTypeSize(dtype);
    const std::vector<std::uint8_t> input = rampValues(dtype, count, 1);
    DeviceBuffer send(bytes);
    DeviceBuffer recv(bytes);
    send.upload(input);
    for (ReduceOp op : kAllReduceOps) {
      for (AxisSet axes : {mesh_.allAxes(), axisA_}) {
        ASSERT_EQ(cudaMemset(recv.data(), 0xEE, bytes), cudaSuccess);
        const Status status = backend_->allReduce(send.data(), recv.data(), count, dtype, op, axes, stream_);
        ASSERT_TRUE(status.isOk()) << status.toString();
        sync(*backend_);
        EXPECT_EQ(recv.download(bytes), input)
            << dataTypeName(dtype) << " " << reduceOpName(op) << " " << mesh_.axesName(axes);
      }
    }
    ASSERT_TRUE(backend_->allReduce(send.data(), send.data(), count, dtype, ReduceOp::Sum, axisA_, stream_).isOk());
    sync(*backend_);
    EXPECT_EQ(send.download(bytes), input) << "in place " << dataTypeName(dtype);
  }
}

TEST_F(NcclSingleRank, ReduceScatterAllGatherBroadcastAndCopyMoveTheData) {
  const std::size_t count = 4097;
  const DataType dtype = DataType::BF16;
  const std::size_t bytes = count * dataTypeSize(dtype);
  const std::vector<std::uint8_t> input = rampValues(dtype, count, 2);
  DeviceBuffer send(bytes);
  send.upload(input);
  DeviceBuffer recv(bytes);
  auto check = [&](const Status& status, const char* what) {
    ASSERT_TRUE(status.isOk()) << what << ": " << status.toString();
    sync(*backend_);
    EXPECT_EQ(recv.download(bytes), input) << what;
    ASSERT_EQ(cudaMemset(recv.data(), 0, bytes), cudaSuccess);
  };
  check(backend_->reduceScatter(send.data(), recv.data(), count, dtype, ReduceOp::Max, axisA_, stream_),
        "reduceScatter");
  check(backend_->allGather(send.data(), recv.data(), count, dtype, mesh_.allAxes(), stream_), "allGather");
  check(backend_->broadcast(send.data(), recv.data(), count, dtype, 0, axisA_, stream_), "broadcast");
  check(backend_->copy(recv.data(), send.data(), bytes, stream_), "copy");
  check(backend_->allToAll(send.data(), recv.data(), count, dtype, axisA_, stream_), "allToAll native");
  std::unique_ptr<Backend> grouped;
  {
    ScopedEnv env("CHIMERA_NCCL_ALLTOALL", "grouped");
    createBackend(grouped);
  }
  ASSERT_TRUE(grouped->allToAll(send.data(), recv.data(), count, dtype, mesh_.allAxes(), stream_).isOk());
  sync(*grouped);
  EXPECT_EQ(recv.download(bytes), input) << "allToAll grouped";
}

TEST_F(NcclSingleRank, GroupedSendRecvToSelfAndAllocate) {
  const std::size_t count = 12345;
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_TRUE(backend_->allocate(count * 8, &a).isOk());
  ASSERT_TRUE(backend_->allocate(count * 8, &b).isOk());
  const std::vector<std::uint8_t> input = rampValues(DataType::I64, count, 3);
  ASSERT_EQ(cudaMemcpy(a, input.data(), input.size(), cudaMemcpyHostToDevice), cudaSuccess);
  const P2POp ops[] = {{P2POp::Kind::Send, a, count, DataType::I64, 0},
                       {P2POp::Kind::Recv, b, count, DataType::I64, 0}};
  const Status status = backend_->groupedP2P(ops, stream_);
  ASSERT_TRUE(status.isOk()) << status.toString();
  sync(*backend_);
  std::vector<std::uint8_t> got(input.size());
  ASSERT_EQ(cudaMemcpy(got.data(), b, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, input);
  backend_->deallocate(a);
  backend_->deallocate(b);
  backend_->deallocate(nullptr);
}

TEST_F(NcclSingleRank, BadArgumentsAreNamed) {
  DeviceBuffer buffer(1024);
  void* p = buffer.data();
  auto expectCode = [](const Status& status, StatusCode code, const char* fragment) {
    EXPECT_EQ(status.code(), code) << status.toString();
    EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
  };
  expectCode(backend_->allReduce(p, p, 4, DataType::F32, ReduceOp::Sum, AxisSet(), stream_),
             StatusCode::InvalidArgument, "empty axis set");
  expectCode(backend_->allReduce(p, p, 4, DataType::F32, ReduceOp::Sum, AxisSet::single(5), stream_),
             StatusCode::InvalidArgument, "outside mesh");
  expectCode(backend_->allReduce(nullptr, p, 4, DataType::F32, ReduceOp::Sum, axisA_, stream_),
             StatusCode::InvalidArgument, "send buffer is null");
  expectCode(backend_->allReduce(p, p, 4, static_cast<DataType>(99), ReduceOp::Sum, axisA_, stream_),
             StatusCode::InvalidArgument, "unknown DataType");
  expectCode(backend_->allToAll(p, p, 4, DataType::F32, axisA_, stream_), StatusCode::InvalidArgument, "out-of-place");
  expectCode(backend_->broadcast(p, p, 4, DataType::F32, 1, axisA_, stream_), StatusCode::InvalidArgument, "root 1");
  expectCode(backend_->send(p, 4, DataType::F32, 0, stream_), StatusCode::InvalidArgument, "self");
  const P2POp farPeer{P2POp::Kind::Recv, p, 4, DataType::F32, 3};
  expectCode(backend_->groupedP2P(std::span<const P2POp>(&farPeer, 1), stream_), StatusCode::InvalidArgument, "peer 3");
  void* out = nullptr;
  expectCode(backend_->allocate(0, &out), StatusCode::InvalidArgument, "0 bytes");
  EXPECT_TRUE(backend_->synchronize(stream_).isOk()) << "errors must not leave work behind";
}

TEST_F(NcclSingleRank, StalledStreamTimesOutAndAborts) {
  std::unique_ptr<Backend> backend;
  {
    ScopedEnv env("CHIMERA_TIMEOUT_MS", "300");
    createBackend(backend);
  }
  // A host callback that holds the stream until released stands in for a peer that never
  // shows up: the stream stops progressing, which is what the deadline watches.
  static std::atomic<bool> release{false};
  release = false;
  // Released well after the deadline from another thread, so that nothing the abort does
  // (it may wait for the device) can deadlock the test.
  std::thread releaser([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    release = true;
  });
  ASSERT_EQ(cudaLaunchHostFunc(
                stream_,
                [](void*) {
                  while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                },
                nullptr),
            cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  const Status status = backend->synchronize(stream_);
  const auto returned = std::chrono::steady_clock::now();
  releaser.join();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  // What the test promises: the deadline (not the stream completing) ends the wait, no
  // earlier than CHIMERA_TIMEOUT_MS. Timeout is only returned when the stream was still
  // stuck at the deadline, and the release comes 10x later; the time synchronize() takes to
  // abort the communicators afterwards is NCCL's and deliberately not bounded here.
  EXPECT_EQ(status.code(), StatusCode::Timeout) << status.toString();
  EXPECT_NE(status.message().find("CHIMERA_TIMEOUT_MS=300"), std::string::npos) << status.message();
  EXPECT_GE(returned - start, std::chrono::milliseconds(300));
  DeviceBuffer buffer(64);
  const Status after =
      backend->allReduce(buffer.data(), buffer.data(), 4, DataType::F32, ReduceOp::Sum, axisA_, stream_);
  EXPECT_EQ(after.code(), StatusCode::BackendError);
  EXPECT_NE(after.message().find("aborted"), std::string::npos) << after.message();
}

TEST_F(NcclSingleRank, LocalPackUnpackAndScaleRunOnTheStream) {
  // Backend::packBox/unpackBox/scale of the NCCL backend are the CUDA kernels, ordered on
  // stream(); compared with the host path.
  const std::vector<std::int64_t> shape = {37, 129};
  const Box box{{5, 17}, {30, 100}};
  const DataType dtype = DataType::F16;
  const std::size_t size = dataTypeSize(dtype);
  const std::size_t tensorBytes = static_cast<std::size_t>(shape[0] * shape[1]) * size;
  const std::size_t packedBytes = static_cast<std::size_t>(box.volume()) * size;
  const std::vector<std::uint8_t> tensor = rampValues(dtype, tensorBytes / size, 5);
  DeviceBuffer deviceTensor(tensorBytes);
  DeviceBuffer packed(packedBytes);
  deviceTensor.upload(tensor);
  ASSERT_TRUE(backend_->packBox(deviceTensor.data(), shape, box, packed.data(), dtype, stream_).isOk());
  ASSERT_TRUE(backend_->scale(packed.data(), packed.data(), packedBytes / size, dtype, 2.0, stream_).isOk());
  ASSERT_EQ(cudaMemsetAsync(deviceTensor.data(), 0, tensorBytes, stream_), cudaSuccess);
  ASSERT_TRUE(backend_->unpackBox(packed.data(), deviceTensor.data(), shape, box, dtype, stream_).isOk());
  sync(*backend_);
  // Expected: zeros outside the box, twice the input inside (exact: values < 100).
  std::vector<std::uint8_t> want(tensorBytes, 0);
  for (std::int64_t r = box.offset[0]; r < box.offset[0] + box.extent[0]; ++r) {
    for (std::int64_t c = box.offset[1]; c < box.offset[1] + box.extent[1]; ++c) {
      const std::size_t at = static_cast<std::size_t>(r * shape[1] + c) * size;
      test::storeValue(dtype, 2 * test::loadValue(dtype, tensor.data() + at), want.data() + at);
    }
  }
  EXPECT_EQ(deviceTensor.download(tensorBytes), want);
  const Status bad =
      backend_->packBox(deviceTensor.data(), shape, Box{{0, 100}, {1, 30}}, packed.data(), dtype, stream_);
  EXPECT_EQ(bad.code(), StatusCode::InvalidArgument) << bad.toString();
}

TEST(NcclBackend, MalformedEnvironmentIsRejected) {
  // No device needed: the environment is read before CUDA or NCCL is touched.
  ScopedEnv env("CHIMERA_TIMEOUT_MS", "soon");
  NcclUniqueId id;
  std::unique_ptr<Backend> backend;
  const Status status = createNcclBackend(Mesh::flat(1), 0, 0, id, backend);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("soon"), std::string::npos) << status.message();
  ScopedEnv timeout("CHIMERA_TIMEOUT_MS", "1000");
  ScopedEnv mode("CHIMERA_NCCL_ALLTOALL", "pairwise");
  const Status modeStatus = createNcclBackend(Mesh::flat(1), 0, 0, id, backend);
  EXPECT_EQ(modeStatus.code(), StatusCode::InvalidArgument);
  EXPECT_NE(modeStatus.message().find("pairwise"), std::string::npos) << modeStatus.message();
}

TEST(NcclBackend, MeshAndRankAreChecked) {
  // No device needed: these fail before CUDA or NCCL is touched.
  NcclUniqueId id;
  std::unique_ptr<Backend> backend;
  EXPECT_EQ(createNcclBackend(Mesh(), 0, 0, id, backend).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(createNcclBackend(Mesh::flat(2), 2, 0, id, backend).code(), StatusCode::InvalidArgument);
}

TEST_F(NcclSingleRank, ArgumentAgreementKeepsResultsAndLocalErrors) {
  std::unique_ptr<Backend> checked;
  {
    ScopedEnv env("CHIMERA_CHECK_ARGS", "1");
    createBackend(checked);
  }
  const std::size_t count = 333;
  const std::vector<std::uint8_t> input = rampValues(DataType::F64, count, 4);
  DeviceBuffer send(input.size());
  DeviceBuffer recv(input.size());
  send.upload(input);
  ASSERT_TRUE(
      checked->allReduce(send.data(), recv.data(), count, DataType::F64, ReduceOp::Min, axisA_, stream_).isOk());
  ASSERT_TRUE(checked->broadcast(send.data(), recv.data(), count, DataType::F64, 0, mesh_.allAxes(), stream_).isOk());
  sync(*checked);
  EXPECT_EQ(recv.download(input.size()), input);
  const Status bad = checked->allGather(nullptr, recv.data(), count, DataType::F64, axisA_, stream_);
  EXPECT_EQ(bad.code(), StatusCode::InvalidArgument);
  EXPECT_NE(bad.message().find("send buffer is null"), std::string::npos) << bad.message();
}

// One thread per GPU, each a rank of one NCCL world; checks are collected per rank and
// asserted after every thread joined (an early return on one rank would hang the others).
std::string runRank(const Mesh& mesh, int rank, int device, const NcclUniqueId& id) {
  std::unique_ptr<Backend> backend;
  Status status = createNcclBackend(mesh, rank, device, id, backend);
  if (!status.isOk()) return status.toString();
  const int n = mesh.size();
  const std::size_t count = 1 << 16;
  const std::size_t bytes = count * sizeof(float);
  std::vector<float> mine(count * static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(rank * 1000 + static_cast<int>(i % 1000));
  void* send = nullptr;
  void* recv = nullptr;
  if (!(status = backend->allocate(bytes * static_cast<std::size_t>(n), &send)).isOk()) return status.toString();
  if (!(status = backend->allocate(bytes * static_cast<std::size_t>(n), &recv)).isOk()) return status.toString();
  cudaMemcpy(send, mine.data(), bytes * static_cast<std::size_t>(n), cudaMemcpyHostToDevice);
  std::vector<float> got(count * static_cast<std::size_t>(n));
  auto fetch = [&](std::size_t elements) {
    status = backend->synchronize();
    cudaMemcpy(got.data(), recv, elements * sizeof(float), cudaMemcpyDeviceToHost);
    return status.isOk();
  };
  std::string errors;
  // AllReduce over the world: element i sums rank*1000 + i%1000 over all ranks.
  status = backend->allReduce(send, recv, count, DataType::F32, ReduceOp::Sum, mesh.allAxes());
  if (!status.isOk() || !fetch(count)) return "allReduce: " + status.toString();
  for (std::size_t i = 0; i < count; ++i) {
    const float want = static_cast<float>(1000 * n * (n - 1) / 2 + n * static_cast<int>(i % 1000));
    if (got[i] != want) errors += "allReduce[" + std::to_string(i) + "] ";
    if (errors.size() > 200) break;
  }
  // AllToAll: block j of rank r lands in block r of rank j.
  status = backend->allToAll(send, recv, count, DataType::F32, mesh.allAxes());
  if (!status.isOk() || !fetch(count * static_cast<std::size_t>(n))) return "allToAll: " + status.toString();
  for (int source = 0; source < n && errors.size() < 200; ++source) {
    const std::size_t block = static_cast<std::size_t>(source) * count;
    const std::size_t inSource = static_cast<std::size_t>(rank) * count;
    if (got[block + 5] != static_cast<float>(source * 1000 + static_cast<int>((inSource + 5) % 1000))) {
      errors += "allToAll block " + std::to_string(source) + " ";
    }
  }
  // Ring of grouped send/recv: receive the left neighbour's buffer.
  const P2POp ring[] = {{P2POp::Kind::Send, send, count, DataType::F32, (rank + 1) % n},
                        {P2POp::Kind::Recv, recv, count, DataType::F32, (rank + n - 1) % n}};
  status = backend->groupedP2P(ring);
  if (!status.isOk() || !fetch(count)) return "groupedP2P: " + status.toString();
  if (got[7] != static_cast<float>(((rank + n - 1) % n) * 1000 + 7)) errors += "ring ";
  // AllReduce along the last mesh axis only (a split communicator).
  const AxisSet last = AxisSet::single(mesh.numAxes() - 1);
  status = backend->allReduce(send, recv, count, DataType::F32, ReduceOp::Max, last);
  if (!status.isOk() || !fetch(count)) return "allReduce(last axis): " + status.toString();
  const std::vector<int> members = mesh.groupRanks(rank, last);
  if (got[3] != static_cast<float>(members.back() * 1000 + 3)) errors += "max over " + mesh.axesName(last) + " ";
  // Argument agreement (CHIMERA_CHECK_ARGS=1 for this test): rank 1 passes another count,
  // and every rank must get Mismatch instead of hanging.
  status = backend->allReduce(send, recv, rank == 1 ? count - 1 : count, DataType::F32, ReduceOp::Sum, mesh.allAxes());
  if (status.code() != StatusCode::Mismatch || status.message().find("count") == std::string::npos) {
    errors += "mismatch not reported: " + status.toString() + " ";
  }
  backend->deallocate(send);
  backend->deallocate(recv);
  return errors;
}

TEST(NcclMultiRank, CollectivesAndRingAcrossAllGpus) {
  CHIMERA_REQUIRE_DEVICES(2);
  std::string why;
  const int n = std::min(test::cudaDevices(why), 8);
  Mesh mesh;
  if (n % 2 == 0 && n >= 4) {
    ASSERT_TRUE(Mesh::create({{"x", 2}, {"y", n / 2}}, n, mesh).isOk());
  } else {
    mesh = Mesh::flat(n);
  }
  NcclUniqueId id;
  ASSERT_TRUE(createNcclUniqueId(id).isOk());
  ScopedEnv checkArgs("CHIMERA_CHECK_ARGS", "1");
  std::vector<std::string> results(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] { results[static_cast<std::size_t>(rank)] = runRank(mesh, rank, rank, id); });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < n; ++rank) EXPECT_EQ(results[static_cast<std::size_t>(rank)], "") << "rank " << rank;
}

// The same checks with one process per rank (chimera-rank-launch), several of them on one
// GPU where NCCL allows it (NCCL_MULTI_RANK_GPU_ENABLE=1 from 2.31).
TEST(NcclProcesses, CollectivesAndRingAcrossLaunchedRanks) {
  detail::NcclBootstrapEnv env;
  int device = 0;
  CHIMERA_REQUIRE_LAUNCHED_RANKS(env, device, 2);
  const int n = env.worldSize;
  Mesh mesh;
  if (n % 2 == 0 && n >= 4) {
    ASSERT_TRUE(Mesh::create({{"x", 2}, {"y", n / 2}}, n, mesh).isOk());
  } else {
    mesh = Mesh::flat(n);
  }
  NcclUniqueId id;
  const Status fresh = test::launchedWorldId(env, device, id);
  ASSERT_TRUE(fresh.isOk()) << fresh.toString();
  ScopedEnv checkArgs("CHIMERA_CHECK_ARGS", "1");
  EXPECT_EQ(runRank(mesh, env.rank, device, id), "") << "rank " << env.rank << " of " << n;
}

TEST(NcclBackend, LauncherEnvironmentIsCheckedBeforeCuda) {
  // No device needed: the variables are read before CUDA or NCCL is touched.
  for (const char* name : {"CHIMERA_RANK", "CHIMERA_WORLD_SIZE", "CHIMERA_NCCL_UNIQUE_ID"}) unsetenv(name);
  std::unique_ptr<Backend> backend;
  Status status = createNcclBackendFromEnv(Mesh::flat(2), backend);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("CHIMERA_RANK is not set"), std::string::npos) << status.message();
  ScopedEnv rank("CHIMERA_RANK", "0");
  ScopedEnv world("CHIMERA_WORLD_SIZE", "4");
  ScopedEnv id("CHIMERA_NCCL_UNIQUE_ID", std::string(2 * kNcclUniqueIdBytes, 'a').c_str());
  status = createNcclBackendFromEnv(Mesh::flat(2), backend);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("CHIMERA_WORLD_SIZE=4"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace chimera
