// SPDX-License-Identifier: Apache-2.0
// Cache keys of the executor: the text that identifies a chain request, a redistribution
// or an explicit plan, and the hash ranks compare to agree on it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "chimera/executor.hpp"

namespace chimera::detail {

/// InvalidArgument when the request cannot be planned on `mesh`: a layout on another mesh,
/// or a chain op naming an axis the mesh lacks (its position and the mesh in the message).
[[nodiscard]] Status checkRequestMesh(const ChainRequest& request, const Mesh& mesh);

/// "chain|<mesh>|<shape dtype>|<from>|<chain>|<consume or ->|<cost>". Precondition:
/// checkRequestMesh succeeded.
std::string chainSignature(const ChainRequest& request, std::string_view costName);

/// "redistribute|<mesh>|<shape dtype>|<from>|<to>|<cost>".
std::string redistributionSignature(const TensorSpec& spec, const Layout& from, const Layout& to,
                                    std::string_view costName);

/// Every field of `plan` that changes what it does, as text (buffers, steps, transfers).
std::string planKey(const Plan& plan);

}  // namespace chimera::detail
