// SPDX-License-Identifier: Apache-2.0
// What the NCCL library loaded at run time can do, decided from ncclGetVersion instead of
// from the nccl.h chimera was compiled against: an older libnccl.so.2 must give a clear
// error or a fallback, never a failure to load libchimera. CUDA-free, so unit-testable.
#pragma once

#include <string>

#include "chimera/status.hpp"

namespace chimera::detail {

/// NCCL_VERSION(major, minor, patch) as NCCL encodes it since 2.9 (major*10000 + minor*100 + patch).
constexpr int ncclVersionCode(int major, int minor, int patch) { return major * 10000 + minor * 100 + patch; }

/// Oldest NCCL chimera runs on: 2.18 (ncclCommSplit, non-blocking communicators).
inline constexpr int kMinimumNcclVersion = ncclVersionCode(2, 18, 0);

/// Features of one NCCL library version.
struct NcclFeatures {
  /// The version code ncclGetVersion returned.
  int code = 0;
  /// "major.minor.patch".
  std::string text;
  /// ncclAlltoAll exists (2.28); else AllToAll runs as grouped ncclSend/ncclRecv.
  bool allToAll = false;
  /// ncclCommAbort of several communicators may sit inside one ncclGroupStart/End (2.22).
  bool groupedAbort = false;
  /// Several ranks may share one GPU with NCCL_MULTI_RANK_GPU_ENABLE=1 (2.31).
  bool multiRankPerGpu = false;
};

/// "major.minor.patch" of a version code; codes below 2.9 use NCCL's old encoding
/// (major*1000 + minor*100 + patch).
std::string ncclVersionText(int code);

/// Fills `out` for the library whose ncclGetVersion gave `code`. Unsupported naming the
/// version found and the minimum when the library is older than kMinimumNcclVersion.
[[nodiscard]] Status ncclFeaturesFor(int code, NcclFeatures& out);

}  // namespace chimera::detail
