// SPDX-License-Identifier: Apache-2.0
// Implements keepUntilExit: a process-wide list that is never destroyed.
#include "mpi/abandoned_memory.hpp"

#include <mutex>
#include <utility>
#include <vector>

namespace chimera::detail {

void keepUntilExit(std::shared_ptr<void> memory) {
  static auto* mutex = new std::mutex();                         // never destroyed: outlives every backend
  static auto* kept = new std::vector<std::shared_ptr<void>>();  // idem
  const std::lock_guard<std::mutex> lock(*mutex);
  kept->push_back(std::move(memory));
}

}  // namespace chimera::detail
