// SPDX-License-Identifier: Apache-2.0
// AllToAll: block j of member i's send lands in block i of member j's recv (paramCount
// elements per block). Baseline MPI_Alltoall.
#include "core/check.hpp"
#include "runner.hpp"

namespace chimera::bench {
namespace {

class AllToAllRunner final : public CollectiveRunner {
 public:
  explicit AllToAllRunner(const GroupContext& context) : context_(context) {}

  Status runOurs(const RowCase& row, const void* send, void* recv) override {
    return context_.backend->allToAll(send, recv, row.shape.paramCount, row.dtype, context_.axes);
  }

  Status runBaseline(const RowCase& row, const void* send, void* recv) override {
    int count = 0;
    CHIMERA_RETURN_IF_ERROR(mpiCount(row.shape.sendCount, count));
    CHIMERA_RETURN_IF_ERROR(mpiCount(row.shape.paramCount, count));
    const MPI_Datatype type = mpiDataType(row.dtype);
    return mpiStatus(MPI_Alltoall(send, count, type, recv, count, type, context_.comm), "MPI_Alltoall");
  }

  double expected(const InputPattern& inputs, const RowCase& row, std::size_t index) const override {
    const std::size_t block = row.shape.paramCount;
    const std::size_t sourceIndex = static_cast<std::size_t>(context_.groupIndex) * block + index % block;
    return inputs.value(static_cast<int>(index / block), sourceIndex);
  }

 private:
  const GroupContext& context_;
};

}  // namespace

std::unique_ptr<CollectiveRunner> makeAllToAllRunner(const GroupContext& context) {
  return std::make_unique<AllToAllRunner>(context);
}

}  // namespace chimera::bench
