// SPDX-License-Identifier: Apache-2.0
// The bound on prepared plans an Executor keeps: each holds its scratch, so a job with many
// distinct shapes would otherwise grow without limit.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "exec/prepared_plan.hpp"

namespace chimera::detail {

/// Tracks the slots that hold a prepared plan, most recently run first, and frees the least
/// recently run ones beyond `limit`. A pinned plan (run while a CUDA graph was being
/// captured: the graph keeps its scratch addresses) is never freed and does not count
/// toward the limit: at most `limit` unpinned plans are kept besides the pinned ones. Which plans are freed depends
/// only on the order of runs, which every rank shares (SPMD), so the ranks free and later re-prepare (collectively) the
/// same plans. Slots are owned elsewhere and must stay at their address while tracked.
class PreparedPlanCache {
 public:
  using Slot = std::unique_ptr<PreparedPlan>;

  explicit PreparedPlanCache(std::size_t limit) : limit_(limit) {}

  /// Records that `slot` now holds a freshly prepared plan (most recent), then frees the least
  /// recently run plans beyond the limit.
  void added(Slot& slot);
  /// Marks `slot` (tracked) as run just now.
  void ran(Slot& slot);
  /// Pins `slot` (tracked): it is not freed until unpinAll().
  void pin(Slot& slot);
  /// Unpins every plan (the graphs that used them are gone) and frees plans beyond the limit.
  void unpinAll();
  /// Plans pinned now.
  std::size_t pinned() const { return pinned_.size(); }
  /// Changes the limit (>= 1) and frees plans beyond it.
  void setLimit(std::size_t limit);
  /// The limit.
  std::size_t limit() const { return limit_; }
  /// Plans held now.
  std::size_t size() const { return order_.size(); }
  /// Plans freed so far to stay within the limit.
  std::size_t evictions() const { return evictions_; }

 private:
  void trim();

  std::size_t limit_;
  std::size_t evictions_ = 0;
  std::list<Slot*> order_;  // most recently run first
  std::unordered_map<const Slot*, std::list<Slot*>::iterator> where_;
  std::unordered_set<const Slot*> pinned_;
};

}  // namespace chimera::detail
