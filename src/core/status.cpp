// SPDX-License-Identifier: Apache-2.0
// Implements Status: codes, names and messages.
#include "chimera/status.hpp"

namespace chimera {

std::string_view statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::Ok: return "ok";
    case StatusCode::InvalidArgument: return "invalid argument";
    case StatusCode::Unsupported: return "unsupported";
    case StatusCode::Mismatch: return "mismatch between ranks";
    case StatusCode::BackendError: return "backend error";
    case StatusCode::Timeout: return "timeout";
    case StatusCode::Internal: return "internal error";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (isOk()) return "ok";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

}  // namespace chimera
