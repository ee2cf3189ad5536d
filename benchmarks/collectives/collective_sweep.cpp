// SPDX-License-Identifier: Apache-2.0
// Implements chimera-bench's collective mode (-C): check, time and report ours vs MPI.
#include "collective_sweep.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "buffer_check.hpp"
#include "core/check.hpp"
#include "in_place.hpp"
#include "json_report_file.hpp"
#include "timing.hpp"

namespace chimera::bench {
namespace {

/// Backend-allocated send and receive buffers for the out-of-place calls, and the one buffer
/// of the in-place calls, each large enough for every row.
class RowBuffers {
 public:
  explicit RowBuffers(Backend& backend) : backend_(backend) {}
  RowBuffers(const RowBuffers&) = delete;
  RowBuffers& operator=(const RowBuffers&) = delete;
  ~RowBuffers() {
    backend_.deallocate(send_);
    backend_.deallocate(recv_);
    backend_.deallocate(inPlace_);
  }
  Status allocate(std::size_t sendBytes, std::size_t recvBytes, std::size_t inPlaceBytes) {
    CHIMERA_RETURN_IF_ERROR(backend_.allocate(std::max<std::size_t>(sendBytes, 1), &send_));
    CHIMERA_RETURN_IF_ERROR(backend_.allocate(std::max<std::size_t>(recvBytes, 1), &recv_));
    return backend_.allocate(std::max<std::size_t>(inPlaceBytes, 1), &inPlace_);
  }
  void* send() const { return send_; }
  void* recv() const { return recv_; }
  void* inPlace() const { return inPlace_; }

 private:
  Backend& backend_;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  void* inPlace_ = nullptr;
};

/// One row's measurement on this rank before agreement.
struct LocalRow {
  std::uint64_t wrong = 0;
  std::uint64_t inPlaceWrong = 0;
  std::uint64_t baselineWrong = 0;
  bool inPlaceRan = false;
  bool baselineRan = true;
  double seconds = 0.0;
  double inPlaceSeconds = 0.0;
  double baselineSeconds = 0.0;
};

/// This rank's in-place call of one row: send and recv inside one buffer, per `layout`.
struct InPlaceCall {
  const RowCase& row;
  InPlaceLayout layout;
  void* buffer = nullptr;

  const void* send() const { return elementAt(buffer, row.dtype, layout.sendOffset); }
  void* recv() const { return elementAt(buffer, row.dtype, layout.recvOffset); }
};

/// Every row of the sweep in nccl-tests order: dtype, then op, then size.
std::vector<RowCase> rowCases(const Options& options, int groupSize) {
  std::vector<std::optional<ReduceOp>> ops{std::nullopt};
  if (collectiveReduces(options.collective)) ops.assign(options.ops.begin(), options.ops.end());
  std::vector<RowCase> cases;
  for (DataType dtype : options.dataTypes) {
    for (const std::optional<ReduceOp>& op : ops) {
      for (std::size_t bytes : sizeSeries(options)) {
        cases.push_back({dtype, op, bufferShape(options.collective, bytes, dataTypeSize(dtype), groupSize)});
      }
    }
  }
  return cases;
}

/// Unsupported (MPI cannot express the row) becomes Ok with `unsupported` set: the baseline
/// column then reads n/a. Every other status passes through.
Status statusWithoutUnsupported(const Status& status, bool& unsupported) {
  unsupported = status.code() == StatusCode::Unsupported;
  return unsupported ? Status::ok() : status;
}

/// Runs ours, then the baseline, once each on a poisoned receive buffer and counts the
/// elements of this rank's result that differ from the expected values.
Status checkRow(CollectiveRunner& runner, const InputPattern& inputs, const RowCase& row, const RowBuffers& buffers,
                LocalRow& local) {
  const std::size_t recvBytes = row.shape.recvCount * dataTypeSize(row.dtype);
  const auto expectedAt = [&](std::size_t i) { return runner.expected(inputs, row, i); };
  poisonBuffer(buffers.recv(), recvBytes);
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(runner.runOurs(row, buffers.send(), buffers.recv())));
  local.wrong = countMismatches(buffers.recv(), row.dtype, row.shape.recvCount, expectedAt);
  poisonBuffer(buffers.recv(), recvBytes);
  bool unsupported = false;
  CHIMERA_RETURN_IF_ERROR(
      statusWithoutUnsupported(agreeOnStatus(runner.runBaseline(row, buffers.send(), buffers.recv())), unsupported));
  local.baselineRan = !unsupported;
  if (local.baselineRan) {
    const void* result = runner.baselineResult(buffers.send(), buffers.recv());
    local.baselineWrong = countMismatches(result, row.dtype, row.shape.recvCount, expectedAt);
  }
  return Status::ok();
}

/// Poisons the in-place buffer and writes this rank's input (member `groupIndex`) into the
/// call's send slot: the result overwrites the input, so every checked run needs this.
void writeInPlaceInputOf(const InPlaceCall& call, const InputPattern& inputs, int groupIndex) {
  writeInPlaceInput(call.buffer, call.row.dtype, call.layout,
                    [&](std::size_t i) { return inputs.value(groupIndex, i); });
}

/// Runs ours in place once on freshly written input and counts the elements of the result
/// slot (where the call must leave it) that differ from the expected values.
Status checkInPlace(CollectiveRunner& runner, const InputPattern& inputs, const InPlaceCall& call, int groupIndex,
                    LocalRow& local) {
  writeInPlaceInputOf(call, inputs, groupIndex);
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(runner.runOurs(call.row, call.send(), call.recv())));
  local.inPlaceWrong = countInPlaceMismatches(call.buffer, call.row.dtype, call.layout,
                                              [&](std::size_t i) { return runner.expected(inputs, call.row, i); });
  return Status::ok();
}

/// How the stall watchdog names a timed loop: "chimera-bench allreduce 67108864 B float sum: chimera".
std::string stretchName(const Options& options, const RowCase& row, std::string_view variant) {
  return fmt::format("chimera-bench {} {} B {}{}{}: {}", collectiveName(options.collective), row.shape.bytes,
                     dataTypeName(row.dtype), row.op ? " " : "", row.op ? reduceOpName(*row.op) : "", variant);
}

/// The barrier between warm-up and the timed loop: a one-element AllReduce of the world through
/// our backend, so that a peer that stalls before it is reported (and ends the job) under the
/// backend's timeout, naming the ranks it waited for; MPI_Barrier would wait without end.
Status barrier(Backend& backend) {
  const std::int32_t arrived = 1;
  std::int32_t all = 0;
  CHIMERA_RETURN_IF_ERROR(
      backend.allReduce(&arrived, &all, 1, DataType::I32, ReduceOp::Sum, backend.mesh().allAxes(), Stream{}));
  return backend.synchronize(Stream{});
}

double statistic(TimeStatistic stat, const TimingSamples& samples) {
  return stat == TimeStatistic::Median ? medianIterationSeconds(samples) : meanIterationSeconds(samples);
}

/// Times ours, then the baseline (unless it could not run), each after its own warm-up.
Status timeRow(const Options& options, Backend& backend, CollectiveRunner& runner, const RowCase& row,
               const RowBuffers& buffers, LocalRow& local) {
  const auto worldBarrier = [&] { return barrier(backend); };
  TimingSamples samples;
  const std::string ours = stretchName(options, row, "chimera");
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(timeLoop(
      ours, options.warmupIters, options.iters, worldBarrier,
      [&] { return runner.runOurs(row, buffers.send(), buffers.recv()); }, samples)));
  local.seconds = statistic(options.stat, samples);
  if (!local.baselineRan) return Status::ok();
  bool unsupported = false;
  const std::string baseline = stretchName(options, row, "plain MPI baseline");
  CHIMERA_RETURN_IF_ERROR(
      statusWithoutUnsupported(agreeOnStatus(timeLoop(
                                   baseline, options.warmupIters, options.iters, worldBarrier,
                                   [&] { return runner.runBaseline(row, buffers.send(), buffers.recv()); }, samples)),
                               unsupported));
  local.baselineRan = !unsupported;
  local.baselineSeconds = statistic(options.stat, samples);
  return Status::ok();
}

/// Times ours in place with the same warm-up, barrier and statistic as timeRow. The input is
/// written fresh first, but every iteration then overwrites it with its result, so later
/// iterations reduce already-reduced data: fine for timing (nccl-tests does the same); the
/// check (checkInPlace) always runs on fresh input.
Status timeInPlace(const Options& options, Backend& backend, CollectiveRunner& runner, const InputPattern& inputs,
                   const InPlaceCall& call, int groupIndex, LocalRow& local) {
  writeInPlaceInputOf(call, inputs, groupIndex);
  TimingSamples samples;
  const std::string what = stretchName(options, call.row, "chimera in place");
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(timeLoop(
      what, options.warmupIters, options.iters, [&] { return barrier(backend); },
      [&] { return runner.runOurs(call.row, call.send(), call.recv()); }, samples)));
  local.inPlaceSeconds = statistic(options.stat, samples);
  local.inPlaceRan = true;
  return Status::ok();
}

/// Checks (-c 1) and times one row: ours out of place, the baseline, then ours in place
/// when the collective has an in-place form.
Status measureRow(const Options& options, Backend& backend, CollectiveRunner& runner, const InputPattern& inputs,
                  const RowCase& row, const RowBuffers& buffers, int groupIndex, LocalRow& local) {
  if (options.check) CHIMERA_RETURN_IF_ERROR(checkRow(runner, inputs, row, buffers, local));
  CHIMERA_RETURN_IF_ERROR(timeRow(options, backend, runner, row, buffers, local));
  const std::optional<InPlaceLayout> layout = inPlaceLayout(options.collective, row.shape, groupIndex);
  if (!layout) return Status::ok();
  const InPlaceCall call{row, *layout, buffers.inPlace()};
  if (options.check) CHIMERA_RETURN_IF_ERROR(checkInPlace(runner, inputs, call, groupIndex, local));
  return timeInPlace(options, backend, runner, inputs, call, groupIndex, local);
}

/// Times: max over ranks; wrong elements: sum over ranks (collective over the world).
ResultRow agreeRow(const Options& options, const RowCase& row, const LocalRow& local, int groupSize) {
  const Stretch stretch("chimera-bench: agreeing on a row's times and wrong elements (MPI_Allreduce)");
  double seconds[3] = {local.seconds, local.baselineSeconds, local.inPlaceSeconds};
  MPI_Allreduce(MPI_IN_PLACE, seconds, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  std::uint64_t wrong[3] = {local.wrong, local.baselineWrong, local.inPlaceWrong};
  MPI_Allreduce(MPI_IN_PLACE, wrong, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  ResultRow result;
  result.bytes = row.shape.bytes;
  result.count = row.shape.paramCount;
  result.dtype = row.dtype;
  result.op = row.op;
  result.timeUs = seconds[0] * 1e6;
  if (options.check) result.wrong = wrong[0];
  if (local.inPlaceRan) {
    result.inPlace = InPlaceResult{};
    result.inPlace->timeUs = seconds[2] * 1e6;
    if (options.check) result.inPlace->wrong = wrong[2];
  }
  computeBandwidth(result, busBandwidthFactor(options.collective, groupSize));
  if (local.baselineRan) {
    result.baselineTimeUs = seconds[1] * 1e6;
    if (options.check) result.baselineWrong = wrong[1];
  }
  return result;
}

RunInfo runInfo(const Options& options, BenchContext& context) {
  RunInfo info;
  info.collective = collectiveName(options.collective);
  info.nranks = context.worldSize();
  info.backend = context.group().backend->name();
  info.mesh = context.mesh().toString();
  info.axis = context.axisName();
  info.groupSize = context.group().groupSize();
  info.baseline = baselineName(options.collective);
  info.iters = options.iters;
  info.warmupIters = options.warmupIters;
  info.stat = options.stat == TimeStatistic::Median ? "median" : "mean";
  if (options.collective == Collective::Broadcast) info.root = options.root;
  return info;
}

/// Rank 0 prints `text` and flushes, so rows appear as they are measured.
void print(int rank, const std::string& text) {
  if (rank != 0) return;
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace

Status runCollectiveSweep(const Options& options, BenchContext& context, SweepOutcome& out) {
  GroupContext& group = context.group();
  const int rank = context.worldRank();
  const std::vector<RowCase> cases = rowCases(options, group.groupSize());
  // A run that would measure nothing fails before any setup (every rank computes the same cases).
  CHIMERA_CHECK_ARG(
      std::any_of(cases.begin(), cases.end(), [](const RowCase& row) { return row.shape.paramCount > 0; }),
      "nothing to measure: every size from -b {} to -e {} holds fewer elements than the {} ranks of "
      "the group",
      options.minBytes, options.maxBytes, group.groupSize());
  std::size_t sendBytes = 0;
  std::size_t recvBytes = 0;
  for (const RowCase& row : cases) {
    sendBytes = std::max(sendBytes, row.shape.sendCount * dataTypeSize(row.dtype));
    recvBytes = std::max(recvBytes, row.shape.recvCount * dataTypeSize(row.dtype));
  }
  const std::size_t inPlaceBytes = hasInPlaceForm(options.collective) ? std::max(sendBytes, recvBytes) : 0;
  JsonReportFile json;
  CHIMERA_RETURN_IF_ERROR(json.open(options.jsonPath, rank));
  RowBuffers buffers(*group.backend);
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(buffers.allocate(sendBytes, recvBytes, inPlaceBytes)));
  const std::unique_ptr<CollectiveRunner> runner = createRunner(options.collective, group);
  const RunInfo info = runInfo(options, context);
  print(rank, tableHeader(info));

  SweepOutcome outcome;
  for (const RowCase& row : cases) {
    if (row.shape.paramCount == 0) {
      print(rank, fmt::format("# {} {}: fewer elements than the group has ranks, row skipped\n", row.shape.bytes,
                              dataTypeName(row.dtype)));
      continue;
    }
    const InputPattern inputs(options.seed, row.dtype, row.op, group.groupRanks);
    fillBuffer(buffers.send(), row.dtype, row.shape.sendCount,
               [&](std::size_t i) { return inputs.value(group.groupIndex, i); });
    LocalRow local;
    CHIMERA_RETURN_IF_ERROR(
        measureRow(options, *group.backend, *runner, inputs, row, buffers, group.groupIndex, local));
    const ResultRow result = agreeRow(options, row, local, group.groupSize());
    print(rank, tableRow(result));
    if (result.baselineWrong.value_or(0) > 0) {
      print(rank, fmt::format("# warning: the baseline {} returned {} wrong elements in the row above\n", info.baseline,
                              *result.baselineWrong));
    }
    const std::uint64_t inPlaceWrong = result.inPlace ? result.inPlace->wrong.value_or(0) : 0;
    outcome.anyWrong |= result.wrong.value_or(0) > 0 || inPlaceWrong > 0 || result.baselineWrong.value_or(0) > 0;
    outcome.rows.push_back(result);
  }
  print(rank, tableFooter(outcome.rows));
  CHIMERA_RETURN_IF_ERROR(json.write(reportJson(info, outcome.rows)));
  out = std::move(outcome);
  return Status::ok();
}

}  // namespace chimera::bench
