// SPDX-License-Identifier: Apache-2.0
// Cross-rank agreement, backend-neutral: every rank of a group contributes a signature hash and
// a failure flag (and optional flags OR-ed over the group); one MAX allReduce on the backend's
// own collectives gives every rank the same verdict. Used by the Executor (plans), prepared
// plans (preparation failures) and the Session (windows).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// Words of one agreement, in the backend's memory space between calls (grows, never shrinks).
class Agreement {
 public:
  explicit Agreement(Backend& backend) : backend_(backend) {}
  ~Agreement() {
    backend_.deallocate(device_);
    backend_.deallocateHost(host_);
  }
  Agreement(const Agreement&) = delete;
  Agreement& operator=(const Agreement&) = delete;

  /// Replaces every word by its maximum over the group along each of `groups` in turn (a MAX
  /// over a product group is a MAX over each factor), then waits for the result (bounded by
  /// the backend's timeout where it has one). The words travel through host memory from
  /// `Backend::allocateHost` (pinned for NCCL) and the backend's own memory. An empty
  /// list leaves the words as they are. Counts one collective per group in `collectives`.
  [[nodiscard]] Status maxOver(std::vector<std::int64_t>& words, std::span<const AxisSet> groups);

  /// The layout every agreement starts with: {hash, -hash, failed}, then `flags`.
  static std::vector<std::int64_t> words(std::int64_t hash, bool failed, std::span<const std::uint8_t> flags = {});
  /// After `maxOver`: true when some rank failed.
  static bool anyFailed(std::span<const std::int64_t> words) { return words[2] != 0; }
  /// After `maxOver`: true when every rank contributed the same hash.
  static bool sameHash(std::span<const std::int64_t> words) { return words[0] == -words[1]; }
  /// After `maxOver`: the flags OR-ed over the group.
  static std::vector<std::uint8_t> flags(std::span<const std::int64_t> words, std::size_t count);

  /// Agreement collectives run so far.
  std::uint64_t collectives() const { return collectives_; }

 private:
  Backend& backend_;
  void* device_ = nullptr;
  void* host_ = nullptr;  // staging from Backend::allocateHost (NCCL: pinned)
  std::size_t bytes_ = 0;
  std::uint64_t collectives_ = 0;
};

}  // namespace chimera::detail
