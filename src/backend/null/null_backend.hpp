// SPDX-License-Identifier: Apache-2.0
// A Backend that moves no data: every collective returns at once. The overhead benchmarks
// (chimera-session-bench, python -m chimera.bench) run a Session on it so that what they time is
// the Session and Executor alone (recording, window lookup, dispatch), not communication.
// Header-only and private (not installed).
#pragma once

#include <cstdlib>
#include <cstring>

#include "chimera/backend.hpp"

namespace chimera::detail {

/// The no-op backend of world rank `rank` on `mesh`; counts the calls it receives.
class NullBackend final : public Backend {
 public:
  NullBackend(Mesh mesh, int rank) : mesh_(std::move(mesh)), rank_(rank) {}
  std::string_view name() const override { return "null"; }
  const Mesh& mesh() const override { return mesh_; }
  int rank() const override { return rank_; }
  Status allReduce(const void*, void*, std::size_t, DataType, ReduceOp, AxisSet, Stream) override { return call(); }
  Status reduceScatter(const void*, void*, std::size_t, DataType, ReduceOp, AxisSet, Stream) override { return call(); }
  Status allGather(const void*, void*, std::size_t, DataType, AxisSet, Stream) override { return call(); }
  Status allToAll(const void*, void*, std::size_t, DataType, AxisSet, Stream) override { return call(); }
  Status broadcast(const void*, void*, std::size_t, DataType, int, AxisSet, Stream) override { return call(); }
  Status send(const void*, std::size_t, DataType, int, Stream) override { return call(); }
  Status recv(void*, std::size_t, DataType, int, Stream) override { return call(); }
  Status groupedP2P(std::span<const P2POp>, Stream) override { return call(); }
  Status allocate(std::size_t bytes, void** out) override {
    *out = std::calloc(1, bytes);
    return Status::ok();
  }
  void deallocate(void* ptr) override { std::free(ptr); }
  Status copy(void*, const void*, std::size_t, Stream) override { return Status::ok(); }
  Status packBox(const void*, std::span<const std::int64_t>, const Box&, void*, DataType, Stream) override {
    return Status::ok();
  }
  Status unpackBox(const void*, void*, std::span<const std::int64_t>, const Box&, DataType, Stream) override {
    return Status::ok();
  }
  Status scale(const void*, void*, std::size_t, DataType, double, Stream) override { return Status::ok(); }
  Status synchronize(Stream) override { return Status::ok(); }
  Status createGroups(std::span<const AxisSet>) override { return Status::ok(); }
  bool hasGroup(AxisSet) const override { return true; }
  /// Communication calls received so far.
  std::size_t calls() const { return calls_; }

 private:
  Status call() {
    ++calls_;
    return Status::ok();
  }
  Mesh mesh_;
  int rank_;
  std::size_t calls_ = 0;
};

}  // namespace chimera::detail
