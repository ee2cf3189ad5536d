// SPDX-License-Identifier: Apache-2.0
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

void PreparedPlanCache::trim() {
  while (order_.size() > limit_) {
    Slot* oldest = order_.back();
    order_.pop_back();
    where_.erase(oldest);
    oldest->reset();  // frees the plan's scratch
    ++evictions_;
  }
}

}  // namespace chimera::detail
