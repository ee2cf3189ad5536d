// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: mesh text ("pp=2,tp=4") and axis-set text ("dp+tp") parsing. Any input
// must give ok or an error Status; an accepted mesh must be self-consistent.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chimera/mesh.hpp"
#include "core/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::size_t bar = text.find('|');
  const std::string_view meshText = text.substr(0, bar);
  // Without a world size: an accepted mesh is within the rank bound and round-trips.
  if (chimera::Mesh free; chimera::Mesh::parse(meshText, free).isOk()) {
    CHIMERA_ASSERT(free.size() >= 1 && free.size() <= chimera::Mesh::kMaxRanks);
    chimera::Mesh again;
    CHIMERA_ASSERT(chimera::Mesh::parse(free.toString(), free.size(), again).isOk() && again == free);
  }
  for (const int world : {1, 2, 8, 64, 1 << 20}) {
    chimera::Mesh mesh;
    if (!chimera::Mesh::parse(meshText, world, mesh).isOk()) continue;
    CHIMERA_ASSERT(mesh.size() == world);
    chimera::Mesh again;
    CHIMERA_ASSERT(chimera::Mesh::parse(mesh.toString(), world, again).isOk());
    CHIMERA_ASSERT(again.toString() == mesh.toString());
    if (bar == std::string_view::npos) continue;
    chimera::AxisSet axes;
    if (!mesh.parseAxes(text.substr(bar + 1), axes).isOk()) continue;
    CHIMERA_ASSERT(mesh.groupSize(axes) >= 1 && world % mesh.groupSize(axes) == 0);
    CHIMERA_ASSERT(mesh.groupIndex(world - 1, axes) < mesh.groupSize(axes));
  }
  return 0;
}
