// SPDX-License-Identifier: Apache-2.0
// Memory chimera stopped waiting for but cannot free (private): the buffers of requests
// abandoned after a Timeout, which a late peer may still complete into, and the words a peer
// may still read from this process. Kept reachable (not a leak) until the process exits.
#pragma once

#include <memory>

namespace chimera::detail {

/// Keeps `memory` alive until the process exits. Thread-safe.
void keepUntilExit(std::shared_ptr<void> memory);

}  // namespace chimera::detail
