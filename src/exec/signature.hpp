// SPDX-License-Identifier: Apache-2.0
// Cache keys of the executor: the words and the text that identify a chain request, the text
// of a redistribution or an explicit plan, and the hash ranks compare to agree on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/executor.hpp"

namespace chimera::detail {

/// InvalidArgument when the request cannot be planned on `mesh`: a layout on another mesh,
/// or a chain op naming an axis the mesh lacks (its position and the mesh in the message).
[[nodiscard]] Status checkRequestMesh(const ChainRequest& request, const Mesh& mesh);

/// The executor's cache key of a chain request: its shape, dtype, start layout, ops and
/// consumed layout as words, equal exactly when the requests are (the mesh and the cost are
/// the executor's own). Built on every run of a cached chain, so it formats no text.
/// Precondition: checkRequestMesh succeeded.
struct ChainKey {
  std::vector<std::int64_t> words;
  bool operator==(const ChainKey& other) const = default;
};
ChainKey chainKey(const ChainRequest& request);
/// Appends `layout` as words: per axis its placement, then the nesting order of every
/// dimension that several axes split (all that equality compares). Also the Session's window key.
void appendLayoutWords(std::vector<std::int64_t>& words, const Layout& layout);
struct ChainKeyHash {
  std::size_t operator()(const ChainKey& key) const;
};

/// "chain|<mesh>|<shape dtype>|<from>|<chain>|<consume or ->|<cost>": what a rank planned, for
/// the agreement and the messages. Precondition: checkRequestMesh succeeded.
std::string chainSignature(const ChainRequest& request, std::string_view costName);

/// "redistribute|<mesh>|<shape dtype>|<from>|<to>|<cost>".
std::string redistributionSignature(const TensorSpec& spec, const Layout& from, const Layout& to,
                                    std::string_view costName);

/// Every field of `plan` that changes what it does, as text (buffers, steps, transfers).
std::string planKey(const Plan& plan);

}  // namespace chimera::detail
