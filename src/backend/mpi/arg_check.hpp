// SPDX-License-Identifier: Apache-2.0
// Argument checks of the MPI backend: local validation (before any communication) and the
// cross-rank agreement check (CHIMERA_CHECK_ARGS) that turns a would-be hang into a Status
// on every rank.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/mpi/mpi_group.hpp"
#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::detail {

/// Which collective a call is (part of its signature, so mismatched calls are caught too).
enum class CollectiveKind : std::uint8_t { AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast };

/// Name of a collective kind ("allReduce", ...).
const char* collectiveKindName(CollectiveKind kind);

/// What every member of a group must pass identically. Fields a collective does not use
/// stay at their defaults.
struct CallSignature {
  CollectiveKind kind = CollectiveKind::AllReduce;
  /// The call's count argument (elements).
  std::size_t count = 0;
  DataType dtype = DataType::F32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
};

/// InvalidArgument unless `dtype` is one of the DataType enumerators.
[[nodiscard]] Status checkDataType(DataType dtype);
/// InvalidArgument for an unknown ReduceOp, Unsupported when `op` is not defined on `dtype`.
[[nodiscard]] Status checkReduceOp(DataType dtype, ReduceOp op);
/// InvalidArgument "<what> is null but count is N" when `ptr` is null and count > 0.
[[nodiscard]] Status checkBuffer(const void* ptr, std::size_t count, const char* what);

/// Agreement check, collective over `group`: agreeOnWords (word_agreement.hpp) over the
/// signature and a "my arguments are valid" flag. Returns
/// `local` when it is an error; otherwise Mismatch naming each field whose values differ
/// (with their min and max), InvalidArgument when another member reported bad arguments,
/// BackendError when MPI fails, or Timeout (bounded_wait.hpp) when a member does not join.
/// The same verdict class reaches every member.
[[nodiscard]] Status agreeOnCall(const MpiGroup& group, const CallSignature& signature, const Status& local);

}  // namespace chimera::detail
