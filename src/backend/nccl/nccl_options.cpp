// SPDX-License-Identifier: Apache-2.0
// Parsing of the NCCL backend's environment variables.
#include "backend/nccl/nccl_options.hpp"

#include <cstdint>
#include <cstdlib>

#include "core/check.hpp"
#include "common/env.hpp"

namespace chimera::detail {

Status ncclBackendOptionsFromEnv(NcclBackendOptions& out) {
  out = NcclBackendOptions{};
  CHIMERA_RETURN_IF_ERROR(checkArgsFromEnv(out.checkArgs));
  std::int64_t timeoutMs = 0;
  CHIMERA_RETURN_IF_ERROR(timeoutMsFromEnv(timeoutMs));
  out.timeout = std::chrono::milliseconds(timeoutMs);
  if (const char* mode = std::getenv("CHIMERA_NCCL_ALLTOALL"); mode != nullptr && *mode != '\0') {
    const std::string_view text(mode);
    CHIMERA_CHECK_ARG(text == "native" || text == "grouped", "CHIMERA_NCCL_ALLTOALL='{}' is not native or grouped",
                      text);
    out.groupedAllToAll = text == "grouped";
  }
  return Status::ok();
}

}  // namespace chimera::detail
