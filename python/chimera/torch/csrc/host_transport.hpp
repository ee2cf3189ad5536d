// SPDX-License-Identifier: Apache-2.0
// How one process group moves CPU tensors: a chimera Backend for its collectives (what plans
// run on) and a point-to-point channel with c10d's semantics. Two transports: MPI (under an
// MPI launch) and gloo (bootstrapped from the c10d Store, under torchrun or PyTorch's
// multi-process test harness).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "chimera/backend.hpp"
#include "chimera/mesh.hpp"

namespace chimera::torch_ext {

/// Point-to-point on contiguous CPU tensors: a send or receive returns at once with a Work
/// that completes when the transfer has; transfers between two ranks with one tag match in
/// issue order. `wait()` without a timeout is bounded by the group's timeout. Tags are
/// non-negative and below userTagLimit() (the process group checks) or the reserved one.
class HostPointToPoint {
 public:
  virtual ~HostPointToPoint() = default;
  /// Starts sending `tensor` to group rank `peer`.
  virtual c10::intrusive_ptr<c10d::Work> send(const at::Tensor& tensor, int peer, int tag) = 0;
  /// Starts receiving into `tensor` from group rank `peer`, or from any rank when `peer` is
  /// -1 (the Work's sourceRank() says which, once complete).
  virtual c10::intrusive_ptr<c10d::Work> recv(const at::Tensor& tensor, int peer, int tag) = 0;
  /// Tells group rank `peer` that this rank's send to it with `tag` failed before it was
  /// posted (`reason`: the error raised here), so that its receive fails at once, naming this
  /// rank, instead of waiting for its timeout. Nothing when `peer` is not another rank of the
  /// group; on gloo, nothing either when `tag` is outside [0, reservedTag()] (it has no channel
  /// there, see gloo_point_to_point.hpp).
  virtual void refuse(int peer, int tag, const std::string& reason) = 0;
  /// The tags a caller may use are [0, userTagLimit()); the ones above are chimera's own.
  virtual int userTagLimit() const = 0;
  /// The tag no caller's transfer uses (monitoredBarrier's), at or above userTagLimit().
  virtual int reservedTag() const = 0;
};

/// A process group's host transport; both members are set.
struct HostTransport {
  std::unique_ptr<chimera::Backend> backend;
  std::unique_ptr<HostPointToPoint> p2p;
};

/// The MPI transport over exactly the world ranks `worldRanks` (group order), made by the
/// members alone, every wait bounded by `timeoutMs`, ending the job on a Timeout when
/// `abortOnTimeout`; see createGroupBackend. Status errors as there.
[[nodiscard]] Status createMpiTransport(std::span<const int> worldRanks, int tag, std::int64_t timeoutMs,
                                        bool abortOnTimeout, HostTransport& out);

/// The gloo transport over an existing c10d gloo backend of the group (made from the group's
/// Store by the caller, with the same timeout). Collectives on the backend are c10d calls on
/// `gloo`, each waited for at most `timeoutMs` (> 0; InvalidArgument otherwise).
[[nodiscard]] Status createGlooTransport(c10::intrusive_ptr<c10d::Backend> gloo, std::int64_t timeoutMs,
                                         HostTransport& out);

/// Makes a gloo backend of `size` ranks, this one `rank`, whose members meet in the store
/// under `storePrefix`, waiting at most `timeoutMs` (c10d's ProcessGroupGloo, made where gloo's
/// headers are: torch's Python side). Throws on failure.
using GlooGroupMaker = std::function<c10::intrusive_ptr<c10d::Backend>(const std::string& storePrefix, int rank,
                                                                       int size, std::int64_t timeoutMs)>;

/// A chimera Backend over `mesh` on gloo, without MPI: mesh rank i (row-major) is torch global
/// rank `globalRanks[i]` (any order; a DeviceMesh's ranks), this process is `globalRank`.
/// Collective over those ranks. Each gloo group is made by `makeGroup` under a store prefix
/// naming the mesh, this creation of it (a count in `store`, shared by every rank) and the
/// group, so other meshes and later backends over the same mesh never collide. The whole
/// mesh's group is made now (collectives over all axes, point-to-point by mesh rank); each
/// other group along an axis set by createGroups, by its members (a group not created is
/// InvalidArgument naming it). Every wait is bounded by `timeoutMs`. InvalidArgument when the
/// timeout is not positive, the ranks and the mesh differ in size, a rank repeats or the caller is
/// not one of them; Timeout / BackendError when the members do not meet.
[[nodiscard]] Status createGlooMeshBackend(const Mesh& mesh, std::span<const int> globalRanks, int globalRank,
                                           c10::intrusive_ptr<c10d::Store> store, const GlooGroupMaker& makeGroup,
                                           std::int64_t timeoutMs, std::unique_ptr<chimera::Backend>& out);

}  // namespace chimera::torch_ext
