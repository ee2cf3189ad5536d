// SPDX-License-Identifier: Apache-2.0
// Broadcast: every member's recv = the root member's send. Baseline MPI_Bcast, which on the
// root reads the send buffer in place (no copy into the root's recv; ours makes that copy).
#include "core/check.hpp"
#include "runner.hpp"

namespace chimera::bench {
namespace {

class BroadcastRunner final : public CollectiveRunner {
 public:
  explicit BroadcastRunner(const GroupContext& context) : context_(context) {}

  Status runOurs(const RowCase& row, const void* send, void* recv) override {
    return context_.backend->broadcast(send, recv, row.shape.paramCount, row.dtype, context_.root, context_.axes);
  }

  Status runBaseline(const RowCase& row, const void* send, void* recv) override {
    int count = 0;
    CHIMERA_RETURN_IF_ERROR(mpiCount(row.shape.paramCount, count));
    // MPI_Bcast only reads the root's buffer, so handing it the const send buffer is safe.
    void* buffer = isRoot() ? const_cast<void*>(send) : recv;
    return mpiStatus(MPI_Bcast(buffer, count, mpiDataType(row.dtype), context_.root, context_.comm), "MPI_Bcast");
  }

  double expected(const InputPattern& inputs, const RowCase& /*row*/, std::size_t index) const override {
    return inputs.value(context_.root, index);
  }

  const void* baselineResult(const void* send, const void* recv) const override { return isRoot() ? send : recv; }

 private:
  bool isRoot() const { return context_.groupIndex == context_.root; }

  const GroupContext& context_;
};

}  // namespace

std::unique_ptr<CollectiveRunner> makeBroadcastRunner(const GroupContext& context) {
  return std::make_unique<BroadcastRunner>(context);
}

}  // namespace chimera::bench
