// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: size text ("32M", "1G") and shape text ("8192,2048"). Any input must give
// ok or an error Status; an accepted shape's byte count fits int64 for every dtype.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "chimera/tensor_spec.hpp"
#include "chimera/types.hpp"
#include "common/size_text.hpp"
#include "core/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::size_t bytes = 0;
  if (chimera::parseSize(text, bytes).isOk()) {
    std::size_t again = 0;
    CHIMERA_ASSERT(chimera::parseSize(chimera::formatSize(bytes), again).isOk());
  }
  std::vector<std::int64_t> shape;
  if (chimera::TensorSpec::parseShape(text, shape).isOk()) {
    const chimera::TensorSpec spec{shape, chimera::DataType::F64};
    CHIMERA_ASSERT(spec.numElements() >= 1 && spec.bytes() >= spec.numElements());
  }
  return 0;
}
