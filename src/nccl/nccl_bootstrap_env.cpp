// SPDX-License-Identifier: Apache-2.0
// Reading and writing the launcher environment of an NCCL world (see nccl_bootstrap_env.hpp).
#include "nccl/nccl_bootstrap_env.hpp"

#include <fmt/format.h>

#include "common/env.hpp"
#include "core/check.hpp"

namespace chimera::detail {
namespace {

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string uniqueIdToHex(const NcclUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * id.bytes.size());
  for (const char byte : id.bytes) {
    const auto value = static_cast<unsigned char>(byte);
    text += kDigits[value >> 4];
    text += kDigits[value & 15];
  }
  return text;
}

Status uniqueIdFromHex(std::string_view text, NcclUniqueId& out) {
  CHIMERA_CHECK_ARG(text.size() == 2 * kNcclUniqueIdBytes, "NCCL unique id has {} hex digits, expected {}", text.size(),
                    2 * kNcclUniqueIdBytes);
  for (std::size_t i = 0; i < kNcclUniqueIdBytes; ++i) {
    const int high = hexDigit(text[2 * i]);
    const int low = hexDigit(text[2 * i + 1]);
    CHIMERA_CHECK_ARG(high >= 0 && low >= 0, "NCCL unique id: '{}' at position {} is not a hex digit",
                      high < 0 ? text[2 * i] : text[2 * i + 1], high < 0 ? 2 * i : 2 * i + 1);
    out.bytes[i] = static_cast<char>(high * 16 + low);
  }
  return Status::ok();
}

Status readNcclBootstrapEnv(NcclBootstrapEnv& out) {
  out = NcclBootstrapEnv{};
  for (const char* name : {"CHIMERA_RANK", "CHIMERA_WORLD_SIZE"}) {
    CHIMERA_CHECK_ARG(readEnvText(name).has_value(),
                      "{} is not set (start the ranks with chimera-rank-launch or set it)", name);
  }
  CHIMERA_RETURN_IF_ERROR(readEnvIndex("CHIMERA_RANK", 0, out.rank));
  CHIMERA_RETURN_IF_ERROR(readEnvIndex("CHIMERA_WORLD_SIZE", 0, out.worldSize));
  CHIMERA_RETURN_IF_ERROR(readEnvIndex("CHIMERA_LOCAL_RANK", out.rank, out.localRank));
  CHIMERA_RETURN_IF_ERROR(readEnvIndex("CHIMERA_LOCAL_WORLD_SIZE", out.worldSize, out.localWorldSize));
  CHIMERA_CHECK_ARG(out.worldSize >= 1 && out.rank < out.worldSize, "CHIMERA_RANK={} outside CHIMERA_WORLD_SIZE={}",
                    out.rank, out.worldSize);
  CHIMERA_CHECK_ARG(out.localWorldSize >= 1 && out.localRank < out.localWorldSize,
                    "CHIMERA_LOCAL_RANK={} outside CHIMERA_LOCAL_WORLD_SIZE={}", out.localRank, out.localWorldSize);
  const std::optional<std::string> id = readEnvText("CHIMERA_NCCL_UNIQUE_ID");
  CHIMERA_CHECK_ARG(id.has_value(), "CHIMERA_NCCL_UNIQUE_ID is not set");
  const Status parsed = uniqueIdFromHex(*id, out.id);
  if (!parsed.isOk()) return Status::invalidArgument("CHIMERA_NCCL_UNIQUE_ID: " + parsed.message());
  return Status::ok();
}

}  // namespace chimera::detail
