// SPDX-License-Identifier: Apache-2.0
// Uses only installed public headers: builds a mesh, looks up a group, reports errors as Status.
#include <chimera/mesh.hpp>
#include <chimera/status.hpp>

#include <cstdio>

int main() {
  chimera::Mesh mesh;
  if (chimera::Status status = chimera::Mesh::parse("pp=2,tp=4", 8, mesh); !status.isOk()) {
    std::fprintf(stderr, "consumer: %s\n", status.toString().c_str());
    return 1;
  }
  chimera::AxisSet tp;
  if (chimera::Status status = mesh.parseAxes("tp", tp); !status.isOk()) {
    std::fprintf(stderr, "consumer: %s\n", status.toString().c_str());
    return 1;
  }
  const auto group = mesh.groupRanks(5, tp);
  // rank 5 = (pp 1, tp 1): its tp group is ranks 4..7.
  if (group.size() != 4 || group.front() != 4 || group.back() != 7) {
    std::fprintf(stderr, "consumer: unexpected tp group of rank 5\n");
    return 1;
  }
  chimera::Mesh bad;
  const chimera::Status mismatch = chimera::Mesh::parse("pp=2,tp=4", 6, bad);
  if (mismatch.isOk()) {
    std::fprintf(stderr, "consumer: a 6-rank world accepted an 8-rank mesh\n");
    return 1;
  }
  std::printf("consumer: linked installed chimera; mesh %s, tp group of rank 5 = %d..%d; bad mesh -> %s\n",
              mesh.toString().c_str(), group.front(), group.back(), mismatch.toString().c_str());
  return 0;
}
