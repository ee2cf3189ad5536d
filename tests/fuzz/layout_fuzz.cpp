// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: layout text ("pp=@0,tp=S0") on a fixed mesh, validated against a shape
// also taken from the input ("shape;layout"). Any input must give ok or an error Status.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chimera/layout.hpp"
#include "chimera/tensor_spec.hpp"
#include "core/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::size_t semi = text.find(';');
  if (semi == std::string_view::npos) return 0;
  chimera::Mesh mesh;
  CHIMERA_ASSERT(chimera::Mesh::parse("dp=2,pp=2,tp=2", 8, mesh).isOk());
  chimera::TensorSpec spec;
  spec.dtype = chimera::DataType::BF16;
  if (!chimera::TensorSpec::parseShape(text.substr(0, semi), spec.shape).isOk()) return 0;
  chimera::Layout layout;
  if (!chimera::Layout::parse(text.substr(semi + 1), mesh, layout).isOk()) return 0;
  chimera::Layout again;
  CHIMERA_ASSERT(chimera::Layout::parse(layout.toString(), mesh, again).isOk());
  CHIMERA_ASSERT(again == layout);
  (void)layout.validate(spec);
  return 0;
}
