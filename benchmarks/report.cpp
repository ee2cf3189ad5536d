// SPDX-License-Identifier: Apache-2.0
#include "report.hpp"

#include <fmt/format.h>

namespace chimera::bench {
namespace {

std::string opName(const ResultRow& row) { return row.op ? std::string(reduceOpName(*row.op)) : "none"; }

template <typename T>
detail::Json optionalJson(const std::optional<T>& value) {
  return value ? detail::Json(*value) : detail::Json();
}

}  // namespace

void computeBandwidth(ResultRow& row, double factor) {
  const double seconds = row.timeUs * 1e-6;
  row.algbwGBps = seconds > 0.0 ? static_cast<double>(row.bytes) / seconds / 1e9 : 0.0;
  row.busbwGBps = row.algbwGBps * factor;
}

std::optional<double> speedup(const ResultRow& row) {
  if (!row.baselineTimeUs || row.timeUs <= 0.0) return std::nullopt;
  return *row.baselineTimeUs / row.timeUs;
}

std::string tableHeader(const RunInfo& info) {
  std::string out = fmt::format("# chimera-bench: {} on {} ranks, mesh {}, groups along '{}' of {} ranks\n",
                                info.collective, info.nranks, info.mesh, info.axis, info.groupSize);
  out += fmt::format("# backend {}; baseline {} on the same groups; {} of {} iterations after {} warm-up; "
                     "time is the max over ranks\n",
                     info.backend, info.baseline, info.stat, info.iters, info.warmupIters);
  if (info.root) out += fmt::format("# root (group index) {}\n", *info.root);
  out += fmt::format("#{:>11}  {:>12}  {:>8}  {:>6}  {:>10}  {:>7}  {:>7}  {:>6}  {:>11}  {:>7}\n", "size", "count",
                     "type", "redop", "time", "algbw", "busbw", "#wrong", "baseline", "speedup");
  out += fmt::format("#{:>11}  {:>12}  {:>8}  {:>6}  {:>10}  {:>7}  {:>7}  {:>6}  {:>11}  {:>7}\n", "(B)",
                     "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "");
  return out;
}

std::string tableRow(const ResultRow& row) {
  const std::string wrong = row.wrong ? fmt::format("{}", *row.wrong) : "N/A";
  const std::string baseline = row.baselineTimeUs ? fmt::format("{:.1f}", *row.baselineTimeUs) : "n/a";
  const std::optional<double> ratio = speedup(row);
  const std::string ratioText = ratio ? fmt::format("{:.2f}", *ratio) : "n/a";
  return fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>10.1f}  {:>7.2f}  {:>7.2f}  {:>6}  {:>11}  {:>7}\n",
                     row.bytes, row.count, dataTypeName(row.dtype), opName(row), row.timeUs, row.algbwGBps,
                     row.busbwGBps, wrong, baseline, ratioText);
}

std::string tableFooter(const std::vector<ResultRow>& rows) {
  std::optional<std::uint64_t> wrong;
  std::optional<std::uint64_t> baselineWrong;
  double busbwSum = 0.0;
  for (const ResultRow& row : rows) {
    if (row.wrong) wrong = wrong.value_or(0) + *row.wrong;
    if (row.baselineWrong) baselineWrong = baselineWrong.value_or(0) + *row.baselineWrong;
    busbwSum += row.busbwGBps;
  }
  const auto text = [](const std::optional<std::uint64_t>& value) {
    return value ? fmt::format("{}", *value) : std::string("N/A");
  };
  const double average = rows.empty() ? 0.0 : busbwSum / static_cast<double>(rows.size());
  return fmt::format("# Wrong elements     : {} (baseline {})\n# Avg bus bandwidth  : {:.3f} GB/s\n", text(wrong),
                     text(baselineWrong), average);
}

detail::Json reportJson(const RunInfo& info, const std::vector<ResultRow>& rows) {
  detail::Json json = detail::Json::object();
  json.set("collective", info.collective).set("nranks", info.nranks).set("backend", info.backend);
  json.set("mesh", info.mesh).set("axis", info.axis).set("group_size", info.groupSize);
  json.set("baseline", info.baseline).set("stat", info.stat).set("iters", info.iters);
  json.set("warmup_iters", info.warmupIters);
  std::optional<std::uint64_t> baselineWrong;
  detail::Json rowsJson = detail::Json::array();
  for (const ResultRow& row : rows) {
    if (row.baselineWrong) baselineWrong = baselineWrong.value_or(0) + *row.baselineWrong;
    detail::Json item = detail::Json::object();
    item.set("bytes", static_cast<std::uint64_t>(row.bytes)).set("count", static_cast<std::uint64_t>(row.count));
    item.set("dtype", dataTypeName(row.dtype)).set("op", opName(row));
    item.set("time_us", row.timeUs).set("algbw_gbps", row.algbwGBps).set("busbw_gbps", row.busbwGBps);
    item.set("wrong", optionalJson(row.wrong)).set("baseline_time_us", optionalJson(row.baselineTimeUs));
    item.set("speedup", optionalJson(speedup(row)));
    rowsJson.push(std::move(item));
  }
  json.set("baseline_wrong", optionalJson(baselineWrong));
  json.set("rows", std::move(rowsJson));
  return json;
}

}  // namespace chimera::bench
