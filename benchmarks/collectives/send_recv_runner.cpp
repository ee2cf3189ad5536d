// SPDX-License-Identifier: Apache-2.0
// SendRecv ring, as nccl-tests: member g sends its buffer to (g+1)%n and receives from
// (g-1+n)%n. Ours is one grouped point-to-point call; the baseline MPI_Sendrecv.
#include "core/check.hpp"
#include "runner.hpp"

namespace chimera::bench {
namespace {

constexpr int kTag = 7;

class SendRecvRunner final : public CollectiveRunner {
 public:
  explicit SendRecvRunner(const GroupContext& context) : context_(context) {}

  Status runOurs(const RowCase& row, const void* send, void* recv) override {
    const P2POp ops[2] = {
        {P2POp::Kind::Send, const_cast<void*>(send), row.shape.paramCount, row.dtype, worldRankOf(sendPeer())},
        {P2POp::Kind::Recv, recv, row.shape.paramCount, row.dtype, worldRankOf(recvPeer())},
    };
    return context_.backend->groupedP2P(ops);
  }

  Status runBaseline(const RowCase& row, const void* send, void* recv) override {
    int count = 0;
    CHIMERA_RETURN_IF_ERROR(mpiCount(row.shape.paramCount, count));
    const MPI_Datatype type = mpiDataType(row.dtype);
    return mpiStatus(MPI_Sendrecv(send, count, type, sendPeer(), kTag, recv, count, type, recvPeer(), kTag,
                                  context_.comm, MPI_STATUS_IGNORE),
                     "MPI_Sendrecv");
  }

  double expected(const InputPattern& inputs, const RowCase& /*row*/, std::size_t index) const override {
    return inputs.value(recvPeer(), index);
  }

 private:
  int sendPeer() const { return (context_.groupIndex + 1) % context_.groupSize(); }
  int recvPeer() const { return (context_.groupIndex - 1 + context_.groupSize()) % context_.groupSize(); }
  int worldRankOf(int member) const { return context_.groupRanks[static_cast<std::size_t>(member)]; }

  const GroupContext& context_;
};

}  // namespace

std::unique_ptr<CollectiveRunner> makeSendRecvRunner(const GroupContext& context) {
  return std::make_unique<SendRecvRunner>(context);
}

}  // namespace chimera::bench
