// SPDX-License-Identifier: Apache-2.0
// AllReduce: recv[i] = op over the group of send[i]. Baseline MPI_Allreduce (avg: MPI_SUM
// then a local division, included in the baseline's time).
#include "core/check.hpp"
#include "runner.hpp"

namespace chimera::bench {
namespace {

class AllReduceRunner final : public CollectiveRunner {
 public:
  explicit AllReduceRunner(const GroupContext& context) : context_(context) {}

  Status runOurs(const RowCase& row, const void* send, void* recv) override {
    return context_.backend->allReduce(send, recv, row.shape.paramCount, row.dtype, *row.op, context_.axes);
  }

  Status runBaseline(const RowCase& row, const void* send, void* recv) override {
    int count = 0;
    CHIMERA_RETURN_IF_ERROR(mpiCount(row.shape.paramCount, count));
    MPI_Op op = MPI_OP_NULL;
    CHIMERA_RETURN_IF_ERROR(baselineReduceOp(row.dtype, *row.op, op));
    CHIMERA_RETURN_IF_ERROR(
        mpiStatus(MPI_Allreduce(send, recv, count, mpiDataType(row.dtype), op, context_.comm), "MPI_Allreduce"));
    if (*row.op == ReduceOp::Avg) finishAverage(recv, row.shape.paramCount, row.dtype, context_.groupSize());
    return Status::ok();
  }

  double expected(const InputPattern& inputs, const RowCase& /*row*/, std::size_t index) const override {
    return inputs.reduced(index);
  }

 private:
  const GroupContext& context_;
};

}  // namespace

std::unique_ptr<CollectiveRunner> makeAllReduceRunner(const GroupContext& context) {
  return std::make_unique<AllReduceRunner>(context);
}

}  // namespace chimera::bench
