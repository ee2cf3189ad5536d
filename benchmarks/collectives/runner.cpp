// SPDX-License-Identifier: Apache-2.0
// Implements the per-collective runners' shared parts: ours vs the MPI baseline, checked.
#include "runner.hpp"

namespace chimera::bench {

std::unique_ptr<CollectiveRunner> createRunner(Collective collective, const GroupContext& context) {
  switch (collective) {
    case Collective::AllReduce: return makeAllReduceRunner(context);
    case Collective::ReduceScatter: return makeReduceScatterRunner(context);
    case Collective::AllGather: return makeAllGatherRunner(context);
    case Collective::AllToAll: return makeAllToAllRunner(context);
    case Collective::Broadcast: return makeBroadcastRunner(context);
    default: break;  // Send: the send/recv ring (parseCollective accepts nothing else)
  }
  return makeSendRecvRunner(context);
}

}  // namespace chimera::bench
