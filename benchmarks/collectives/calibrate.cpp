// SPDX-License-Identifier: Apache-2.0
// Implements chimera-bench --calibrate: measure the calibration points, fit, write the profile.
#include "calibrate.hpp"

#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "bench_context.hpp"
#include "bench_device.hpp"
#include "chimera/backend.hpp"
#include "chimera/planning/calibration.hpp"
#include "chimera/planning/cost_model.hpp"
#include "core/check.hpp"
#include "timing.hpp"

namespace chimera::bench {
namespace {

constexpr std::uint64_t kDefaultMinBytes = std::uint64_t{64} << 10;
constexpr std::uint64_t kDefaultMaxBytes = std::uint64_t{16} << 20;
constexpr DataType kDtype = DataType::F32;
// Passes over the whole sample list; a sample's time is the median of its rounds in all
// passes. On a host shared with other work the load drifts over minutes: passes spread every
// sample over the quiet and the busy periods.
constexpr int kPasses = 3;

void print(int rank, const std::string& text) {
  if (rank != 0) return;
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

/// A backend whose mesh "groups=W/g,members=g" makes the groups of `members` the sample's
/// groups of g consecutive world ranks.
struct GroupBackend {
  std::unique_ptr<Backend> backend;
  AxisSet members;
};

Status groupBackend(const std::string& kind, int worldSize, int groupSize, GroupBackend& out) {
  Mesh mesh;
  CHIMERA_RETURN_IF_ERROR(
      Mesh::parse(fmt::format("groups={},members={}", worldSize / groupSize, groupSize), worldSize, mesh));
  CHIMERA_RETURN_IF_ERROR(mesh.parseAxes("members", out.members));
  return createBenchBackend(kind, mesh, out.backend);
}

/// One call of the sample's primitive with L = bytesPerRank (float elements) on world rank
/// `rank`; for ManyToMany the first half of each group sends to the second.
Status runSample(const CalibrationSample& sample, int rank, Backend& backend, AxisSet axes, void* send, void* recv) {
  const std::size_t elements = sample.bytesPerRank / dataTypeSize(kDtype);
  const auto g = static_cast<std::size_t>(sample.groupSize);
  switch (sample.primitive) {
    case OpKind::AllReduce: return backend.allReduce(send, recv, elements, kDtype, ReduceOp::Sum, axes);
    case OpKind::ReduceScatter: return backend.reduceScatter(send, recv, elements / g, kDtype, ReduceOp::Sum, axes);
    case OpKind::AllGather: return backend.allGather(send, recv, elements, kDtype, axes);
    case OpKind::AllToAll: return backend.allToAll(send, recv, elements / g, kDtype, axes);
    case OpKind::Broadcast: return backend.broadcast(send, recv, elements, kDtype, 0, axes);
    case OpKind::ManyToMany: {
      const int half = sample.groupSize / 2;
      return rank % sample.groupSize < half ? backend.send(send, elements, kDtype, rank + half)
                                            : backend.recv(recv, elements, kDtype, rank - half);
    }
    default: break;
  }
  return Status::invalidArgument(
      fmt::format("calibration samples are collectives or manytomany, not {}", opKindName(sample.primitive)));
}

/// Median over -n iterations (after -w warm-up) of the slowest rank's time of `operation`.
Status medianSeconds(const Options& options, Backend& backend, const std::function<Status()>& operation,
                     double& seconds) {
  for (int i = 0; i < options.warmupIters; ++i) CHIMERA_RETURN_IF_ERROR(agreeOnStatus(operation()));
  std::vector<double> iterations(static_cast<std::size_t>(options.iters));
  for (double& s : iterations) {
    CHIMERA_RETURN_IF_ERROR(agreeOnStatus(mpiStatus(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier")));
    CHIMERA_RETURN_IF_ERROR(agreeOnStatus(timeOnBackend(backend, operation, s)));
  }
  MPI_Allreduce(MPI_IN_PLACE, iterations.data(), static_cast<int>(iterations.size()), MPI_DOUBLE, MPI_MAX,
                MPI_COMM_WORLD);
  TimingSamples samples;
  samples.iterationSeconds = std::move(iterations);
  seconds = medianIterationSeconds(samples);
  return Status::ok();
}

/// Times the samples `point` (one group size and size, every primitive) interleaved: each
/// timed round runs every primitive once after a barrier, so the drifting load of a shared
/// host hits all of them alike and their ratios, which decide plans, stay stable. Appends
/// every round's time (the slowest rank's) to each sample's list in `times`.
Status measurePoint(const Options& options, int rank, GroupBackend& group,
                    const std::vector<CalibrationSample>& samples, const std::vector<std::size_t>& point,
                    std::vector<std::vector<double>>& times) {
  Backend& backend = *group.backend;
  const CalibrationSample& first = samples[point.front()];
  BackendBuffer send(backend);
  BackendBuffer recv(backend);  // large enough for an AllGather's result
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(send.allocate(first.bytesPerRank)));
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(recv.allocate(first.bytesPerRank * static_cast<std::size_t>(first.groupSize))));
  const std::vector<unsigned char> zeros(first.bytesPerRank, 0);
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(copyToBackend(backend, send.data(), zeros.data(), zeros.size())));
  const auto run = [&](std::size_t i) {
    return runSample(samples[i], rank, backend, group.members, send.data(), recv.data());
  };
  for (int w = 0; w < options.warmupIters; ++w) {
    for (const std::size_t i : point) CHIMERA_RETURN_IF_ERROR(agreeOnStatus(run(i)));
  }
  std::vector<double> rounds(static_cast<std::size_t>(options.iters) * point.size());
  for (std::size_t r = 0; r < rounds.size(); ++r) {
    const std::size_t i = point[r % point.size()];
    CHIMERA_RETURN_IF_ERROR(agreeOnStatus(mpiStatus(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier")));
    CHIMERA_RETURN_IF_ERROR(agreeOnStatus(timeOnBackend(
        backend, [&] { return run(i); }, rounds[r])));
  }
  MPI_Allreduce(MPI_IN_PLACE, rounds.data(), static_cast<int>(rounds.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  for (std::size_t r = 0; r < rounds.size(); ++r) times[point[r % point.size()]].push_back(rounds[r]);
  return Status::ok();
}

/// The samples grouped into points of one group size and size, in order of first appearance.
std::vector<std::vector<std::size_t>> pointsOf(const std::vector<CalibrationSample>& samples) {
  std::map<std::pair<int, std::uint64_t>, std::size_t> index;
  std::vector<std::vector<std::size_t>> points;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto key = std::make_pair(samples[i].groupSize, samples[i].bytesPerRank);
    const auto [it, added] = index.emplace(key, points.size());
    if (added) points.emplace_back();
    points[it->second].push_back(i);
  }
  return points;
}

/// Seconds of one local pass as the executor makes them around a plan step, with every
/// rank making one at once: a pack of the left half of the columns of a row-major f32
/// tensor of `bytes` (rows of 4 KiB), `packed` bytes. A pack needs no peer, so a rank's own
/// time misses the others' packs it waits for when ranks share cores: the step is timed as
/// pack + barrier, less a barrier alone.
Status measureLocalPass(const Options& options, Backend& backend, std::size_t bytes, std::size_t& packed,
                        double& seconds) {
  const std::int64_t cols = 1024;
  const std::int64_t rows = std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes / (cols * 4)));
  const std::vector<std::int64_t> shape{rows, cols};
  const Box box{{0, 0}, {rows, cols / 2}};
  packed = static_cast<std::size_t>(rows * cols / 2 * 4);
  BackendBuffer tensor(backend);
  BackendBuffer staging(backend);
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(tensor.allocate(static_cast<std::size_t>(rows * cols * 4))));
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(staging.allocate(packed)));
  const std::vector<unsigned char> zeros(tensor.size(), 0);
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(copyToBackend(backend, tensor.data(), zeros.data(), zeros.size())));
  const auto barrier = [] { return mpiStatus(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); };
  const auto packThenBarrier = [&] {
    CHIMERA_RETURN_IF_ERROR(backend.packBox(tensor.data(), shape, box, staging.data(), kDtype));
    return barrier();
  };
  double withPack = 0;
  double alone = 0;
  CHIMERA_RETURN_IF_ERROR(medianSeconds(options, backend, packThenBarrier, withPack));
  CHIMERA_RETURN_IF_ERROR(medianSeconds(options, backend, barrier, alone));
  // Never below the busiest rank's own pack time (a noisy barrier must not cancel it).
  double own = 0;
  CHIMERA_RETURN_IF_ERROR(medianSeconds(
      options, backend, [&] { return backend.packBox(tensor.data(), shape, box, staging.data(), kDtype); }, own));
  seconds = std::max(withPack - alone, own);
  return Status::ok();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// "allreduce 2x4 ranks, 1048576 B: measured 812.3 us, fitted 790.1 us (-2.7 %)".
std::string sampleLine(const CalibrationSample& sample, const CostModel& fitted) {
  StepCost cost;
  const Status status = fitted.predictStep(sampleStep(sample), cost);
  const std::string predicted = status.isOk() ? fmt::format("{:>12.1f}  {:>+7.1f}", cost.seconds * 1e6,
                                                            (cost.seconds - sample.seconds) / sample.seconds * 100.0)
                                              : fmt::format("{:>12}  {:>7}", "n/a", "");
  return fmt::format("{:>14}  {:>6}  {:>10}  {:>12.1f}  {}\n", opKindName(sample.primitive),
                     fmt::format("{}x{}", sample.numGroups, sample.groupSize), sample.bytesPerRank,
                     sample.seconds * 1e6, predicted);
}

// InvalidArgument unless `path` can be written, checked before any measurement; a file the
// check had to create is removed again.
Status checkWritable(const std::string& path) {
  CHIMERA_CHECK_ARG(!path.empty(), "--calibrate needs --out FILE");
  std::error_code error;
  const bool existed = std::filesystem::exists(path, error);
  {
    std::ofstream probe(path, std::ios::binary | std::ios::app);
    CHIMERA_CHECK_ARG(probe.good(), "cannot write --out '{}' (checked before calibrating)", path);
  }
  if (!existed) std::filesystem::remove(path, error);
  return Status::ok();
}

// The base the fit keeps the fabric of: --topology, else the launch's own (host:N on one host,
// the host-network topology of where the ranks run across hosts).
Status loadBase(const Options& options, const std::vector<int>& hosts, Topology& out) {
  const std::string name = options.topology.empty() ? hostsTopologyName(hosts) : options.topology;
  const Status status = loadTopology(name, out);
  return status.isOk() ? status : Status(status.code(), "--topology: " + status.message());
}

// Whether every group of `sample` (g consecutive world ranks) runs inside one host.
bool insideHosts(const CalibrationSample& sample, const std::vector<int>& hosts) {
  for (std::size_t rank = 0; rank < hosts.size(); ++rank) {
    const std::size_t first = rank - rank % static_cast<std::size_t>(sample.groupSize);
    if (hosts[rank] != hosts[first]) return false;
  }
  return true;
}

// Whether the hand-off of a ManyToMany sample (member i to member i + g/2) crosses hosts anywhere.
bool crossesHosts(const CalibrationSample& sample, const std::vector<int>& hosts) {
  if (sample.primitive != OpKind::ManyToMany) return false;
  const auto g = static_cast<std::size_t>(sample.groupSize);
  for (std::size_t rank = 0; rank < hosts.size(); ++rank) {
    if (rank % g < g / 2 && hosts[rank] != hosts[rank + g / 2]) return true;
  }
  return false;
}

// Across hosts the two links are fitted apart: the samples whose groups stay inside a host
// fit everything but the cross link (as on one host), then the hand-offs that cross hosts fit
// the cross link on that result. Without samples inside hosts (ranks placed round-robin) the
// base's local figures stay. `out` keeps the base's placement.
Status fitAcrossHosts(int rank, const Topology& base, const std::vector<CalibrationSample>& samples,
                      const std::vector<int>& hosts, Topology& out, FitReport& report) {
  std::vector<CalibrationSample> inside;
  std::vector<CalibrationSample> across;
  for (const CalibrationSample& sample : samples) {
    if (insideHosts(sample, hosts)) inside.push_back(sample);
    if (crossesHosts(sample, hosts)) across.push_back(sample);
  }
  CHIMERA_CHECK_ARG(!across.empty(), "no calibration sample crosses hosts: cannot fit the cross link");
  Topology local = base;
  if (!inside.empty()) {
    CHIMERA_RETURN_IF_ERROR(fitProfile(base, inside, local, &report));
  } else {
    print(rank, "# no group of consecutive ranks runs inside one host: the local link keeps the base's figures\n");
  }
  // The cross fit scales the cross link's alpha: seed it positive should the local fit have
  // zeroed the alphas, so the hand-offs' fixed cost is fitted to the cross link.
  Topology crossBase = local;
  crossBase.cross.alphaSeconds = base.cross.alphaSeconds > 0 ? base.cross.alphaSeconds : 1e-6;
  Topology crossFit;
  FitReport crossReport;
  CHIMERA_RETURN_IF_ERROR(fitProfile(crossBase, across, crossFit, &crossReport));
  print(rank, fmt::format("# across hosts: {} inside-host samples fit the local link, {} hand-offs across hosts "
                          "the cross link: alpha {:.1f} us, {:.3g} MB/s per direction (rms error {:.1f} %)\n",
                          inside.size(), across.size(), crossFit.cross.alphaSeconds * 1e6,
                          crossFit.cross.bytesPerSecond / 1e6, crossReport.rmsRelativeError * 100.0));
  local.cross = crossFit.cross;
  local.calibration.samples = static_cast<int>(inside.size() + across.size());
  out = std::move(local);
  return Status::ok();
}

}  // namespace

Status runCalibration(const Options& options) {
  int rank = 0;
  int worldSize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  std::vector<CalibrationSample> samples;
  CHIMERA_RETURN_IF_ERROR(
      agreeOnStatus(calibrationPoints(worldSize, options.sizesGiven ? options.minBytes : kDefaultMinBytes,
                                      options.sizesGiven ? options.maxBytes : kDefaultMaxBytes, samples)));
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(rank == 0 ? checkWritable(options.outPath) : Status::ok()));
  const std::string kind = options.backend.empty() ? defaultBackendName() : options.backend;
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(backendAvailable(kind)));
  std::map<int, GroupBackend> backends;
  const int firstGroup = samples.front().groupSize;
  CHIMERA_RETURN_IF_ERROR(groupBackend(kind, worldSize, firstGroup, backends[firstGroup]));
  const std::vector<int> hosts = backends[firstGroup].backend->hostOfRank();
  const bool acrossHosts = std::any_of(hosts.begin(), hosts.end(), [](int host) { return host != 0; });
  Topology base;
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(loadBase(options, hosts, base)));
  print(rank, fmt::format("# chimera-bench --calibrate: {} samples on {} ranks, backend {}, fitting '{}'; every "
                          "primitive of a group size and size timed in turn, {} rounds after {} warm-up, in {} "
                          "passes; median of the rounds, slowest rank\n",
                          samples.size(), worldSize, kind, base.name, options.iters, options.warmupIters, kPasses));
  std::vector<std::vector<double>> times(samples.size());
  std::vector<double> localPasses;
  std::size_t localBytes = 0;
  const std::vector<std::vector<std::size_t>> points = pointsOf(samples);
  for (int pass = 0; pass < kPasses; ++pass) {
    for (const std::vector<std::size_t>& point : points) {
      const int groupSize = samples[point.front()].groupSize;
      GroupBackend& group = backends[groupSize];
      if (!group.backend) CHIMERA_RETURN_IF_ERROR(groupBackend(kind, worldSize, groupSize, group));
      CHIMERA_RETURN_IF_ERROR(measurePoint(options, rank, group, samples, point, times));
    }
    double seconds = 0;
    CHIMERA_RETURN_IF_ERROR(measureLocalPass(options, *backends.begin()->second.backend,
                                             static_cast<std::size_t>(samples.back().bytesPerRank), localBytes,
                                             seconds));
    localPasses.push_back(seconds);
  }
  for (std::size_t i = 0; i < samples.size(); ++i) samples[i].seconds = median(times[i]);
  Topology fitted;
  FitReport report;
  if (acrossHosts && base.fabric == Fabric::HostNetwork) {
    CHIMERA_RETURN_IF_ERROR(agreeOnStatus(fitAcrossHosts(rank, base, samples, hosts, fitted, report)));
    fitted.name = fmt::format("hosts-{}-calibrated", hostsLayoutKey(hosts));
  } else {
    CHIMERA_RETURN_IF_ERROR(agreeOnStatus(fitProfile(base, samples, fitted, &report)));
    fitted.name = base.name + "-calibrated";
  }
  // The local passes around plan steps (packs, unpacks, copies): no collective sample
  // exercises them, so they get their own measurement. A pass reads and writes its bytes.
  const double localSeconds = median(localPasses);
  fitted.device.memoryBytesPerSecond = 2.0 * static_cast<double>(localBytes) / localSeconds;
  fitted.movesBoxes = backends.begin()->second.backend->movesBoxesEverywhere();
  const CostModel model(fitted);
  print(rank, fmt::format("#{:>13}  {:>6}  {:>10}  {:>12}  {:>12}  {:>7}\n", "primitive", "groups", "bytes",
                          "measured(us)", "fitted(us)", "err(%)"));
  for (const CalibrationSample& sample : samples) print(rank, sampleLine(sample, model));
  print(rank,
        fmt::format("# fit: alpha x{:.3f}, bandwidth x{:.3f}, step {:.1f} us, reduce {:.3g} s/B{}; rms error "
                    "{:.1f} %, worst {:.1f} %\n",
                    report.alphaScale, report.bandwidthScale, report.stepSeconds * 1e6, report.reduceSecondsPerByte,
                    report.reduceFitted     ? ""
                    : report.reduceAbsorbed ? " (in the reducing primitives' factors)"
                                            : " (not fitted)",
                    report.rmsRelativeError * 100.0, report.maxRelativeError * 100.0));
  std::string factors;
  for (std::size_t i = 0; i < kTransferKinds.size(); ++i) {
    factors += fmt::format(" {} {:.3f}", opKindName(kTransferKinds[i]), report.transferFactors.values[i]);
  }
  print(rank, fmt::format("# transfer factors (time against the model's algorithm):{}\n", factors));
  print(rank, fmt::format("# local passes: a pack of {} B on every rank at once took {:.1f} us: memory "
                          "bandwidth {:.3g} GB/s per rank\n",
                          localBytes, localSeconds * 1e6, fitted.device.memoryBytesPerSecond / 1e9));
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(rank == 0 ? saveTopology(fitted, options.outPath) : Status::ok()));
  print(rank, fmt::format("# wrote {} (use --topology {})\n", options.outPath, options.outPath));
  if (acrossHosts && fitted.fabric == Fabric::HostNetwork) {
    // Cached for the layout: launches with these ranks per host take its links by default.
    const std::string cached = calibrationCachePath(hostsLayoutKey(hosts));
    if (!cached.empty()) {
      std::error_code error;
      if (rank == 0) std::filesystem::create_directories(std::filesystem::path(cached).parent_path(), error);
      CHIMERA_RETURN_IF_ERROR(agreeOnStatus(rank == 0 ? saveTopology(fitted, cached) : Status::ok()));
      print(rank, fmt::format("# cached as {}: the default links of launches with {} ranks per host\n", cached,
                              hostsLayoutKey(hosts)));
    }
  }
  return Status::ok();
}

}  // namespace chimera::bench
