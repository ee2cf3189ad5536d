// SPDX-License-Identifier: Apache-2.0
// Argument checks of the MPI backend: local validation (before any communication) and the
// cross-rank agreement check (CHIMERA_CHECK_ARGS) that turns a would-be hang into a Status
// on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chimera/status.hpp"
#include "chimera/types.hpp"
#include "common/agreement.hpp"
#include "mpi/mpi_group.hpp"

namespace chimera::detail {

/// InvalidArgument unless `dtype` is one of the DataType enumerators.
[[nodiscard]] Status checkDataType(DataType dtype);
/// InvalidArgument for an unknown ReduceOp, Unsupported when `op` is not defined on `dtype`.
[[nodiscard]] Status checkReduceOp(DataType dtype, ReduceOp op);
/// InvalidArgument "<what> is null but count is N" when `ptr` is null and count > 0.
[[nodiscard]] Status checkBuffer(const void* ptr, std::size_t count, const char* what);

/// Agreement check, collective over `group` (common/agreement.hpp's agreeOnCall on the
/// bounded MIN of word_agreement.hpp): `local` when it is an error, Mismatch naming the lowest
/// member that reported bad arguments, or naming this rank, the group and each field whose
/// values differ (with their min and max), BackendError when MPI fails, or Timeout when a
/// member does not join.
[[nodiscard]] Status agreeOnCall(const MpiGroup& group, const CallSignature& signature, const Status& local, int rank,
                                 std::string_view groupName);

}  // namespace chimera::detail
