// SPDX-License-Identifier: Apache-2.0
// Implements chimera-bench's nccl-tests-style table and JSON rows.
#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

namespace chimera::bench {
namespace {

std::string opName(const ResultRow& row) { return row.op ? std::string(reduceOpName(*row.op)) : "none"; }

/// Width of the size, count, type and redop columns with their separators.
constexpr int kLeadWidth = 12 + 2 + 12 + 2 + 8 + 2 + 6 + 2;
/// Width of one time/algbw/busbw/#wrong group.
constexpr int kGroupWidth = 10 + 2 + 7 + 2 + 7 + 2 + 6;

/// One group's four columns, right-aligned to the widths of the header.
std::string groupColumns(std::string_view time, std::string_view algbw, std::string_view busbw,
                         std::string_view wrong) {
  return fmt::format("{:>10}  {:>7}  {:>7}  {:>6}", time, algbw, busbw, wrong);
}

std::string wrongText(const std::optional<std::uint64_t>& wrong) {
  return wrong ? fmt::format("{}", *wrong) : std::string("N/A");
}

/// The in-place total of the footer: n/a when no row has an in-place group.
std::string inPlaceText(const std::vector<ResultRow>& rows, const std::optional<std::uint64_t>& wrong) {
  const bool any = std::any_of(rows.begin(), rows.end(), [](const ResultRow& row) { return row.inPlace.has_value(); });
  return any ? wrongText(wrong) : std::string("n/a");
}

template <typename T>
detail::Json optionalJson(const std::optional<T>& value) {
  return value ? detail::Json(*value) : detail::Json(nullptr);
}

/// The four in-place fields of a JSON row, all null when the group is n/a.
void addInPlaceJson(detail::Json& item, const std::optional<InPlaceResult>& inPlace) {
  if (!inPlace) {
    for (const char* key : {"in_place_time_us", "in_place_algbw_gbps", "in_place_busbw_gbps", "in_place_wrong"}) {
      item[key] = nullptr;
    }
    return;
  }
  item["in_place_time_us"] = inPlace->timeUs;
  item["in_place_algbw_gbps"] = inPlace->algbwGBps;
  item["in_place_busbw_gbps"] = inPlace->busbwGBps;
  item["in_place_wrong"] = optionalJson(inPlace->wrong);
}

}  // namespace

void computeBandwidth(ResultRow& row, double factor) {
  const auto bandwidth = [&](double timeUs) {
    const double seconds = timeUs * 1e-6;
    return seconds > 0.0 ? static_cast<double>(row.bytes) / seconds / 1e9 : 0.0;
  };
  row.algbwGBps = bandwidth(row.timeUs);
  row.busbwGBps = row.algbwGBps * factor;
  if (row.inPlace) {
    row.inPlace->algbwGBps = bandwidth(row.inPlace->timeUs);
    row.inPlace->busbwGBps = row.inPlace->algbwGBps * factor;
  }
}

std::optional<double> speedup(const ResultRow& row) {
  if (!row.baselineTimeUs || row.timeUs <= 0.0) return std::nullopt;
  return *row.baselineTimeUs / row.timeUs;
}

std::string tableHeader(const RunInfo& info) {
  std::string out = fmt::format("# chimera-bench: {} on {} ranks, mesh {}, groups along '{}' of {} ranks\n",
                                info.collective, info.nranks, info.mesh, info.axis, info.groupSize);
  out += fmt::format(
      "# backend {}; baseline {} on the same groups; {} of {} iterations after {} warm-up; "
      "time is the max over ranks\n",
      info.backend, info.baseline, info.stat, info.iters, info.warmupIters);
  if (info.root) out += fmt::format("# root (group index) {}\n", *info.root);
  std::string captions =
      fmt::format("#{:>{}}{:^{}}  {:^{}}", "", kLeadWidth - 1, "out-of-place", kGroupWidth, "in-place", kGroupWidth);
  captions.erase(captions.find_last_not_of(' ') + 1);
  out += captions + '\n';
  out += fmt::format("#{:>11}  {:>12}  {:>8}  {:>6}  {}  {}  {:>11}  {:>7}\n", "size", "count", "type", "redop",
                     groupColumns("time", "algbw", "busbw", "#wrong"), groupColumns("time", "algbw", "busbw", "#wrong"),
                     "baseline", "speedup");
  out += fmt::format("#{:>11}  {:>12}  {:>8}  {:>6}  {}  {}  {:>11}  {:>7}\n", "(B)", "(elements)", "", "",
                     groupColumns("(us)", "(GB/s)", "(GB/s)", ""), groupColumns("(us)", "(GB/s)", "(GB/s)", ""), "(us)",
                     "");
  return out;
}

std::string tableRow(const ResultRow& row) {
  const std::string outOfPlace = groupColumns(fmt::format("{:.1f}", row.timeUs), fmt::format("{:.2f}", row.algbwGBps),
                                              fmt::format("{:.2f}", row.busbwGBps), wrongText(row.wrong));
  const std::string inPlace =
      row.inPlace
          ? groupColumns(fmt::format("{:.1f}", row.inPlace->timeUs), fmt::format("{:.2f}", row.inPlace->algbwGBps),
                         fmt::format("{:.2f}", row.inPlace->busbwGBps), wrongText(row.inPlace->wrong))
          : groupColumns("n/a", "n/a", "n/a", "n/a");
  const std::string baseline = row.baselineTimeUs ? fmt::format("{:.1f}", *row.baselineTimeUs) : "n/a";
  const std::optional<double> ratio = speedup(row);
  const std::string ratioText = ratio ? fmt::format("{:.2f}", *ratio) : "n/a";
  return fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {}  {}  {:>11}  {:>7}\n", row.bytes, row.count,
                     dataTypeName(row.dtype), opName(row), outOfPlace, inPlace, baseline, ratioText);
}

std::string tableFooter(const std::vector<ResultRow>& rows) {
  std::optional<std::uint64_t> outOfPlaceWrong;
  std::optional<std::uint64_t> inPlaceWrong;
  std::optional<std::uint64_t> baselineWrong;
  const auto add = [](std::optional<std::uint64_t>& sum, const std::optional<std::uint64_t>& value) {
    if (value) sum = sum.value_or(0) + *value;
  };
  // Like nccl-tests, the average runs over every measured group: out-of-place and in-place.
  double busbwSum = 0.0;
  std::size_t groups = 0;
  for (const ResultRow& row : rows) {
    add(outOfPlaceWrong, row.wrong);
    add(baselineWrong, row.baselineWrong);
    busbwSum += row.busbwGBps;
    ++groups;
    if (!row.inPlace) continue;
    add(inPlaceWrong, row.inPlace->wrong);
    busbwSum += row.inPlace->busbwGBps;
    ++groups;
  }
  std::optional<std::uint64_t> ours = outOfPlaceWrong;
  add(ours, inPlaceWrong);
  const double average = groups == 0 ? 0.0 : busbwSum / static_cast<double>(groups);
  return fmt::format(
      "# Wrong elements     : {} (out-of-place {}, in-place {}; baseline {})\n# Avg bus bandwidth  : {:.3f} GB/s\n",
      wrongText(ours), wrongText(outOfPlaceWrong), inPlaceText(rows, inPlaceWrong), wrongText(baselineWrong), average);
}

detail::Json reportJson(const RunInfo& info, const std::vector<ResultRow>& rows) {
  detail::Json json = detail::Json::object({{"collective", info.collective},
                                            {"nranks", info.nranks},
                                            {"backend", info.backend},
                                            {"mesh", info.mesh},
                                            {"axis", info.axis},
                                            {"group_size", info.groupSize},
                                            {"baseline", info.baseline},
                                            {"stat", info.stat},
                                            {"iters", info.iters},
                                            {"warmup_iters", info.warmupIters}});
  std::optional<std::uint64_t> baselineWrong;
  detail::Json rowsJson = detail::Json::array();
  for (const ResultRow& row : rows) {
    if (row.baselineWrong) baselineWrong = baselineWrong.value_or(0) + *row.baselineWrong;
    detail::Json item = detail::Json::object({{"bytes", static_cast<std::uint64_t>(row.bytes)},
                                              {"count", static_cast<std::uint64_t>(row.count)},
                                              {"dtype", dataTypeName(row.dtype)},
                                              {"op", opName(row)},
                                              {"time_us", row.timeUs},
                                              {"algbw_gbps", row.algbwGBps},
                                              {"busbw_gbps", row.busbwGBps},
                                              {"wrong", optionalJson(row.wrong)}});
    addInPlaceJson(item, row.inPlace);
    item["baseline_time_us"] = optionalJson(row.baselineTimeUs);
    item["speedup"] = optionalJson(speedup(row));
    rowsJson.push_back(std::move(item));
  }
  json["baseline_wrong"] = optionalJson(baselineWrong);
  json["rows"] = std::move(rowsJson);
  return json;
}

}  // namespace chimera::bench
