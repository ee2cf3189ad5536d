// SPDX-License-Identifier: Apache-2.0
// torch.distributed's monitored_barrier on a process group's point-to-point channel.
#pragma once

#include <chrono>

#include "host_transport.hpp"

namespace chimera::torch_ext {

/// The monitored barrier of a group of `size` ranks, this one `rank`, over `p2p`'s reserved
/// tag, with the semantics torch specifies (gloo's): every rank other than 0 reports to rank 0,
/// which waits at most `timeout` for all of them and then answers each rank that arrived.
/// Rank 0 raises c10::Error "Rank R failed to pass monitoredBarrier in T ms" naming the first
/// rank (in rank order) that did not arrive, or every one of them ("Ranks 1, 3 failed ...")
/// with `waitAllRanks`; "Rank 0 timed out in monitoredBarrier after 0 ms" for a timeout <= 0.
/// A rank that arrived raises "Rank R successfully reached monitoredBarrier, but received
/// errors while waiting for send/recv from rank 0" when rank 0 answers that the barrier
/// failed (naming the rank that did not arrive), or when no answer comes within
/// `answerTimeout` (the group's timeout). Each rank raises on its own: nothing ends the job,
/// and the group stays usable.
void monitoredBarrier(HostPointToPoint& p2p, int rank, int size, std::chrono::milliseconds timeout,
                      std::chrono::milliseconds answerTimeout, bool waitAllRanks);

}  // namespace chimera::torch_ext
