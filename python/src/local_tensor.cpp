// SPDX-License-Identifier: Apache-2.0
// Local tensors under a layout; see local_tensor.hpp.
#include "local_tensor.hpp"

#include <fmt/format.h>

#include "errors.hpp"

namespace chimera::python {

TensorSpec specFromLocal(const TensorView& view, const Layout& layout) {
  TensorSpec spec;
  spec.dtype = view.dtype;
  spec.shape = view.shape;
  for (std::size_t d = 0; d < spec.shape.size(); ++d) {
    for (int axis : layout.splitAxes(static_cast<int>(d))) spec.shape[d] *= layout.mesh().axis(axis).size;
  }
  return spec;
}

TensorSpec resolveSpec(nb::handle spec, std::initializer_list<std::pair<nb::handle, const Layout*>> candidates,
                       int rank, const char* call) {
  if (!spec.is_none()) {
    if (!nb::isinstance<TensorSpec>(spec)) {
      raiseStatus(Status::invalidArgument(
          fmt::format("{}: spec must be a chimera.TensorSpec, got {}", call, nb::str(spec.type()).c_str())));
    }
    return nb::cast<TensorSpec>(spec);
  }
  for (const auto& [obj, layout] : candidates) {
    if (obj.is_none() || !layout->holds(rank)) continue;
    nb::ndarray<> array;
    if (!nb::try_cast(obj, array, false)) continue;  // reported by localBuffer
    // Only the spec is derived here; localBuffer checks the tensor against the backend's memory.
    const MemorySpace own = array.device_type() == nb::device::cpu::value ? MemorySpace::Host : MemorySpace::Device;
    return specFromLocal(viewTensor(array, call, "tensor", own), *layout);
  }
  raiseStatus(Status::invalidArgument(fmt::format(
      "{}: rank {} holds none of the tensors, so the logical tensor is unknown here: pass spec=chimera.TensorSpec(...)",
      call, rank)));
}

LocalBuffer localBuffer(nb::handle obj, const TensorSpec& spec, const Layout& layout, int rank, const char* call,
                        const char* name, MemorySpace space) {
  if (!layout.holds(rank)) {
    if (obj.is_none()) return {};
    const TensorView view = viewObject(obj, call, name, space);
    if (view.bytes != 0) {
      raiseValueError(
          fmt::format("{}: rank {} holds nothing of layout {}, so '{}' must be None (or empty), but it is {}", call,
                      rank, layout.toString(), name, describe(view)));
    }
    return {};
  }
  if (obj.is_none()) {
    raiseValueError(
        fmt::format("{}: rank {} holds a part of layout {} of {}, so '{}' must be its local tensor, not None", call,
                    rank, layout.toString(), spec.toString(), name));
  }
  const TensorView view = viewObject(obj, call, name, space);
  const std::string why = fmt::format("the local tensor of layout {} for {}", layout.toString(), spec.toString());
  expectDtype(view, spec.dtype, call, name, why);
  expectBytes(view, static_cast<std::size_t>(layout.localBytes(spec)), call, name, why);
  return {view.data, view.bytes};
}

}  // namespace chimera::python
