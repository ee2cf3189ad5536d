// SPDX-License-Identifier: Apache-2.0
// Fixtures of the MPI backend tests: meshes and groups that fit the world size, backends
// forced onto each algorithm family, and expected values computed locally.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chimera/mesh.hpp"
#include "mpi/mpi_backend_impl.hpp"
#include "mpi_test_util.hpp"

namespace chimera::testing {

/// A mesh text and one of its axis groups ("pp=2,tp=4", "tp").
struct GroupCase {
  std::string mesh;
  std::string axes;
};

/// Groups exercised at this world size: single axes and the whole 2-axis mesh
/// (pp=2,tp=4 at 8 ranks), and a flattened dp+tp group of a 3-axis mesh.
inline std::vector<GroupCase> groupCases(int world) {
  switch (world) {
    case 8: return {{"pp=2,tp=4", "tp"}, {"pp=2,tp=4", "pp"}, {"pp=2,tp=4", "pp+tp"}, {"dp=2,pp=2,tp=2", "dp+tp"}};
    case 4: return {{"pp=2,tp=2", "tp"}, {"pp=2,tp=2", "pp"}, {"pp=2,tp=2", "pp+tp"}, {"dp=2,pp=1,tp=2", "dp+tp"}};
    case 2: return {{"pp=1,tp=2", "tp"}, {"pp=1,tp=2", "pp"}, {"dp=2,pp=1,tp=1", "dp+tp"}};
    default: return {{"world=" + std::to_string(world), "world"}};
  }
}

/// A backend over `meshText` with explicit options, plus the parsed axes of one group.
struct BackendUnderTest {
  Mesh mesh;
  AxisSet axes;
  std::unique_ptr<Backend> backend;
  Status status;
};

/// Options used by the tests: checking on, and a tiny ring segment (256 bytes) so that
/// modest counts (1029 elements) already run several segments per block.
inline detail::MpiBackendOptions testOptions(detail::MpiAlgorithm algorithm) {
  detail::MpiBackendOptions options;
  options.algorithm = algorithm;
  options.checkArgs = true;
  options.segmentBytes = 256;
  return options;
}

/// A named set of backend options the sweeps run every case on.
struct BackendConfig {
  std::string name;
  detail::MpiBackendOptions options;
};

/// Each algorithm family, and the library family with MPI messages of at most 5 elements, so
/// that the split of transfers larger than one MPI call (beyond INT_MAX elements in real use)
/// runs on small counts.
inline std::vector<BackendConfig> backendConfigs() {
  std::vector<BackendConfig> configs;
  for (const auto algorithm :
       {detail::MpiAlgorithm::PointToPoint, detail::MpiAlgorithm::Ring, detail::MpiAlgorithm::Library}) {
    configs.push_back({std::string(detail::mpiAlgorithmName(algorithm)), testOptions(algorithm)});
  }
  BackendConfig split{"library, messages of 5 elements", testOptions(detail::MpiAlgorithm::Library)};
  split.options.maxMessageCount = 5;
  configs.push_back(split);
  return configs;
}

/// Creates the backend; `status` holds the first error.
inline BackendUnderTest makeBackend(const GroupCase& group, const detail::MpiBackendOptions& options) {
  BackendUnderTest out;
  out.status = Mesh::parse(group.mesh, worldSize(), out.mesh);
  if (out.status.isOk()) out.status = out.mesh.parseAxes(group.axes, out.axes);
  if (out.status.isOk()) out.status = detail::createMpiBackend(out.mesh, options, out.backend);
  return out;
}

/// The value a reduction of `values` with `op` has in `dtype` (integer wrap included;
/// Avg divides the sum by the member count, truncating on integer types).
inline double expectedReduction(const std::vector<double>& values, ReduceOp op, DataType dtype) {
  double acc = values.front();
  for (std::size_t i = 1; i < values.size(); ++i) {
    const double v = values[i];
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: acc += v; break;
      case ReduceOp::Prod: acc *= v; break;
      case ReduceOp::Min: acc = std::min(acc, v); break;
      case ReduceOp::Max: acc = std::max(acc, v); break;
    }
  }
  std::uint64_t cell[2] = {0, 0};
  storeElement(cell, 0, dtype, acc);
  double typed = loadElement(cell, 0, dtype);
  if (op == ReduceOp::Avg) {
    const bool integer = dtype == DataType::I32 || dtype == DataType::I64 || dtype == DataType::U8;
    typed =
        integer ? std::trunc(typed / static_cast<double>(values.size())) : typed / static_cast<double>(values.size());
  }
  return typed;
}

/// Whether `got` matches `want`: exact, except float Avg within the type's rounding.
inline bool matches(double got, double want, ReduceOp op, DataType dtype) {
  if (op != ReduceOp::Avg) return got == want;
  switch (dtype) {
    case DataType::F16: return std::fabs(got - want) <= 1e-3 * std::fabs(want) + 1e-7;
    case DataType::BF16: return std::fabs(got - want) <= 8e-3 * std::fabs(want) + 1e-7;
    case DataType::F32: return std::fabs(got - want) <= 1e-6 * std::fabs(want);
    default: return got == want;
  }
}

/// Input modulus per op: {1, 2} factors for Prod (products of 8 stay exact), [0, 8) otherwise.
inline double inputValue(std::uint32_t seed, int worldRank, std::size_t index, ReduceOp op) {
  return op == ReduceOp::Prod ? 1.0 + patternValue(seed, worldRank, index, 2) : patternValue(seed, worldRank, index, 8);
}

/// Records the first failure of a check loop so one bad element does not flood the log.
struct FirstFailure {
  bool ok = true;
  void record(bool good, const std::string& what) {
    if (good || !ok) {
      ok = ok && good;
      return;
    }
    ok = false;
    ADD_FAILURE() << "[rank " << worldRank() << "] " << what;
  }
};

/// Runs `perBackend(t, failure)` on a backend of every configuration (`backendConfigs`) and
/// every group of this world size (`groupCases`), expecting every rank to pass each one.
template <typename PerBackend>
void forEachBackend(PerBackend perBackend) {
  for (const BackendConfig& config : backendConfigs()) {
    for (const GroupCase& group : groupCases(worldSize())) {
      BackendUnderTest t = makeBackend(group, config.options);
      FirstFailure failure;
      failure.record(t.status.isOk(), "setup " + group.mesh + " " + group.axes + ": " + t.status.toString());
      if (!t.status.isOk()) continue;  // uniform across ranks: every rank parsed the same text
      perBackend(t, failure);
      EXPECT_TRUE(allRanksAgree(failure.ok)) << config.name << " on " << group.mesh << " / " << group.axes;
    }
  }
}

}  // namespace chimera::testing
