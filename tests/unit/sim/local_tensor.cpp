// SPDX-License-Identifier: Apache-2.0
// Implements the simulator's int64 local tensors (tests only).
#include "sim/local_tensor.hpp"

#include <stdexcept>

namespace chimera::sim {
namespace {

// Calls fn(tensorOffset, boxOrdinal) for every element of `box` in row-major order.
template <typename Fn>
void forEachInBox(const std::vector<std::int64_t>& shape, const Box& box, Fn&& fn) {
  const std::size_t dims = shape.size();
  if (box.offset.size() != dims) throw std::logic_error("box rank differs from tensor rank");
  for (std::size_t d = 0; d < dims; ++d) {
    if (box.offset[d] < 0 || box.extent[d] < 0 || box.offset[d] + box.extent[d] > shape[d]) {
      throw std::logic_error("box " + box.toString() + " outside the tensor");
    }
    if (box.extent[d] == 0) return;
  }
  std::vector<std::int64_t> idx(dims, 0);
  std::int64_t ordinal = 0;
  while (true) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < dims; ++d) offset = offset * shape[d] + box.offset[d] + idx[d];
    fn(offset, ordinal++);
    std::size_t d = dims;
    while (d > 0 && ++idx[d - 1] == box.extent[d - 1]) {
      idx[d - 1] = 0;
      --d;
    }
    if (d == 0) break;
  }
}

}  // namespace

LocalTensor LocalTensor::filled(std::vector<std::int64_t> shape, std::int64_t value) {
  LocalTensor t;
  t.shape = std::move(shape);
  t.data.assign(static_cast<std::size_t>(t.numElements()), value);
  return t;
}

std::int64_t LocalTensor::numElements() const {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

LocalTensor extract(const LocalTensor& tensor, const Box& box) {
  LocalTensor out = LocalTensor::filled(box.extent, 0);
  forEachInBox(tensor.shape, box, [&](std::int64_t offset, std::int64_t ordinal) {
    out.data[static_cast<std::size_t>(ordinal)] = tensor.data[static_cast<std::size_t>(offset)];
  });
  return out;
}

void insert(LocalTensor& tensor, const Box& box, const LocalTensor& piece) {
  if (piece.shape != box.extent) throw std::logic_error("piece shape differs from box " + box.toString());
  forEachInBox(tensor.shape, box, [&](std::int64_t offset, std::int64_t ordinal) {
    tensor.data[static_cast<std::size_t>(offset)] = piece.data[static_cast<std::size_t>(ordinal)];
  });
}

LocalTensor chunk(const LocalTensor& tensor, int dim, int n, int index) {
  Box box;
  box.offset.assign(tensor.shape.size(), 0);
  box.extent = tensor.shape;
  const auto d = static_cast<std::size_t>(dim);
  if (tensor.shape[d] % n != 0) throw std::logic_error("chunk of an uneven dim");
  box.extent[d] = tensor.shape[d] / n;
  box.offset[d] = box.extent[d] * index;
  return extract(tensor, box);
}

LocalTensor concat(const std::vector<LocalTensor>& parts, int dim) {
  const auto d = static_cast<std::size_t>(dim);
  std::vector<std::int64_t> shape = parts.front().shape;
  shape[d] = 0;
  for (const auto& p : parts) shape[d] += p.shape[d];
  LocalTensor out = LocalTensor::filled(shape, 0);
  Box box;
  box.offset.assign(shape.size(), 0);
  for (const auto& p : parts) {
    box.extent = p.shape;
    insert(out, box, p);
    box.offset[d] += p.shape[d];
  }
  return out;
}

}  // namespace chimera::sim
