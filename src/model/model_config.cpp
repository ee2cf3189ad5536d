// SPDX-License-Identifier: Apache-2.0
// Model and parallel configurations of the whole-model analysis: the built-in models, the
// JSON model file, the "dp=2,tp=4" parallel text and their cross-checks.
#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>

#include "chimera/planning/training_model.hpp"
#include "common/json.hpp"
#include "core/check.hpp"

namespace chimera {
namespace {

constexpr std::string_view kModelFormat = "chimera-model-1";

// GPT-2 medium (Radford et al. 2019): 24 layers, width 1024, 16 heads, context 1024.
ModelConfig gpt2Medium() {
  ModelConfig m;
  m.name = "gpt2-medium";
  m.layers = 24;
  m.hidden = 1024;
  m.heads = 16;
  m.seqLength = 1024;
  m.microBatch = 8;
  return m;
}

// GPT-2 medium with a Switch/GShard-style MoE MLP in every second layer: 8 experts, top-2.
ModelConfig gptMoe() {
  ModelConfig m = gpt2Medium();
  m.name = "gpt-moe";
  m.experts = 8;
  m.topK = 2;
  m.moeEvery = 2;
  return m;
}

Status readText(const std::string& path, std::string& out) {
  std::ifstream file(path, std::ios::binary);
  CHIMERA_CHECK_ARG(file.good(), "model '{}' is neither a built-in model ({}) nor a readable file", path,
                    fmt::join(modelPresetNames(), ", "));
  std::ostringstream text;
  text << file.rdbuf();
  out = text.str();
  return Status::ok();
}

Status intField(const detail::Json& json, std::string_view key, bool required, int& out) {
  const detail::Json* value = detail::findMember(json, key);
  if (value == nullptr) {
    CHIMERA_CHECK_ARG(!required, "missing field '{}'", key);
    return Status::ok();
  }
  const std::optional<std::int64_t> number = detail::intValue(*value);
  CHIMERA_CHECK_ARG(number && *number >= 0 && *number <= (1LL << 30),
                    "field '{}' must be a non-negative integer, got {}", key, detail::dumpJson(*value));
  out = static_cast<int>(*number);
  return Status::ok();
}

Status modelFromJson(std::string_view text, ModelConfig& out) {
  detail::Json json;
  CHIMERA_RETURN_IF_ERROR(detail::parseJson(text, json));
  CHIMERA_CHECK_ARG(json.is_object(), "a model file is one JSON object");
  static constexpr std::string_view kKnown[] = {"format",     "name",       "layers",      "hidden",    "heads",
                                                "seq_length", "ffn_hidden", "micro_batch", "dtype",     "experts",
                                                "top_k",      "moe_every",  "imbalance",   "dispatcher"};
  for (auto it = json.begin(); it != json.end(); ++it) {
    bool known = false;
    for (const std::string_view k : kKnown) known = known || it.key() == k;
    CHIMERA_CHECK_ARG(known, "unknown field '{}'", it.key());
  }
  const detail::Json* format = detail::findMember(json, "format");
  CHIMERA_CHECK_ARG(format != nullptr && format->is_string() && format->get<std::string>() == kModelFormat,
                    "field 'format' must be \"{}\"", kModelFormat);
  ModelConfig m;
  const detail::Json* name = detail::findMember(json, "name");
  CHIMERA_CHECK_ARG(name != nullptr && name->is_string(), "field 'name' must be a string");
  m.name = name->get<std::string>();
  CHIMERA_RETURN_IF_ERROR(intField(json, "layers", true, m.layers));
  CHIMERA_RETURN_IF_ERROR(intField(json, "hidden", true, m.hidden));
  CHIMERA_RETURN_IF_ERROR(intField(json, "heads", true, m.heads));
  CHIMERA_RETURN_IF_ERROR(intField(json, "seq_length", true, m.seqLength));
  CHIMERA_RETURN_IF_ERROR(intField(json, "ffn_hidden", false, m.ffnHidden));
  CHIMERA_RETURN_IF_ERROR(intField(json, "micro_batch", false, m.microBatch));
  CHIMERA_RETURN_IF_ERROR(intField(json, "experts", false, m.experts));
  CHIMERA_RETURN_IF_ERROR(intField(json, "top_k", false, m.topK));
  CHIMERA_RETURN_IF_ERROR(intField(json, "moe_every", false, m.moeEvery));
  if (const detail::Json* imbalance = detail::findMember(json, "imbalance"); imbalance != nullptr) {
    CHIMERA_CHECK_ARG(imbalance->is_number(), "field 'imbalance' must be a number (max / mean load), got {}",
                      detail::dumpJson(*imbalance));
    m.imbalance = imbalance->get<double>();
  }
  if (const detail::Json* dispatcher = detail::findMember(json, "dispatcher"); dispatcher != nullptr) {
    CHIMERA_CHECK_ARG(dispatcher->is_string(), "field 'dispatcher' must be a string");
    CHIMERA_RETURN_IF_ERROR(parseMoeDispatcher(dispatcher->get<std::string>(), m.dispatcher));
  }
  if (const detail::Json* dtype = detail::findMember(json, "dtype"); dtype != nullptr) {
    CHIMERA_CHECK_ARG(dtype->is_string(), "field 'dtype' must be a string");
    CHIMERA_RETURN_IF_ERROR(parseDataType(dtype->get<std::string>(), m.dtype));
  }
  out = std::move(m);
  return Status::ok();
}

}  // namespace

std::string_view moeDispatcherName(MoeDispatcher dispatcher) {
  return dispatcher == MoeDispatcher::AllGather ? "allgather" : "alltoall";
}

Status parseMoeDispatcher(std::string_view text, MoeDispatcher& out) {
  for (const MoeDispatcher d : {MoeDispatcher::AllToAll, MoeDispatcher::AllGather}) {
    if (text == moeDispatcherName(d)) {
      out = d;
      return Status::ok();
    }
  }
  return Status(StatusCode::InvalidArgument,
                fmt::format("MoE dispatcher '{}' is not one of alltoall, allgather", text));
}

std::vector<std::string> modelPresetNames() { return {"gpt2-medium", "gpt-moe"}; }

Status loadModelConfig(std::string_view nameOrPath, ModelConfig& out) {
  if (nameOrPath == "gpt2-medium") {
    out = gpt2Medium();
    return Status::ok();
  }
  if (nameOrPath == "gpt-moe") {
    out = gptMoe();
    return Status::ok();
  }
  const std::string path(nameOrPath);
  std::string text;
  CHIMERA_RETURN_IF_ERROR(readText(path, text));
  const Status status = modelFromJson(text, out);
  if (!status.isOk()) return Status(status.code(), fmt::format("model file '{}': {}", path, status.message()));
  return Status::ok();
}

Status parseParallelConfig(std::string_view text, ParallelConfig& out) {
  ParallelConfig p;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(begin, end - begin);
    const std::size_t eq = item.find('=');
    CHIMERA_CHECK_ARG(eq != std::string_view::npos, "parallel config item '{}' is not KEY=N", item);
    const std::string_view key = item.substr(0, eq);
    const std::string_view digits = item.substr(eq + 1);
    int value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    CHIMERA_CHECK_ARG(ec == std::errc() && ptr == digits.data() + digits.size() && value >= 1,
                      "parallel config item '{}': expected a positive integer", item);
    int* slot = key == "dp"             ? &p.dp
                : key == "tp"           ? &p.tp
                : key == "sp"           ? &p.sp
                : key == "pp"           ? &p.pp
                : key == "ep"           ? &p.ep
                : key == "microbatches" ? &p.microbatches
                                        : nullptr;
    CHIMERA_CHECK_ARG(slot != nullptr, "parallel config key '{}' is not one of dp, tp, sp, pp, ep, microbatches", key);
    *slot = value;
    begin = end + 1;
  }
  out = p;
  return Status::ok();
}

Status validateModel(const ModelConfig& m, const ParallelConfig& p, const Topology& topology) {
  CHIMERA_CHECK_ARG(m.layers >= 1 && m.hidden >= 1 && m.heads >= 1 && m.seqLength >= 1 && m.microBatch >= 1,
                    "model '{}': layers, hidden, heads, seq_length and micro_batch must be >= 1", m.name);
  CHIMERA_CHECK_ARG(m.hidden % m.heads == 0, "model '{}': hidden {} is not divisible by {} heads", m.name, m.hidden,
                    m.heads);
  CHIMERA_CHECK_ARG(m.experts >= 0 && m.moeEvery >= 1 && (m.experts == 0 || (m.topK >= 1 && m.topK <= m.experts)),
                    "model '{}': needs experts >= 0, moe_every >= 1 and 1 <= top_k <= experts", m.name);
  CHIMERA_CHECK_ARG(p.dp >= 1 && p.tp >= 1 && p.pp >= 1 && p.ep >= 1 && p.microbatches >= 1,
                    "parallel sizes must be >= 1");
  CHIMERA_CHECK_ARG(p.sp == 1 || p.sp == p.tp,
                    "sp={} must be 1 or equal tp={}: sequence parallelism runs on the tensor-parallel group", p.sp,
                    p.tp);
  CHIMERA_CHECK_ARG(m.heads % p.tp == 0, "{} heads are not divisible by tp={}", m.heads, p.tp);
  const int ffn = m.ffnHidden > 0 ? m.ffnHidden : 4 * m.hidden;
  CHIMERA_CHECK_ARG(ffn % p.tp == 0 && m.hidden % (p.tp * p.ep) == 0,
                    "ffn {} and hidden {} must divide by tp={} (hidden by tp x ep = {})", ffn, m.hidden, p.tp,
                    p.tp * p.ep);
  CHIMERA_CHECK_ARG(static_cast<std::int64_t>(m.seqLength) * m.microBatch % p.tp == 0,
                    "{} tokens per micro-batch are not divisible by tp={}", m.seqLength * m.microBatch, p.tp);
  CHIMERA_CHECK_ARG(m.layers % p.pp == 0, "{} layers are not divisible by pp={} stages", m.layers, p.pp);
  CHIMERA_CHECK_ARG(p.ep == 1 || m.experts > 0, "ep={} needs a model with experts", p.ep);
  CHIMERA_CHECK_ARG(m.experts == 0 || m.experts % (p.ep * p.tp) == 0,
                    "{} experts must divide by ep x tp = {} (each rank holds whole experts)", m.experts, p.ep * p.tp);
  CHIMERA_CHECK_ARG(m.experts == 0 || (m.imbalance >= 1 && m.imbalance <= p.ep * p.tp),
                    "imbalance {} (max / mean load) must lie in [1, ep x tp = {}]", m.imbalance, p.ep * p.tp);
  CHIMERA_RETURN_IF_ERROR(validateTopology(topology));
  CHIMERA_CHECK_ARG(p.ranks() <= topology.ranks,
                    "the split needs {} GPUs (dp {} x pp {} x ep {} x tp {}) but topology '{}' has {}", p.ranks(), p.dp,
                    p.pp, p.ep, p.tp, topology.name, topology.ranks);
  CHIMERA_CHECK_ARG(topology.device.peakFlopsPerSecond > 0 && topology.device.memoryBytesPerSecond > 0,
                    "topology '{}' gives no device peak FLOP/s and memory bandwidth for the compute roofline",
                    topology.name);
  return Status::ok();
}

}  // namespace chimera
