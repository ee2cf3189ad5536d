// SPDX-License-Identifier: Apache-2.0
// Parsing of the NCCL backend's environment variables.
#include "nccl/nccl_options.hpp"

#include <cstdint>
#include <string>

#include "common/env.hpp"
#include "core/check.hpp"
#include "job/job_end.hpp"

namespace chimera::detail {

Status ncclBackendOptionsFromEnv(NcclBackendOptions& out) {
  out = NcclBackendOptions{};
  CHIMERA_RETURN_IF_ERROR(checkArgsFromEnv(out.checkArgs));
  std::int64_t timeoutMs = 0;
  CHIMERA_RETURN_IF_ERROR(timeoutMsFromEnv(timeoutMs));
  out.timeout = std::chrono::milliseconds(timeoutMs);
  static constexpr std::string_view kModes[] = {"native", "grouped"};
  std::size_t mode = 0;
  CHIMERA_RETURN_IF_ERROR(readEnvChoice("CHIMERA_NCCL_ALLTOALL", kModes, mode));
  out.groupedAllToAll = mode == 1;
  CHIMERA_RETURN_IF_ERROR(abortOnTimeoutFromEnv(out.abortOnTimeout));
  std::string logLevel;
  return logLevelFromEnv(logLevel);
}

}  // namespace chimera::detail
