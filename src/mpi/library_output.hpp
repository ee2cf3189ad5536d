// SPDX-License-Identifier: Apache-2.0
// Where a library collective of the MPI backend writes its output (private). MPI cannot cancel a
// collective: one abandoned on a Timeout completes when a late member arrives, and writes its
// output then, into memory the caller has had back since. When the backend returns its Timeouts
// (abortOnTimeout off), the output therefore goes to chimera's staging and is copied to the
// caller's memory once the collective completed; when a Timeout ends the job instead, the call
// never returns while MPI holds the caller's memory, and the output goes there directly.
#pragma once

#include <cstddef>
#include <cstring>

#include "mpi/bounded_wait.hpp"
#include "mpi/scratch_buffer.hpp"

namespace chimera::detail {

/// The output of one library collective: the caller's `bytes` at `caller`, staged or not.
class LibraryOutput {
 public:
  /// `staging`: the backend's (abandoned with it after a failure, never freed while MPI may
  /// write it); `staged`: whether the output goes through it.
  LibraryOutput(ScratchBuffer& staging, void* caller, std::size_t bytes, bool staged)
      : caller_(static_cast<std::byte*>(caller)),
        target_(staged && bytes > 0 ? static_cast<std::byte*>(staging.get(bytes)) : caller_),
        bytes_(bytes) {}

  /// Where MPI writes (the caller's pointer, maybe null, for an empty output).
  void* target() const { return target_; }
  /// False when the staging could not grow to the output's size.
  bool ready() const { return target_ != nullptr || bytes_ == 0; }
  /// What a wait on the collective lends (bounded_wait.hpp).
  Lends lends() const { return target_ == caller_ ? Lends::Caller : Lends::Chimera; }
  /// Copies `[offset, offset + bytes)` of the caller's memory into the target (a broadcast root's data).
  void load(std::size_t offset, std::size_t bytes) const {
    if (target_ != caller_ && bytes > 0) std::memcpy(target_ + offset, caller_ + offset, bytes);
  }
  /// Once the collective completed: copies `[offset, offset + bytes)` of the target to the caller.
  void deliver(std::size_t offset, std::size_t bytes) const {
    if (target_ != caller_ && bytes > 0) std::memcpy(caller_ + offset, target_ + offset, bytes);
  }
  /// deliver of the whole output.
  void deliver() const { deliver(0, bytes_); }

 private:
  std::byte* caller_;
  std::byte* target_;
  std::size_t bytes_;
};

}  // namespace chimera::detail
