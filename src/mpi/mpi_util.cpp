// SPDX-License-Identifier: Apache-2.0
// Implements the MPI plumbing of the backend: error translation and type mapping.
#include "mpi/mpi_util.hpp"

#include <fmt/format.h>

#include <array>
#include <mutex>

#include "common/host_reduce.hpp"
#include "core/check.hpp"

namespace chimera::detail {
namespace {

// User ops for the 16-bit float formats, indexed [format (0 f16, 1 bf16)][baseOpIndex(op)].
std::array<std::array<MPI_Op, 4>, 2> gUserOps{};
std::once_flag gUserOpsOnce;
int gUserOpsRc = MPI_SUCCESS;

template <DataType kType, ReduceOp kOp>
void userReduce(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  reduceInto(inout, in, static_cast<std::size_t>(*len), kType, kOp);
}

template <DataType kType>
int createFor(std::array<MPI_Op, 4>& ops) {
  MPI_User_function* fns[] = {userReduce<kType, ReduceOp::Sum>, userReduce<kType, ReduceOp::Prod>,
                              userReduce<kType, ReduceOp::Min>, userReduce<kType, ReduceOp::Max>};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const int rc = MPI_Op_create(fns[i], /*commute=*/1, &ops[i]);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

std::size_t baseOpIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return 0;
    case ReduceOp::Prod: return 1;
    case ReduceOp::Min: return 2;
    case ReduceOp::Max: return 3;
  }
  CHIMERA_ASSERT(false && "unknown ReduceOp");
  return 0;
}

}  // namespace

MPI_Datatype mpiDataType(DataType dtype) {
  switch (dtype) {
    case DataType::F32: return MPI_FLOAT;
    case DataType::F64: return MPI_DOUBLE;
    case DataType::F16:
    case DataType::BF16: return MPI_UINT16_T;
    case DataType::I32: return MPI_INT32_T;
    case DataType::I64: return MPI_INT64_T;
    case DataType::U8: return MPI_UINT8_T;
  }
  CHIMERA_ASSERT(false && "unknown DataType");
  return MPI_DATATYPE_NULL;
}

MPI_Op mpiReduceOp(DataType dtype, ReduceOp op) {
  if (dtype == DataType::F16) return gUserOps[0][baseOpIndex(op)];
  if (dtype == DataType::BF16) return gUserOps[1][baseOpIndex(op)];
  switch (baseOpIndex(op)) {
    case 0: return MPI_SUM;
    case 1: return MPI_PROD;
    case 2: return MPI_MIN;
    default: return MPI_MAX;
  }
}

Status createUserOps() {
  std::call_once(gUserOpsOnce, [] {
    gUserOpsRc = createFor<DataType::F16>(gUserOps[0]);
    if (gUserOpsRc == MPI_SUCCESS) gUserOpsRc = createFor<DataType::BF16>(gUserOps[1]);
  });
  return mpiStatus(gUserOpsRc, "MPI_Op_create for f16/bf16 reductions");
}

}  // namespace chimera::detail

namespace chimera {

Status mpiStatus(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return Status::ok();
  std::array<char, MPI_MAX_ERROR_STRING> text{};
  int length = 0;
  if (MPI_Error_string(rc, text.data(), &length) != MPI_SUCCESS) length = 0;
  return Status::backendError(fmt::format("{}: {} (MPI error {})", what, std::string_view(text.data(), length), rc));
}

}  // namespace chimera
