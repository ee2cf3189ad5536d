// SPDX-License-Identifier: Apache-2.0
// Small helpers shared by the examples: the fusion off/on A/B harness, timing, integer-valued
// inputs, agreement on a verdict, and reading back the part of a buffer a consumer reads.
// Public chimera API only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/layout.hpp"
#include "chimera/mpi_backend.hpp"
#include "chimera/session.hpp"

namespace example {

/// Exits with a message when a chimera call failed (examples keep error handling short).
inline void check(const chimera::Status& status, const char* what) {
  if (status.isOk()) return;
  std::fprintf(stderr, "%s: %s\n", what, status.toString().c_str());
  std::exit(1);
}

/// The MPI backend of the examples: the environment's options (createMpiBackend's), with a
/// stuck job ending itself: after a Timeout (a peer stalled or died) the backend logs the call,
/// the group and the late ranks and ends the whole job (MPI_Abort) instead of returning to a
/// schedule whose next calls nobody can complete. CHIMERA_ABORT_ON_TIMEOUT=0 turns that off.
inline chimera::Status createBackend(const chimera::Mesh& mesh, std::unique_ptr<chimera::Backend>& out) {
  chimera::MpiBackendOptions options;
  if (chimera::Status status = chimera::MpiBackendOptions::fromEnvironment(options); !status.isOk()) return status;
  if (std::getenv("CHIMERA_ABORT_ON_TIMEOUT") == nullptr) options.abortOnTimeout = true;
  return chimera::createMpiBackend(mesh, options, out);
}

/// Microseconds since `start`.
inline double microsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

/// Median of `values`.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

/// Small integers as floats, from (seed, rank, index): every sum of them is exact.
inline void fill(std::vector<float>& buffer, int seed, int rank) {
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    buffer[i] =
        static_cast<float>((i * 7 + static_cast<std::size_t>(seed) * 13 + static_cast<std::size_t>(rank) * 5) % 11);
  }
}

/// True on every rank when `ok` holds on every rank.
inline bool allRanks(chimera::Backend& backend, bool ok) {
  std::int32_t flag = ok ? 1 : 0;
  check(backend.allReduce(&flag, &flag, 1, chimera::DataType::I32, chimera::ReduceOp::Min, backend.mesh().allAxes()),
        "agreement");
  return flag == 1;
}

/// The elements a consumer reading `read` finds in a buffer holding `held`'s local tensor.
inline std::vector<float> consumedPart(const std::vector<float>& buffer, const chimera::Layout& held,
                                       const chimera::Layout& read, const chimera::TensorSpec& spec, int rank) {
  std::vector<float> out;
  if (!read.holds(rank)) return out;
  const chimera::Box box = read.rankBox(rank, spec).relativeTo(held.rankBox(rank, spec).offset);
  const std::vector<std::int64_t> shape = held.localShape(spec);
  const std::int64_t count = box.volume();
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t rest = i;
    std::int64_t linear = 0;
    std::int64_t stride = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
      linear += (box.offset[d] + rest % box.extent[d]) * stride;
      rest /= box.extent[d];
      stride *= shape[d];
    }
    out.push_back(buffer[static_cast<std::size_t>(linear)]);
  }
  return out;
}

/// The A/B harness of the examples: on sessions recording per rank
/// (`SessionOptions::perRank`), runs one training step's communication,
/// `step(session, buffers, i)` returning what the consumers read, `iters` + 1 times on a
/// fusion-off session (with `off` buffers) and a fusion-on session (with `on` buffers),
/// interleaved, and compares what was read. Rank 0 prints `title`, the median step times
/// (step 0 plans the windows and is not timed), the bytes each variant sent and the verdict.
/// Returns true when the results were identical on every rank.
template <typename Buffers, typename Step>
bool compareFusion(chimera::Backend& backend, const std::string& title, int iters, Buffers off, Buffers on, Step step) {
  chimera::SessionOptions offOptions, onOptions;
  offOptions.perRank = onOptions.perRank = true;
  offOptions.fusion = false;
  std::unique_ptr<chimera::Session> unfused, fused;
  check(chimera::Session::create(backend, offOptions, unfused), "session");
  check(chimera::Session::create(backend, onOptions, fused), "session");
  std::vector<double> timeOff, timeOn;
  bool identical = true;
  for (int i = 0; i < iters + 1; ++i) {
    check(backend.synchronize(), "sync");
    auto start = std::chrono::steady_clock::now();
    const auto expected = step(*unfused, off, i);
    if (i > 0) timeOff.push_back(microsSince(start));
    start = std::chrono::steady_clock::now();
    const auto got = step(*fused, on, i);
    if (i > 0) timeOn.push_back(microsSince(start));
    identical = identical && expected == got;
  }
  identical = allRanks(backend, identical);
  const chimera::SessionStats so = unfused->stats(), sf = fused->stats();
  // Per-rank recording counts this rank's bytes: the job's are the sum over the ranks.
  std::int64_t bytes[2] = {static_cast<std::int64_t>(so.rankBytesSent), static_cast<std::int64_t>(sf.rankBytesSent)};
  check(backend.allReduce(bytes, bytes, 2, chimera::DataType::I64, chimera::ReduceOp::Sum, backend.mesh().allAxes()),
        "bytes");
  const auto perStep = [&](std::int64_t total) { return static_cast<unsigned long long>(total / (iters + 1)); };
  if (backend.rank() == 0) {
    std::printf("%s, %d steps\n", title.c_str(), iters);
    std::printf("  fusion off: %9.1f us/step  %10llu bytes/step sent (all ranks)\n", median(timeOff),
                perStep(bytes[0]));
    std::printf(
        "  fusion on : %9.1f us/step  %10llu bytes/step sent (all ranks), %llu of %llu chains fused, "
        "%llu/%llu windows from the cache\n",
        median(timeOn), perStep(bytes[1]), static_cast<unsigned long long>(sf.fusedChains),
        static_cast<unsigned long long>(sf.chainsRun), static_cast<unsigned long long>(sf.windowCacheHits),
        static_cast<unsigned long long>(sf.windows));
    std::printf("  speedup %.2fx, bytes %.2fx fewer, results %s\n", median(timeOff) / median(timeOn),
                static_cast<double>(bytes[0]) / static_cast<double>(bytes[1]),
                identical ? "identical on every rank" : "DIFFER");
  }
  return identical;
}

/// Reads "--name value" from argv as text, or `fallback`.
inline std::string textArgument(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (name == argv[i]) return argv[i + 1];
  }
  return fallback;
}

/// Reads "--name value" from argv as an integer, or `fallback`.
inline long argument(int argc, char** argv, const std::string& name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (name == argv[i]) return std::atol(argv[i + 1]);
  }
  return fallback;
}

}  // namespace example
