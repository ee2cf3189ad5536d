// SPDX-License-Identifier: Apache-2.0
// Implements the gloo mesh backend's fault notices through its store.
#include "gloo_fault_notices.hpp"

#include <algorithm>
#include <exception>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

namespace chimera::torch_ext {
namespace {

using Clock = std::chrono::steady_clock;

// How often the rank at fault looks for asks in its window.
constexpr std::chrono::milliseconds kAskPoll{5};

struct Ask {
  std::int64_t key = -1;
  int words = 0;
};

}  // namespace

GlooFaultNotices::GlooFaultNotices(c10::intrusive_ptr<c10d::Store> store, std::string prefix, int rank, int size)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), size_(size) {}

std::string GlooFaultNotices::key(const std::string& what, std::int64_t serial) const {
  return prefix_ + "notices/" + what + (serial > 0 ? "/" + std::to_string(serial) : std::string());
}

bool GlooFaultNotices::has(const std::string& name) const { return store_->check({name}); }

std::string GlooFaultNotices::get(const std::string& name) const {
  const std::vector<std::uint8_t> bytes = store_->get(name);
  return std::string(bytes.begin(), bytes.end());
}

void GlooFaultNotices::readNew() {
  const std::int64_t count = store_->add(key("count", 0), 0);
  for (std::int64_t serial = read_ + 1; serial <= count; ++serial) {
    // Counted but not written yet: read it next time (a get would wait for it, unbounded here).
    if (!has(key("fault", serial))) return;
    const std::string text = get(key("fault", serial));
    Fault fault;
    std::istringstream in(text);
    in >> fault.rank;
    std::getline(in >> std::ws, fault.error);
    if (fault.rank >= 0 && fault.rank < size_) faults_[serial] = std::move(fault);
    read_ = serial;
  }
}

void GlooFaultNotices::announce(const Status& error, const Members& members, const StandIn& standIn) {
  std::int64_t serial = 0;
  try {
    readNew();  // failures recorded before this one are not this call's
    serial = store_->add(key("count", 0), 1);
    store_->set(key("fault", serial), std::to_string(rank_) + " " + error.toString());
  } catch (const std::exception&) {
    return;  // no notice: the peers wait for their timeout, as without notices
  }
  // Ranks inside a window of their own (they failed too, in this call): each stands in for its
  // own rounds, so it counts as having asked.
  std::set<int> alike;
  const auto failedAlike = [&](int rank) { return alike.contains(rank); };
  std::map<int, Ask> asks;  // by the asking rank
  std::set<std::int64_t> served;
  std::int64_t seen = 0;
  const Clock::time_point deadline = Clock::now() + kGlooAnnounceWindow;
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(kAskPoll);
    try {
      readNew();
      alike.clear();
      for (auto it = faults_.upper_bound(serial - size_); it != faults_.end(); ++it) {
        if (it->first != serial && !has(key("done", it->first))) alike.insert(it->second.rank);
      }
      const std::int64_t count = store_->add(key("asks", serial), 0);
      for (int r = 0; r < size_ && count != seen; ++r) {
        const std::string name = key("ask", serial) + "/" + std::to_string(r);
        if (r == rank_ || asks.contains(r) || !has(name)) continue;
        std::istringstream in(get(name));
        Ask ask;
        in >> ask.key >> ask.words;
        asks[r] = ask;
      }
      seen = count;
    } catch (const std::exception&) {
      break;
    }
    int answered = 0;
    for (int r = 0; r < size_; ++r) answered += r != rank_ && (asks.contains(r) || failedAlike(r)) ? 1 : 0;
    for (const auto& [from, ask] : asks) {
      if (served.contains(ask.key)) continue;
      const std::vector<int> group = members(ask.key);
      const bool everyMemberAsked = !group.empty() && std::all_of(group.begin(), group.end(), [&](int m) {
        const auto it = asks.find(m);
        return m == rank_ || (it != asks.end() && it->second.key == ask.key) || failedAlike(m);
      });
      if (!everyMemberAsked) continue;
      served.insert(ask.key);
      standIn(ask.key, ask.words);
    }
    if (answered == size_ - 1) break;
  }
  try {
    store_->set(key("done", serial), std::string("1"));
  } catch (const std::exception&) {
    // the peers that asked keep waiting, as without notices
  }
}

void GlooFaultNotices::offer(std::int64_t groupKey, int words, std::span<const int> members) {
  try {
    readNew();
    for (auto& [serial, fault] : faults_) {
      if (fault.settled || fault.asked || fault.rank == rank_ ||
          std::find(members.begin(), members.end(), fault.rank) == members.end())
        continue;
      if (has(key("done", serial))) {
        fault.settled = true;  // its window ended: it takes part in this round with a later call
        continue;
      }
      store_->set(key("ask", serial) + "/" + std::to_string(rank_),
                  std::to_string(groupKey) + " " + std::to_string(words));
      store_->add(key("asks", serial), 1);
      fault.asked = true;
    }
  } catch (const std::exception&) {
    // the round waits as without notices
  }
}

void GlooFaultNotices::settle(int rank) {
  for (auto& [serial, fault] : faults_) {
    if (fault.rank == rank) fault.settled = true;
  }
}

std::string GlooFaultNotices::faultOf(int rank) const {
  for (auto it = faults_.rbegin(); it != faults_.rend(); ++it) {
    if (it->second.rank == rank) return it->second.error;
  }
  return {};
}

}  // namespace chimera::torch_ext
