// SPDX-License-Identifier: Apache-2.0
// NCCL error checking (private): a failed call becomes a Status carrying NCCL's own message.
#pragma once

#include <nccl.h>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Status for NCCL result `result` of call `what`: InvalidArgument for ncclInvalidArgument and
/// ncclInvalidUsage, else BackendError; the message has ncclGetErrorString and the detail
/// of ncclGetLastError.
Status ncclStatus(ncclResult_t result, const char* what);

}  // namespace chimera::detail

/// Evaluates an NCCL call and returns its Status from the enclosing function unless it
/// returned ncclSuccess (or ncclInProgress, which non-blocking communicators report).
#define CHIMERA_NCCL_RETURN(expr)                                                      \
  do {                                                                                 \
    const ncclResult_t chimera_nccl_result_ = (expr);                                  \
    if (chimera_nccl_result_ != ncclSuccess && chimera_nccl_result_ != ncclInProgress) \
      return ::chimera::detail::ncclStatus(chimera_nccl_result_, #expr);               \
  } while (0)
