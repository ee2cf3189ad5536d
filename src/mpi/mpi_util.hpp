// SPDX-License-Identifier: Apache-2.0
// MPI plumbing shared by the MPI backend's files: error translation and type mapping.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <string_view>

#include "chimera/mpi_backend.hpp"
#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::detail {

/// Ok when `rc` is MPI_SUCCESS, else BackendError (public: chimera/mpi_backend.hpp).
using ::chimera::mpiStatus;

/// The MPI datatype that moves `dtype`: the native type, or MPI_UINT16_T for f16/bf16
/// (which MPI cannot reduce; see `mpiReduceOp`).
MPI_Datatype mpiDataType(DataType dtype);

/// The MPI_Op that reduces `dtype` with `op` inside the MPI library: a predefined op for
/// native types, one of chimera's user ops (backed by host_reduce) for f16/bf16. Avg maps to
/// the Sum op; the caller divides afterwards. Requires `createUserOps()` to have run.
MPI_Op mpiReduceOp(DataType dtype, ReduceOp op);

/// Creates the user MPI_Ops for f16/bf16 once per process (idempotent; after MPI_Init).
[[nodiscard]] Status createUserOps();

/// Largest element count one MPI call takes (its count argument is an int).
inline constexpr std::size_t kMaxMpiCount = static_cast<std::size_t>(INT_MAX);

}  // namespace chimera::detail
