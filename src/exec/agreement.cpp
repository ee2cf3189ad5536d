// SPDX-License-Identifier: Apache-2.0
// Implements cross-rank agreement on a signature and failure flag over a group.
#include "exec/agreement.hpp"

#include <algorithm>
#include <cstring>

#include "core/check.hpp"

namespace chimera::detail {

std::vector<std::int64_t> Agreement::words(std::int64_t hash, bool failed, std::span<const std::uint8_t> flags) {
  std::vector<std::int64_t> out{hash, -hash, failed ? 1 : 0};
  out.insert(out.end(), flags.begin(), flags.end());
  return out;
}

std::vector<std::uint8_t> Agreement::flags(std::span<const std::int64_t> words, std::size_t count) {
  std::vector<std::uint8_t> out(count);
  std::transform(words.begin() + 3, words.begin() + 3 + static_cast<std::ptrdiff_t>(count), out.begin(),
                 [](std::int64_t w) { return static_cast<std::uint8_t>(w != 0 ? 1 : 0); });
  return out;
}

Status Agreement::maxOver(std::vector<std::int64_t>& words, std::span<const AxisSet> groups) {
  if (groups.empty() || words.empty()) return Status::ok();
  const std::size_t bytes = words.size() * sizeof(std::int64_t);
  if (bytes > bytes_) {
    backend_.deallocate(device_);
    backend_.deallocateHost(host_);
    device_ = nullptr;
    host_ = nullptr;
    bytes_ = 0;
    CHIMERA_RETURN_IF_ERROR(backend_.allocate(bytes, &device_));
    CHIMERA_RETURN_IF_ERROR(backend_.allocateHost(bytes, &host_));
    bytes_ = bytes;
  }
  std::memcpy(host_, words.data(), bytes);
  CHIMERA_RETURN_IF_ERROR(backend_.copy(device_, host_, bytes));
  for (AxisSet group : groups) {
    CHIMERA_RETURN_IF_ERROR(
        backend_.allReduce(device_, device_, words.size(), DataType::I64, ReduceOp::Max, group));
    ++collectives_;
  }
  CHIMERA_RETURN_IF_ERROR(backend_.copy(host_, device_, bytes));
  CHIMERA_RETURN_IF_ERROR(backend_.synchronize());
  std::memcpy(words.data(), host_, bytes);
  return Status::ok();
}

}  // namespace chimera::detail
