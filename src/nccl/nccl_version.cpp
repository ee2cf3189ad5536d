// SPDX-License-Identifier: Apache-2.0
// Run-time NCCL feature decisions from the library's version code.
#include "nccl/nccl_version.hpp"

#include <fmt/format.h>

namespace chimera::detail {

std::string ncclVersionText(int code) {
  if (code < ncclVersionCode(2, 9, 0)) return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
}

Status ncclFeaturesFor(int code, NcclFeatures& out) {
  out = NcclFeatures{};
  out.code = code;
  out.text = ncclVersionText(code);
  if (code < kMinimumNcclVersion) {
    return Status::unsupported(
        fmt::format("the NCCL library loaded at run time is {}; chimera needs NCCL >= {} "
                    "(point LD_LIBRARY_PATH at a newer libnccl.so.2)",
                    out.text, ncclVersionText(kMinimumNcclVersion)));
  }
  out.allToAll = code >= ncclVersionCode(2, 28, 0);
  out.groupedAbort = code >= ncclVersionCode(2, 22, 0);
  out.multiRankPerGpu = code >= ncclVersionCode(2, 31, 0);
  return Status::ok();
}

}  // namespace chimera::detail
