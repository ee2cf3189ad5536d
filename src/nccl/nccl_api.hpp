// SPDX-License-Identifier: Apache-2.0
// The NCCL entry points newer than NCCL 2.7, looked up at run time (dlsym on the libnccl
// already loaded) instead of linked: libchimera then loads with any libnccl.so.2, and an old
// one gives a clear Unsupported at backend creation. Everything older is linked directly
// (tests/gpu checks that libchimera references no other NCCL symbol).
#pragma once

#include <nccl.h>

#include "chimera/status.hpp"
#include "nccl/nccl_version.hpp"

namespace chimera::detail {

/// The NCCL library found at run time: its features and the entry points looked up in it.
struct NcclApi {
  NcclFeatures features;
  decltype(&ncclCommInitRankConfig) commInitRankConfig = nullptr;  ///< 2.14
  decltype(&ncclCommSplit) commSplit = nullptr;                    ///< 2.18
  decltype(&ncclCommFinalize) commFinalize = nullptr;              ///< 2.14
  decltype(&ncclGetLastError) getLastError = nullptr;              ///< 2.13
  decltype(&ncclAlltoAll) allToAll = nullptr;                      ///< 2.28; null when older
};

/// The process-wide NcclApi, resolved once (thread-safe). Unsupported when the library is
/// older than kMinimumNcclVersion or lacks an entry point its version promises;
/// BackendError when ncclGetVersion fails.
[[nodiscard]] Status ncclApi(const NcclApi*& out);

/// ncclGetLastError of the loaded library when it has one, else "".
const char* ncclLastError();

}  // namespace chimera::detail
