// SPDX-License-Identifier: Apache-2.0
// Implements the per-collective runners' shared parts: ours vs the MPI baseline, checked.
#include "runner.hpp"

#include <fmt/format.h>

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

Status mpiStatus(int code, const char* call) {
  if (code == MPI_SUCCESS) return Status::ok();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Status::backendError(
      fmt::format("{} failed: {}", call, std::string_view(text, static_cast<std::size_t>(length))));
}

}  // namespace chimera::bench
