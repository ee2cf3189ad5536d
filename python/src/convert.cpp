// SPDX-License-Identifier: Apache-2.0
// Conversions from Python arguments to chimera types, shared by every binding: each accepts
// the bound object or its text form, and raises the Status exception naming the bad value.
#include <fmt/format.h>
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.hpp"
#include "errors.hpp"

namespace chimera::python {

std::optional<Mesh>& defaultMesh() {
  static std::optional<Mesh> mesh;
  return mesh;
}

Mesh toMesh(nb::handle obj) {
  if (nb::isinstance<Mesh>(obj)) return nb::cast<Mesh>(obj);
  if (!nb::isinstance<nb::str>(obj)) {
    raiseStatus(Status::invalidArgument(
        fmt::format("expected a chimera.Mesh or its text (\"pp=2,tp=4\"), got {}", nb::str(obj.type()).c_str())));
  }
  const std::string text = nb::cast<std::string>(obj);
  Mesh mesh;
  check(Mesh::parse(text, mesh));
  return mesh;
}

Layout toLayout(nb::handle obj, const Mesh& mesh, const char* what) {
  if (nb::isinstance<Layout>(obj)) {
    Layout layout = nb::cast<Layout>(obj);
    if (!layout.mesh().axesEqual(mesh)) {
      raiseStatus(Status::invalidArgument(fmt::format("{} layout {} is on mesh {}, but this call's mesh is {}", what,
                                                      layout.toString(), layout.mesh().toString(), mesh.toString())));
    }
    return layout;
  }
  if (!nb::isinstance<nb::str>(obj)) {
    raiseStatus(Status::invalidArgument(
        fmt::format("{} layout: expected a chimera.Layout or its text, got {}", what, nb::str(obj.type()).c_str())));
  }
  Layout layout;
  check(Layout::parse(nb::cast<std::string>(obj), mesh, layout));
  return layout;
}

DataType toDataType(nb::handle obj) {
  std::string text;
  if (nb::isinstance<nb::str>(obj)) {
    text = nb::cast<std::string>(obj);
  } else if (nb::isinstance<nb::type_object>(obj) && nb::hasattr(obj, "__name__")) {
    text = nb::cast<std::string>(obj.attr("__name__"));  // numpy.float32
  } else {
    text = nb::cast<std::string>(nb::str(obj));  // torch.bfloat16, dtype('float32')
  }
  if (text.rfind("torch.", 0) == 0) text = text.substr(6);
  static const std::pair<const char*, const char*> kAliases[] = {
      {"float32", "f32"}, {"float64", "f64"}, {"float16", "f16"}, {"bfloat16", "bf16"},
      {"int32", "i32"},   {"int64", "i64"},   {"uint8", "u8"},    {"half", "f16"}};
  for (const auto& [alias, name] : kAliases) {
    if (text == alias) text = name;
  }
  DataType out;
  check(parseDataType(text, out));
  return out;
}

ReduceOp toReduceOp(nb::handle obj) {
  ReduceOp out;
  check(parseReduceOp(nb::cast<std::string>(nb::str(obj)), out));
  return out;
}

namespace {

// The axis set `obj` names (None: every axis of `mesh`), or InvalidArgument.
Status axesOf(nb::handle obj, const Mesh& mesh, AxisSet& out) {
  if (obj.is_none()) {
    out = mesh.allAxes();
    return Status::ok();
  }
  std::string text;
  if (nb::isinstance<nb::str>(obj)) {
    text = nb::cast<std::string>(obj);
  } else {
    for (nb::handle name : obj) {
      if (!nb::isinstance<nb::str>(name))
        return Status::invalidArgument(
            fmt::format("axes: expected axis names (str), got {}", nb::str(name.type()).c_str()));
      text += (text.empty() ? "" : "+") + nb::cast<std::string>(name);
    }
  }
  return mesh.parseAxes(text, out);
}

}  // namespace

AxisSet toAxes(nb::handle obj, const Mesh& mesh) {
  AxisSet axes;
  check(axesOf(obj, mesh, axes));
  return axes;
}

AxisSet toGroupAxes(nb::handle obj, Backend& backend) {
  AxisSet axes;
  Status status = axesOf(obj, backend.mesh(), axes);
  if (!status.isOk()) {
    nb::gil_scoped_release release;
    status = backend.announceFault(status);
  }
  check(status);
  return axes;
}

}  // namespace chimera::python
