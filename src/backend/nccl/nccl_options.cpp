// SPDX-License-Identifier: Apache-2.0
// Parsing of the NCCL backend's environment variables.
#include "backend/nccl/nccl_options.hpp"

#include <charconv>
#include <cstdint>
#include <cstdlib>

#include "common/check.hpp"
#include "common/env.hpp"

namespace chimera::detail {

Status parseTimeoutMs(std::string_view text, std::chrono::milliseconds& out) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  const bool digitsOnly = !text.empty() && text.front() >= '0' && text.front() <= '9';
  CHIMERA_CHECK_ARG(digitsOnly && error == std::errc() && stop == end && value > 0 && value <= kMaxNcclTimeout.count(),
                    "CHIMERA_TIMEOUT_MS='{}' is not a number of milliseconds in 1..{}", text,
                    kMaxNcclTimeout.count());
  out = std::chrono::milliseconds(value);
  return Status::ok();
}

Status ncclBackendOptionsFromEnv(NcclBackendOptions& out) {
  out = NcclBackendOptions{};
  CHIMERA_RETURN_IF_ERROR(checkArgsFromEnv(out.checkArgs));
  if (const char* text = std::getenv("CHIMERA_TIMEOUT_MS"); text != nullptr && *text != '\0') {
    CHIMERA_RETURN_IF_ERROR(parseTimeoutMs(text, out.timeout));
  }
  if (const char* mode = std::getenv("CHIMERA_NCCL_ALLTOALL"); mode != nullptr && *mode != '\0') {
    const std::string_view text(mode);
    CHIMERA_CHECK_ARG(text == "native" || text == "grouped", "CHIMERA_NCCL_ALLTOALL='{}' is not native or grouped",
                      text);
    out.groupedAllToAll = text == "grouped";
  }
  return Status::ok();
}

}  // namespace chimera::detail
