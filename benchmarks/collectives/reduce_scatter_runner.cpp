// SPDX-License-Identifier: Apache-2.0
// ReduceScatter: member g receives block g (paramCount elements) of the op-reduction of
// every member's send. Baseline MPI_Reduce_scatter_block (avg: MPI_SUM, then a division).
#include "core/check.hpp"
#include "runner.hpp"

namespace chimera::bench {
namespace {

class ReduceScatterRunner final : public CollectiveRunner {
 public:
  explicit ReduceScatterRunner(const GroupContext& context) : context_(context) {}

  Status runOurs(const RowCase& row, const void* send, void* recv) override {
    return context_.backend->reduceScatter(send, recv, row.shape.paramCount, row.dtype, *row.op, context_.axes);
  }

  Status runBaseline(const RowCase& row, const void* send, void* recv) override {
    int count = 0;
    CHIMERA_RETURN_IF_ERROR(mpiCount(row.shape.sendCount, count));  // the whole send must fit too
    CHIMERA_RETURN_IF_ERROR(mpiCount(row.shape.paramCount, count));
    MPI_Op op = MPI_OP_NULL;
    CHIMERA_RETURN_IF_ERROR(baselineReduceOp(row.dtype, *row.op, op));
    CHIMERA_RETURN_IF_ERROR(
        mpiStatus(MPI_Reduce_scatter_block(send, recv, count, mpiDataType(row.dtype), op, context_.comm),
                  "MPI_Reduce_scatter_block"));
    if (*row.op == ReduceOp::Avg) finishAverage(recv, row.shape.paramCount, row.dtype, context_.groupSize());
    return Status::ok();
  }

  double expected(const InputPattern& inputs, const RowCase& row, std::size_t index) const override {
    return inputs.reduced(static_cast<std::size_t>(context_.groupIndex) * row.shape.paramCount + index);
  }

 private:
  const GroupContext& context_;
};

}  // namespace

std::unique_ptr<CollectiveRunner> makeReduceScatterRunner(const GroupContext& context) {
  return std::make_unique<ReduceScatterRunner>(context);
}

}  // namespace chimera::bench
