// SPDX-License-Identifier: Apache-2.0
// Implements the bounded cache of prepared plans and its eviction count.
#include "exec/prepared_plan_cache.hpp"

namespace chimera::detail {

void PreparedPlanCache::added(Slot& slot) {
  order_.push_front(&slot);
  where_[&slot] = order_.begin();
  trim();
}

void PreparedPlanCache::ran(Slot& slot) {
  const auto found = where_.find(&slot);
  if (found == where_.end() || found->second == order_.begin()) return;
  order_.splice(order_.begin(), order_, found->second);
}

void PreparedPlanCache::setLimit(std::size_t limit) {
  limit_ = limit;
  trim();
}

void PreparedPlanCache::pin(Slot& slot) {
  if (where_.count(&slot) != 0) pinned_.insert(&slot);
}

void PreparedPlanCache::unpinAll() {
  pinned_.clear();
  trim();
}

// Frees least recently run unpinned plans while more than `limit_` unpinned plans are held
// (pinned plans do not count, so the plan just added or run is never the one freed). The
// walk goes from the list's old end, so every rank frees the same plans.
void PreparedPlanCache::trim() {
  auto it = order_.end();
  while (order_.size() - pinned_.size() > limit_ && it != order_.begin()) {
    --it;
    Slot* candidate = *it;
    if (pinned_.count(candidate) != 0) continue;
    it = order_.erase(it);
    where_.erase(candidate);
    candidate->reset();  // frees the plan's scratch
    ++evictions_;
  }
}

}  // namespace chimera::detail
