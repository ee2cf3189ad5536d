// SPDX-License-Identifier: Apache-2.0
// AllGather: recv block j (paramCount elements) = member j's send. Baseline MPI_Allgather.
#include "core/check.hpp"
#include "runner.hpp"

namespace chimera::bench {
namespace {

class AllGatherRunner final : public CollectiveRunner {
 public:
  explicit AllGatherRunner(const GroupContext& context) : context_(context) {}

  Status runOurs(const RowCase& row, const void* send, void* recv) override {
    return context_.backend->allGather(send, recv, row.shape.paramCount, row.dtype, context_.axes);
  }

  Status runBaseline(const RowCase& row, const void* send, void* recv) override {
    int count = 0;
    CHIMERA_RETURN_IF_ERROR(mpiCount(row.shape.recvCount, count));
    CHIMERA_RETURN_IF_ERROR(mpiCount(row.shape.paramCount, count));
    const MPI_Datatype type = mpiDataType(row.dtype);
    return mpiStatus(MPI_Allgather(send, count, type, recv, count, type, context_.comm), "MPI_Allgather");
  }

  double expected(const InputPattern& inputs, const RowCase& row, std::size_t index) const override {
    const std::size_t block = row.shape.paramCount;
    return inputs.value(static_cast<int>(index / block), index % block);
  }

 private:
  const GroupContext& context_;
};

}  // namespace

std::unique_ptr<CollectiveRunner> makeAllGatherRunner(const GroupContext& context) {
  return std::make_unique<AllGatherRunner>(context);
}

}  // namespace chimera::bench
