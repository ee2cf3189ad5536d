// SPDX-License-Identifier: Apache-2.0
// How the process group's ops hand torch tensors to chimera's Backend: argument checks that
// raise c10::Error naming the op, the element type and reduction of a torch dtype and op, and
// staging through a contiguous buffer of the type chimera runs.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chimera/backend.hpp"

namespace chimera::torch_ext {

/// Raises c10::Error "chimera <op>: <status>" unless `status` is ok. Counts the calls on this
/// thread (backendResults): every backend call's result passes through here.
void check(const char* op, const Status& status);

/// How many backend results check() has seen on this thread: unchanged across a failed op
/// body, the op failed before it reached the backend.
std::uint64_t backendResults();

/// Raises unless `t` is a defined dense (strided) tensor on `device`, the device the op runs on.
void requireDenseOn(const char* op, const at::Tensor& t, const c10::Device& device);

/// The whole group: a process group's backend mesh is one axis over exactly the group's ranks.
inline AxisSet wholeGroup() { return AxisSet::single(0); }

/// `root` as a group rank; raises unless it is one of a group of `size`.
int requireRoot(const char* op, std::int64_t root, int size);

/// Raises unless `tensors` holds exactly one tensor.
void requireOne(const char* op, const std::vector<at::Tensor>& tensors);

/// The first tensor, or an undefined one when there is none.
at::Tensor firstOf(const std::vector<at::Tensor>& tensors);

/// The bytes of `t`'s elements.
std::size_t bytesOf(const at::Tensor& t);

/// How a reduction runs: chimera's element type, and the torch type the data is staged in
/// (int8/int16 are widened to int32: sum, product, min and max commute with the wrap back).
struct ReduceType {
  DataType dtype;
  at::ScalarType staged;
};

/// The reduction type of `type`; raises for a dtype chimera does not reduce, naming the ones it does.
ReduceType reduceTypeOf(const char* op, at::ScalarType type);

/// chimera's reduction of c10d's `reduceOp`; raises for AVG on an integral tensor and for the ops
/// chimera has not (PREMUL_SUM, BAND, ...).
ReduceOp reduceOpOf(const char* op, const c10d::ReduceOp& reduceOp, bool integral);

/// A contiguous buffer of `type` standing for `t`: `t` itself when it already is one, else a
/// staging copy (holding t's values when `readIn`), written back by commit().
class Staged {
 public:
  Staged(const at::Tensor& t, at::ScalarType type, bool readIn);
  Staged(const at::Tensor& t, bool readIn) : Staged(t, t.scalar_type(), readIn) {}
  void* data() { return buffer_.data_ptr(); }
  const at::Tensor& buffer() const { return buffer_; }
  std::size_t bytes() const { return bytesOf(buffer_); }
  /// Copies the buffer back into the tensor when they differ.
  void commit();

 private:
  at::Tensor original_;
  at::Tensor buffer_;
};

}  // namespace chimera::torch_ext
