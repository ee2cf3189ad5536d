// SPDX-License-Identifier: Apache-2.0
// Profile files: a Topology as JSON, in SI units so that a save/load round trip is exact.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "chimera/planning/topology.hpp"
#include "common/json.hpp"
#include "core/check.hpp"

namespace chimera {

namespace {

using detail::Json;

constexpr std::string_view kFormat = "chimera-topology-1";

// The keys of "transfer_factors": the op table's keywords of kTransferKinds.
constexpr auto kTransferKindNames = [] {
  std::array<std::string_view, kTransferKinds.size()> names{};
  for (std::size_t i = 0; i < kTransferKinds.size(); ++i) names[i] = opKindName(kTransferKinds[i]);
  return names;
}();

Json linkToJson(const LinkParams& link) {
  return Json::object({{"alpha_s", link.alphaSeconds}, {"bandwidth_bytes_per_s", link.bytesPerSecond}});
}

// Reads fields of one JSON object, naming the full path of a field in every error.
class FieldReader {
 public:
  FieldReader(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

  Status checkKnown(std::initializer_list<std::string_view> known) const {
    return checkKnown(std::span<const std::string_view>(known.begin(), known.size()));
  }

  Status checkKnown(std::span<const std::string_view> known) const {
    CHIMERA_CHECK_ARG(object_.is_object(), "{} must be a JSON object", path_);
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool found = false;
      for (const std::string_view name : known) found = found || it.key() == name;
      CHIMERA_CHECK_ARG(found, "unknown field '{}{}'", prefix(), it.key());
    }
    return Status::ok();
  }

  // Missing optional fields leave `out` unchanged.
  Status number(std::string_view key, bool required, double& out) const {
    return scalar(
        key, required, "a number", [](const Json& v) { return v.is_number(); }, out);
  }

  Status integer(std::string_view key, bool required, int& out) const {
    const Json* value = detail::findMember(object_, key);
    if (value == nullptr) return missing(key, required);
    const std::optional<std::int64_t> number = detail::intValue(*value);
    CHIMERA_CHECK_ARG(
        number && *number >= std::numeric_limits<int>::min() && *number <= std::numeric_limits<int>::max(),
        "field '{}{}' must be an integer, got {}", prefix(), key, detail::dumpJson(*value));
    out = static_cast<int>(*number);
    return Status::ok();
  }

  Status string(std::string_view key, bool required, std::string& out) const {
    return scalar(
        key, required, "a string", [](const Json& v) { return v.is_string(); }, out);
  }

  Status boolean(std::string_view key, bool required, bool& out) const {
    return scalar(
        key, required, "true or false", [](const Json& v) { return v.is_boolean(); }, out);
  }

  Status link(std::string_view key, bool required, LinkParams& out) const {
    const Json* value = detail::findMember(object_, key);
    if (value == nullptr) return missing(key, required);
    const FieldReader reader(*value, prefix() + std::string(key));
    CHIMERA_RETURN_IF_ERROR(reader.checkKnown({"alpha_s", "bandwidth_bytes_per_s"}));
    CHIMERA_RETURN_IF_ERROR(reader.number("alpha_s", true, out.alphaSeconds));
    return reader.number("bandwidth_bytes_per_s", true, out.bytesPerSecond);
  }

  Status device(std::string_view key, DeviceParams& out) const {
    const Json* value = detail::findMember(object_, key);
    if (value == nullptr) return Status::ok();
    const FieldReader reader(*value, prefix() + std::string(key));
    CHIMERA_RETURN_IF_ERROR(reader.checkKnown({"memory_bytes_per_s", "launch_s", "peak_flops_per_s"}));
    CHIMERA_RETURN_IF_ERROR(reader.number("memory_bytes_per_s", false, out.memoryBytesPerSecond));
    CHIMERA_RETURN_IF_ERROR(reader.number("launch_s", false, out.launchSeconds));
    return reader.number("peak_flops_per_s", false, out.peakFlopsPerSecond);
  }

  // Optional; a missing primitive keeps its factor of 1.
  Status transferFactors(std::string_view key, TransferFactors& out) const {
    const Json* value = detail::findMember(object_, key);
    if (value == nullptr) return Status::ok();
    const FieldReader reader(*value, prefix() + std::string(key));
    CHIMERA_RETURN_IF_ERROR(reader.checkKnown(kTransferKindNames));
    for (std::size_t i = 0; i < kTransferKinds.size(); ++i) {
      CHIMERA_RETURN_IF_ERROR(reader.number(kTransferKindNames[i], false, out.values[i]));
    }
    return Status::ok();
  }

  // Optional: the domain of every rank, an array of integers.
  Status domains(std::string_view key, std::vector<int>& out) const {
    const Json* value = detail::findMember(object_, key);
    if (value == nullptr) return Status::ok();
    CHIMERA_CHECK_ARG(value->is_array() && !value->empty(), "field '{}{}' must be a non-empty array of integers",
                      prefix(), key);
    std::vector<int> list;
    list.reserve(value->size());
    for (const Json& item : *value) {
      const std::optional<std::int64_t> number = detail::intValue(item);
      CHIMERA_CHECK_ARG(number && *number >= 0 && *number < kMaxTopologyRanks,
                        "field '{}{}' must list integers in 0..{}, got {}", prefix(), key, kMaxTopologyRanks - 1,
                        detail::dumpJson(item));
      list.push_back(static_cast<int>(*number));
    }
    out = std::move(list);
    return Status::ok();
  }

  Status calibration(std::string_view key, CalibrationInfo& out) const {
    const Json* value = detail::findMember(object_, key);
    if (value == nullptr) return Status::ok();
    const FieldReader reader(*value, prefix() + std::string(key));
    CHIMERA_RETURN_IF_ERROR(reader.checkKnown({"samples", "rms_relative_error"}));
    CHIMERA_RETURN_IF_ERROR(reader.integer("samples", true, out.samples));
    return reader.number("rms_relative_error", true, out.rmsRelativeError);
  }

 private:
  // A field of one JSON type read as T; `what` names the type in the error.
  template <typename T, typename IsType>
  Status scalar(std::string_view key, bool required, std::string_view what, IsType isType, T& out) const {
    const Json* value = detail::findMember(object_, key);
    if (value == nullptr) return missing(key, required);
    CHIMERA_CHECK_ARG(isType(*value), "field '{}{}' must be {}, got {}", prefix(), key, what, detail::dumpJson(*value));
    out = value->get<T>();
    return Status::ok();
  }

  std::string prefix() const { return path_.empty() ? std::string() : path_ + "."; }
  Status missing(std::string_view key, bool required) const {
    if (!required) return Status::ok();
    return Status::invalidArgument(fmt::format("missing field '{}{}'", prefix(), key));
  }

  const Json& object_;
  std::string path_;
};

}  // namespace

std::string topologyToJson(const Topology& t) {
  Json json =
      Json::object({{"format", kFormat}, {"name", t.name}, {"fabric", fabricName(t.fabric)}, {"ranks", t.ranks}});
  // Blocks of consecutive ranks keep the ranks_per_domain form; any other placement lists the
  // domain of every rank.
  if (t.domains.empty()) {
    json["ranks_per_domain"] = t.ranksPerDomain;
  } else {
    json["domains"] = t.domains;
  }
  json.update(Json::object({{"local_link", linkToJson(t.local)},
                            {"cross_link", linkToJson(t.cross)},
                            {"peer_penalty", t.peerPenalty},
                            {"reduce_s_per_byte", t.reduceSecondsPerByte},
                            {"compute_slots", t.computeSlots},
                            {"step_s", t.stepSeconds},
                            {"peer_s", t.peerSeconds},
                            {"fusion_margin", t.fusionMargin},
                            {"moves_boxes", t.movesBoxes},
                            {"device", Json::object({{"memory_bytes_per_s", t.device.memoryBytesPerSecond},
                                                     {"launch_s", t.device.launchSeconds},
                                                     {"peak_flops_per_s", t.device.peakFlopsPerSecond}})}}));
  Json factors = Json::object();
  for (std::size_t i = 0; i < kTransferKinds.size(); ++i) {
    factors[std::string(kTransferKindNames[i])] = t.transferFactors.values[i];
  }
  json["transfer_factors"] = std::move(factors);
  if (t.calibration.samples > 0) {
    json["calibration"] =
        Json::object({{"samples", t.calibration.samples}, {"rms_relative_error", t.calibration.rmsRelativeError}});
  }
  return detail::dumpJson(json, 2);
}

Status topologyFromJson(std::string_view text, Topology& out) {
  Json json;
  CHIMERA_RETURN_IF_ERROR(detail::parseJson(text, json));
  const FieldReader reader(json, "");
  CHIMERA_RETURN_IF_ERROR(
      reader.checkKnown({"format", "name", "fabric", "ranks", "ranks_per_domain", "domains", "local_link", "cross_link",
                         "peer_penalty", "reduce_s_per_byte", "compute_slots", "step_s", "peer_s", "fusion_margin",
                         "moves_boxes", "transfer_factors", "device", "calibration"}));
  std::string format;
  CHIMERA_RETURN_IF_ERROR(reader.string("format", true, format));
  CHIMERA_CHECK_ARG(format == kFormat, "field 'format' is '{}', expected '{}'", format, kFormat);
  Topology t;
  std::string fabric;
  CHIMERA_RETURN_IF_ERROR(reader.string("name", true, t.name));
  CHIMERA_RETURN_IF_ERROR(reader.string("fabric", true, fabric));
  CHIMERA_RETURN_IF_ERROR(parseFabric(fabric, t.fabric));
  CHIMERA_RETURN_IF_ERROR(reader.integer("ranks", true, t.ranks));
  CHIMERA_RETURN_IF_ERROR(reader.domains("domains", t.domains));
  CHIMERA_RETURN_IF_ERROR(reader.integer("ranks_per_domain", t.domains.empty(), t.ranksPerDomain));
  CHIMERA_RETURN_IF_ERROR(reader.link("local_link", true, t.local));
  CHIMERA_RETURN_IF_ERROR(reader.link("cross_link", false, t.cross));
  CHIMERA_RETURN_IF_ERROR(reader.number("peer_penalty", false, t.peerPenalty));
  CHIMERA_RETURN_IF_ERROR(reader.number("reduce_s_per_byte", false, t.reduceSecondsPerByte));
  CHIMERA_RETURN_IF_ERROR(reader.integer("compute_slots", false, t.computeSlots));
  CHIMERA_RETURN_IF_ERROR(reader.number("step_s", false, t.stepSeconds));
  CHIMERA_RETURN_IF_ERROR(reader.number("peer_s", false, t.peerSeconds));
  CHIMERA_RETURN_IF_ERROR(reader.number("fusion_margin", false, t.fusionMargin));
  CHIMERA_RETURN_IF_ERROR(reader.boolean("moves_boxes", false, t.movesBoxes));
  CHIMERA_RETURN_IF_ERROR(reader.transferFactors("transfer_factors", t.transferFactors));
  CHIMERA_RETURN_IF_ERROR(reader.device("device", t.device));
  CHIMERA_RETURN_IF_ERROR(reader.calibration("calibration", t.calibration));
  CHIMERA_RETURN_IF_ERROR(validateTopology(t));
  out = std::move(t);
  return Status::ok();
}

}  // namespace chimera
