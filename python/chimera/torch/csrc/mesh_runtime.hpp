// SPDX-License-Identifier: Apache-2.0
// One device mesh as chimera sees it from PyTorch: an MPI backend over the world laid out as
// the DeviceMesh, the Executor that redistributes DTensors on it, and a Session for layers
// that issue their collectives at call time. Free of torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/executor.hpp"
#include "chimera/layout.hpp"
#include "chimera/mesh.hpp"
#include "chimera/session.hpp"
#include "chimera/status.hpp"

namespace chimera::torch_ext {

/// Bytes of a redistribution plan (PlanBytes: bandwidth-optimal formulas, summed over ranks).
struct RedistributionBytes {
  std::int64_t total = 0;       ///< over all ranks
  std::int64_t maxPerRank = 0;  ///< the busiest rank
  std::string plan;             ///< the plan, one line per step
};

/// Owns a backend, executor and session over one mesh spanning the MPI world (rank order
/// row-major, as a DeviceMesh over torch.arange(world).view(sizes)). Not thread-safe;
/// every call that communicates is collective over the world.
class MeshRuntime {
 public:
  /// Creates the runtime (collective over the world). `fusion` sets the Session's option;
  /// `perRank` makes it record per rank (`SessionOptions::perRank`, what a pipeline schedule
  /// needs: each stage records only its own calls) and creates the communicator of every group
  /// of mesh axes at once, since per-rank recording cannot create one later.
  [[nodiscard]] static Status create(std::vector<MeshAxis> axes, bool fusion, bool perRank,
                                     std::unique_ptr<MeshRuntime>& out);
  ~MeshRuntime();

  const Mesh& mesh() const { return backend_->mesh(); }
  int rank() const { return backend_->rank(); }
  Backend& backend() { return *backend_; }
  Session& session() { return *session_; }

  /// Parses a layout on this mesh ("dp=S0,tp=P").
  [[nodiscard]] Status layout(std::string_view text, Layout& out) const;
  /// The local shape of this rank under `layout` (InvalidArgument when it does not fit `spec`).
  [[nodiscard]] Status localShape(const TensorSpec& spec, std::string_view layout,
                                  std::vector<std::int64_t>& out) const;
  /// Plans `from` -> `to` without running it (no communication). InvalidArgument when chimera
  /// cannot reach `to` from `from` (the caller falls back).
  [[nodiscard]] Status planBytes(const TensorSpec& spec, std::string_view from, std::string_view to,
                                 RedistributionBytes& out) const;
  /// Runs the redistribution (cached plan). Collective over the world.
  [[nodiscard]] Status redistribute(const TensorSpec& spec, std::string_view from, std::string_view to,
                                    const void* input, std::size_t inputBytes, void* output, std::size_t outputBytes);

 private:
  MeshRuntime() = default;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Session> session_;
};

}  // namespace chimera::torch_ext
