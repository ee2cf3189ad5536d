// SPDX-License-Identifier: Apache-2.0
// The reduction of the backend-neutral agreement (common/agreement.hpp) on a Backend's own
// collectives: a MIN allReduce of the words over a group. Used by the Executor (plans),
// prepared plans (preparation failures) and the Session (windows).
#pragma once

#include <cstdint>
#include <span>

#include "chimera/backend.hpp"
#include "chimera/status.hpp"
#include "common/agreement.hpp"

namespace chimera::detail {

/// Stages agreement words in the backend's memory space between calls (grows, never shrinks).
class BackendReduction {
 public:
  explicit BackendReduction(Backend& backend) : backend_(backend) {}
  ~BackendReduction() {
    backend_.deallocate(device_);
    backend_.deallocateHost(host_);
  }
  BackendReduction(const BackendReduction&) = delete;
  BackendReduction& operator=(const BackendReduction&) = delete;

  /// A GroupMin that replaces every word by its minimum over the group along each of `groups`
  /// in turn (a MIN over a product group is a MIN over each factor), ordered on `stream`, then
  /// waits for the result (bounded by the backend's timeout where it has one). The words travel
  /// through host memory from `Backend::allocateHost` (pinned for NCCL) and the backend's own
  /// memory. An empty list leaves the words as they are. Counts one collective per group in
  /// `collectives`. `groups` must outlive the result.
  GroupMin over(std::span<const AxisSet> groups, Stream stream);

  /// Agreement collectives run so far.
  std::uint64_t collectives() const { return collectives_; }

 private:
  Status minOver(std::span<std::int64_t> words, std::span<const AxisSet> groups, Stream stream);

  Backend& backend_;
  void* device_ = nullptr;
  void* host_ = nullptr;  // staging from Backend::allocateHost (NCCL: pinned)
  std::size_t bytes_ = 0;
  std::uint64_t collectives_ = 0;
};

}  // namespace chimera::detail
