// SPDX-License-Identifier: Apache-2.0
// MeshRuntime (see mesh_runtime.hpp).
#include "mesh_runtime.hpp"

#include <cstdint>
#include <utility>
#include <vector>

#include "chimera/mpi_backend.hpp"
#include "chimera/planning/planner.hpp"
#include "core/check.hpp"

namespace chimera::torch_ext {

Status MeshRuntime::create(std::vector<MeshAxis> axes, bool fusion, bool perRank, std::unique_ptr<MeshRuntime>& out) {
  int rank = 0;
  int size = 0;
  CHIMERA_RETURN_IF_ERROR(mpiWorld(rank, size));
  Mesh mesh;
  CHIMERA_RETURN_IF_ERROR(Mesh::create(std::move(axes), size, mesh));
  std::unique_ptr<MeshRuntime> runtime(new MeshRuntime());
  CHIMERA_RETURN_IF_ERROR(createMpiBackend(mesh, runtime->backend_));
  runtime->executor_ = std::make_unique<Executor>(*runtime->backend_);
  SessionOptions options;
  CHIMERA_RETURN_IF_ERROR(SessionOptions::fromEnvironment(options));
  options.fusion = fusion;
  options.perRank = perRank;
  if (perRank) {
    // Every non-empty set of axes: a handful of groups on the meshes layers use (at most 2^4-1).
    std::vector<AxisSet> groups;
    for (std::uint32_t bits = 1; bits < (1u << runtime->mesh().numAxes()); ++bits)
      groups.push_back(AxisSet::fromBits(bits));
    CHIMERA_RETURN_IF_ERROR(runtime->backend_->createGroups(groups));
  }
  CHIMERA_RETURN_IF_ERROR(Session::create(*runtime->backend_, options, runtime->session_));
  out = std::move(runtime);
  return Status::ok();
}

MeshRuntime::~MeshRuntime() {
  // The session and executor use the backend: free them first.
  session_.reset();
  executor_.reset();
}

Status MeshRuntime::layout(std::string_view text, Layout& out) const { return Layout::parse(text, mesh(), out); }

Status MeshRuntime::localShape(const TensorSpec& spec, std::string_view text, std::vector<std::int64_t>& out) const {
  Layout parsed;
  CHIMERA_RETURN_IF_ERROR(layout(text, parsed));
  CHIMERA_RETURN_IF_ERROR(parsed.validate(spec));
  out = parsed.localShape(spec);
  return Status::ok();
}

Status MeshRuntime::planBytes(const TensorSpec& spec, std::string_view from, std::string_view to,
                              RedistributionBytes& out) const {
  Layout source;
  Layout target;
  CHIMERA_RETURN_IF_ERROR(layout(from, source));
  CHIMERA_RETURN_IF_ERROR(layout(to, target));
  CHIMERA_RETURN_IF_ERROR(source.validate(spec));
  CHIMERA_RETURN_IF_ERROR(target.validate(spec));
  const BytesCost cost;
  Plan plan;
  CHIMERA_RETURN_IF_ERROR(planRedistribution(spec, source, target, 1, cost, plan));
  const PlanBytes bytes = chimera::planBytes(plan);
  out.total = bytes.total;
  out.maxPerRank = bytes.maxPerRank;
  out.plan = plan.toString();
  return Status::ok();
}

Status MeshRuntime::redistribute(const TensorSpec& spec, std::string_view from, std::string_view to, const void* input,
                                 std::size_t inputBytes, void* output, std::size_t outputBytes) {
  Layout source;
  Layout target;
  CHIMERA_RETURN_IF_ERROR(layout(from, source));
  CHIMERA_RETURN_IF_ERROR(layout(to, target));
  return executor_->redistribute(spec, source, target, input, inputBytes, output, outputBytes);
}

}  // namespace chimera::torch_ext
