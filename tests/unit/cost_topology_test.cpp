// SPDX-License-Identifier: Apache-2.0
// Topology presets, profile JSON round trip, and lookup errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "chimera/planning/topology.hpp"
#include "chimera/planning/topology_cost.hpp"

namespace chimera {
namespace {

void expectSame(const Topology& a, const Topology& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.fabric, b.fabric);
  EXPECT_EQ(a.ranks, b.ranks);
  EXPECT_EQ(a.ranksPerDomain, b.ranksPerDomain);
  EXPECT_EQ(a.local.alphaSeconds, b.local.alphaSeconds);
  EXPECT_EQ(a.local.bytesPerSecond, b.local.bytesPerSecond);
  EXPECT_EQ(a.cross.alphaSeconds, b.cross.alphaSeconds);
  EXPECT_EQ(a.cross.bytesPerSecond, b.cross.bytesPerSecond);
  EXPECT_EQ(a.peerPenalty, b.peerPenalty);
  EXPECT_EQ(a.reduceSecondsPerByte, b.reduceSecondsPerByte);
  EXPECT_EQ(a.computeSlots, b.computeSlots);
  EXPECT_EQ(a.stepSeconds, b.stepSeconds);
  EXPECT_EQ(a.peerSeconds, b.peerSeconds);
  EXPECT_EQ(a.fusionMargin, b.fusionMargin);
  EXPECT_EQ(a.movesBoxes, b.movesBoxes);
  EXPECT_EQ(a.transferFactors.values, b.transferFactors.values);
  EXPECT_EQ(a.device.memoryBytesPerSecond, b.device.memoryBytesPerSecond);
  EXPECT_EQ(a.device.launchSeconds, b.device.launchSeconds);
  EXPECT_EQ(a.device.peakFlopsPerSecond, b.device.peakFlopsPerSecond);
  EXPECT_EQ(a.calibration.samples, b.calibration.samples);
  EXPECT_EQ(a.calibration.rmsRelativeError, b.calibration.rmsRelativeError);
}

// A file under the test's temporary directory, removed at scope exit.
class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_(std::string(::testing::TempDir()) + "chimera_" + std::to_string(::getpid()) + "_" + name) {}
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  void write(const std::string& text) const { std::ofstream(path_) << text; }

 private:
  std::string path_;
};

Status loadText(const std::string& text, Topology& out) { return topologyFromJson(text, out); }

TEST(Topology, EveryPresetIsValidAndDescribesItsMachine) {
  for (const std::string& name : topologyPresetNames()) {
    Topology t;
    const Status status = loadTopology(name, t);
    ASSERT_TRUE(status.isOk()) << name << ": " << status.toString();
    EXPECT_TRUE(validateTopology(t).isOk()) << name;
    EXPECT_EQ(t.name.rfind(name, 0), 0u) << t.name;
  }
  Topology t;
  ASSERT_TRUE(loadTopology("pcie-4080x8", t).isOk());
  EXPECT_EQ(t.fabric, Fabric::PcieDomains);
  EXPECT_EQ(t.ranksPerDomain, 4);
  EXPECT_LT(t.cross.bytesPerSecond, t.local.bytesPerSecond);  // the CPU link is the slower one
  ASSERT_TRUE(loadTopology("multinode-ib", t).isOk());
  EXPECT_EQ(t.ranks, 16);
  EXPECT_LT(t.cross.bytesPerSecond, t.local.bytesPerSecond);
  ASSERT_TRUE(loadTopology("host:4", t).isOk());
  EXPECT_EQ(t.ranks, 4);
  EXPECT_EQ(t.name, "host:4");
  EXPECT_EQ(t.computeSlots, 2);                   // 2 cores shared by every rank
  EXPECT_GT(t.device.memoryBytesPerSecond, 0.0);  // the executor's local passes are priced
  EXPECT_GT(t.stepSeconds, 0.0);
}

TEST(Topology, ProfileJsonRoundTripsEveryPresetExactly) {
  for (const char* name : {"host", "pcie-4080x8", "nvswitch-h20x8", "dgx-h100x8", "multinode-ib:3"}) {
    Topology original;
    ASSERT_TRUE(loadTopology(name, original).isOk());
    EXPECT_FALSE(original.movesBoxes) << name;
    original.movesBoxes = std::string_view(name) == "host";
    original.calibration = {17, 0.0123456789};
    original.transferFactors.values = {0.8125, 1.1, 0.9, 1.0 / 3.0, 2.5, 0.7};
    const std::string json = topologyToJson(original);
    EXPECT_NE(json.find("\"format\": \"chimera-topology-1\""), std::string::npos) << json;
    Topology loaded;
    const Status status = loadText(json, loaded);
    ASSERT_TRUE(status.isOk()) << status.toString() << "\n" << json;
    expectSame(loaded, original);
  }
}

TEST(Topology, SavedProfileLoadsByPath) {
  Topology original;
  ASSERT_TRUE(loadTopology("nvswitch-h20x8", original).isOk());
  original.name = "my-h20";
  original.local.bytesPerSecond = 123.456e9;
  const TempFile file("profile.json");
  ASSERT_TRUE(saveTopology(original, file.path()).isOk());
  Topology loaded;
  const Status status = loadTopology(file.path(), loaded);
  ASSERT_TRUE(status.isOk()) << status.toString();
  expectSame(loaded, original);
}

TEST(Topology, MinimalHandWrittenProfileUsesDefaults) {
  const std::string text = R"({"format": "chimera-topology-1", "name": "box", "fabric": "shared-memory",
    "ranks": 4, "ranks_per_domain": 4, "local_link": {"alpha_s": 1e-6, "bandwidth_bytes_per_s": 2e9}})";
  Topology t;
  const Status status = loadText(text, t);
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(t.name, "box");
  EXPECT_EQ(t.peerPenalty, 0.0);
  EXPECT_EQ(t.computeSlots, 0);
  EXPECT_EQ(t.calibration.samples, 0);
  EXPECT_FALSE(t.movesBoxes);
  for (const double factor : t.transferFactors.values) EXPECT_EQ(factor, 1.0);
  const std::string notABool = text.substr(0, text.size() - 1) + R"(, "moves_boxes": 1})";
  const Status status2 = loadText(notABool, t);
  EXPECT_EQ(status2.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status2.message().find("field 'moves_boxes' must be true or false, got 1"), std::string::npos)
      << status2.message();
}

TEST(Topology, TransferFactorsScaleTheirPrimitiveOnly) {
  Topology t;
  ASSERT_TRUE(loadTopology("pcie-4080x8", t).isOk());
  for (const double factor : t.transferFactors.values) EXPECT_EQ(factor, 1.0);  // presets: as modelled
  t.transferFactors.values[1] = 1.5;                                            // reducescatter
  EXPECT_EQ(t.transferFactors.of(OpKind::ReduceScatter), 1.5);
  EXPECT_EQ(t.transferFactors.of(OpKind::AllReduce), 1.0);
  EXPECT_EQ(t.transferFactors.of(OpKind::Send), 1.0);  // not a step kind a program has
  t.transferFactors.values[5] = 0.0;
  const Status status = validateTopology(t);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("transfer factor of manytomany must be > 0, got 0"), std::string::npos)
      << status.message();
}

TEST(Topology, UnknownNamesListThePresets) {
  Topology t;
  Status status = loadTopology("nvlink-b200x72", t);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("unknown topology 'nvlink-b200x72'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("pcie-4080x8"), std::string::npos) << status.message();
  status = loadTopology("multinode-ib:0", t);
  EXPECT_NE(status.message().find("multinode-ib:N"), std::string::npos) << status.message();
  status = loadTopology("host:two", t);
  EXPECT_NE(status.message().find("host:N"), std::string::npos) << status.message();
}

// loadPlanCost: "bytes" is bytes alone, anything else a topology priced by TopologyCost.
TEST(Topology, PlanCostByName) {
  std::unique_ptr<PlanCost> cost;
  ASSERT_TRUE(loadPlanCost("bytes", cost).isOk());
  EXPECT_EQ(cost->name(), "bytes");
  EXPECT_EQ(cost->fusionMargin(), 0.0);
  ASSERT_TRUE(loadPlanCost("host:4", cost).isOk());
  EXPECT_EQ(cost->name(), "host:4");
  EXPECT_GT(cost->fusionMargin(), 0.0);
  // The backend's answer replaces the topology's own whether boxes move.
  const auto movesBoxes = [](const PlanCost& c) {
    return dynamic_cast<const TopologyCost&>(c).model().topology().movesBoxes;
  };
  EXPECT_FALSE(movesBoxes(*cost));
  ASSERT_TRUE(loadPlanCost("host:4", cost, true).isOk());
  EXPECT_TRUE(movesBoxes(*cost));
  ASSERT_TRUE(loadPlanCost("host:4", cost, false).isOk());
  EXPECT_FALSE(movesBoxes(*cost));
  const Status bad = loadPlanCost("nvlink-b200x72", cost);
  EXPECT_EQ(bad.code(), StatusCode::InvalidArgument);
  EXPECT_NE(bad.message().find("nvlink-b200x72"), std::string::npos) << bad.message();
}

TEST(Topology, MalformedProfileFileNamesTheFileAndThePosition) {
  const TempFile file("broken.json");
  file.write("{\n  \"format\": \"chimera-topology-1\",\n  \"name\" \"x\"\n}\n");
  Topology t;
  const Status status = loadTopology(file.path(), t);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find(file.path()), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("line 3, column 12"), std::string::npos) << status.message();
}

TEST(Topology, ProfileFieldErrorsNameTheField) {
  Topology base;
  ASSERT_TRUE(loadTopology("pcie-4080x8", base).isOk());
  const std::string good = topologyToJson(base);
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  auto expectError = [](const std::string& text, const std::string& fragment) {
    Topology t;
    const Status status = loadText(text, t);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << text;
    EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
  };
  expectError(edited("\"ranks\": 8", "\"rank\": 8"), "unknown field 'rank'");
  expectError(edited("\"ranks\": 8,", ""), "missing field 'ranks'");
  expectError(edited("\"ranks\": 8", "\"ranks\": \"8\""), "field 'ranks' must be an integer");
  expectError(edited("\"ranks\": 8", "\"ranks\": 8.5"), "field 'ranks' must be an integer");
  expectError(edited("\"ranks_per_domain\": 4", "\"ranks_per_domain\": 3"), "ranks_per_domain 3");
  expectError(edited("\"fabric\": \"pcie-domains\"", "\"fabric\": \"token-ring\""), "unknown fabric 'token-ring'");
  expectError(edited("chimera-topology-1", "chimera-topology-9"), "expected 'chimera-topology-1'");
  expectError(edited("\"bandwidth_bytes_per_s\": 22000000000.0", "\"bandwidth_bytes_per_s\": -1"), "bandwidth > 0");
  expectError(edited("\"alpha_s\": 1e-05", "\"latency\": 1e-05"), "unknown field 'local_link.latency'");
  expectError(edited("\"allgather\": 1.0", "\"allgather\": -2.0"), "transfer factor of allgather must be > 0");
  expectError(edited("\"allgather\": 1.0", "\"gather\": 1.0"), "unknown field 'transfer_factors.gather'");
  expectError("[1, 2]", "must be a JSON object");
}

}  // namespace
}  // namespace chimera
