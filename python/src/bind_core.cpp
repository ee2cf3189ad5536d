// SPDX-License-Identifier: Apache-2.0
// Bindings of the value types: Mesh, Layout (with its per-axis placements, which the package
// maps to and from DTensor's) and TensorSpec.
#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "chimera/chain.hpp"
#include "errors.hpp"

namespace chimera::python {
namespace {

const char* shortDataTypeName(DataType type) {
  switch (type) {
    case DataType::F32: return "f32";
    case DataType::F64: return "f64";
    case DataType::F16: return "f16";
    case DataType::BF16: return "bf16";
    case DataType::I32: return "i32";
    case DataType::I64: return "i64";
    case DataType::U8: return "u8";
  }
  return "?";
}

// One placement as a tuple the package turns into a placement object: ("R",), ("S", dim),
// ("P", op), ("@", stage).
nb::tuple placementTuple(const Placement& p) {
  switch (p.kind) {
    case Placement::Kind::Replicate: return nb::make_tuple("R");
    case Placement::Kind::Shard: return nb::make_tuple("S", p.dim);
    case Placement::Kind::Partial: return nb::make_tuple("P", std::string(reduceOpName(p.op)));
    case Placement::Kind::Stage: return nb::make_tuple("@", p.stage);
  }
  return nb::make_tuple("R");
}

Layout layoutFromText(const std::string& text, std::optional<Mesh> mesh) {
  if (!mesh) {
    if (!defaultMesh()) {
      raiseStatus(Status::invalidArgument(
          fmt::format("Layout(\"{}\") needs a mesh: pass mesh=... or call chimera.init(mesh) first", text)));
    }
    mesh = *defaultMesh();
  }
  Layout layout;
  check(Layout::parse(text, *mesh, layout));
  return layout;
}

TensorSpec makeSpec(const std::vector<std::int64_t>& shape, nb::handle dtype) {
  TensorSpec spec;
  spec.shape = shape;
  spec.dtype = toDataType(dtype);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 1) {
      raiseStatus(Status::invalidArgument(fmt::format("TensorSpec: extent {} of dim {} is < 1", shape[d], d)));
    }
  }
  if (shape.empty() || shape.size() > 8) {
    raiseStatus(Status::invalidArgument(fmt::format("TensorSpec: {} dimensions (1 to 8 allowed)", shape.size())));
  }
  return spec;
}

void checkRank(const Mesh& mesh, int rank) {
  if (rank < 0 || rank >= mesh.size()) {
    raiseStatus(Status::invalidArgument(
        fmt::format("rank {} is outside mesh {} of {} ranks", rank, mesh.toString(), mesh.size())));
  }
}

void bindMesh(nb::module_& m) {
  nb::class_<Mesh>(m, "Mesh", "Named axes over the world ranks, row-major: for pp=2,tp=4, rank = pp*4 + tp.")
      .def(
          "__init__", [](Mesh* self, nb::handle text) { new (self) Mesh(toMesh(text)); }, nb::arg("text"),
          "Parses \"pp=2,tp=4\" (the world size is the product of the sizes).")
      .def_static("flat", &Mesh::flat, nb::arg("size"), nb::arg("name") = "world", "A one-axis mesh.")
      .def_prop_ro("size", &Mesh::size, "Number of ranks.")
      .def_prop_ro("num_axes", &Mesh::numAxes)
      .def_prop_ro("axis_names",
                   [](const Mesh& mesh) {
                     std::vector<std::string> names;
                     for (const auto& axis : mesh.axes()) names.push_back(axis.name);
                     return names;
                   })
      .def_prop_ro("shape",
                   [](const Mesh& mesh) {
                     std::vector<int> sizes;
                     for (const auto& axis : mesh.axes()) sizes.push_back(axis.size);
                     return nb::tuple(nb::cast(sizes));
                   })
      .def_prop_ro(
          "axes",
          [](const Mesh& mesh) {
            std::vector<std::pair<std::string, int>> axes;
            for (const auto& axis : mesh.axes()) axes.emplace_back(axis.name, axis.size);
            return axes;
          },
          "[(name, size), ...] in mesh order.")
      .def("axis_index",
           [](const Mesh& mesh, const std::string& name) {
             int index = 0;
             check(mesh.axisIndex(name, index));
             return index;
           })
      .def("coordinates",
           [](const Mesh& mesh, int rank) {
             checkRank(mesh, rank);
             return mesh.coordinates(rank);
           })
      .def("rank_of",
           [](const Mesh& mesh, const std::vector<int>& coords) {
             if (static_cast<int>(coords.size()) != mesh.numAxes()) {
               raiseStatus(Status::invalidArgument(
                   fmt::format("rank_of: {} coordinates for a mesh of {} axes", coords.size(), mesh.numAxes())));
             }
             for (int a = 0; a < mesh.numAxes(); ++a) {
               if (coords[a] < 0 || coords[a] >= mesh.axis(a).size) {
                 raiseStatus(Status::invalidArgument(fmt::format("rank_of: coordinate {} out of range for axis {}={}",
                                                                 coords[a], mesh.axis(a).name, mesh.axis(a).size)));
               }
             }
             return mesh.rankOf(coords);
           })
      .def(
          "group_size", [](const Mesh& mesh, nb::handle axes) { return mesh.groupSize(toAxes(axes, mesh)); },
          nb::arg("axes").none())
      .def(
          "group_ranks",
          [](const Mesh& mesh, int rank, nb::handle axes) {
            checkRank(mesh, rank);
            return mesh.groupRanks(rank, toAxes(axes, mesh));
          },
          nb::arg("rank"), nb::arg("axes").none(), "World ranks of `rank`'s group along `axes`.")
      .def("sub_mesh",
           [](const Mesh& mesh, const std::string& axis, int coordinate) {
             int index = 0;
             check(mesh.axisIndex(axis, index));
             Mesh out;
             check(mesh.subMesh(index, coordinate, out));
             return out;
           })
      .def_prop_ro("world_ranks", &Mesh::worldRanks)
      .def("__len__", &Mesh::size)
      .def("__str__", &Mesh::toString)
      .def("__repr__", [](const Mesh& mesh) { return fmt::format("chimera.Mesh(\"{}\")", mesh.toString()); })
      .def("__eq__", [](const Mesh& a, nb::handle b) { return nb::isinstance<Mesh>(b) && a == nb::cast<Mesh>(b); })
      .def("__hash__", [](const Mesh& mesh) { return std::hash<std::string>{}(mesh.toString()); });
}

void bindLayout(nb::module_& m) {
  nb::class_<Layout>(m, "Layout",
                     "Where each part of a tensor lives on a Mesh: one placement per mesh axis "
                     "(R, S<dim>, P / P(op), @stage), e.g. \"pp=@0,tp=S1\".")
      .def(
          "__init__",
          [](Layout* self, const std::string& text, std::optional<Mesh> mesh) {
            new (self) Layout(layoutFromText(text, std::move(mesh)));
          },
          nb::arg("text"), nb::arg("mesh").none() = nb::none(),
          "Parses the text form on `mesh` (default: the mesh given to chimera.init).")
      .def_static("replicated", &Layout::replicated, nb::arg("mesh"))
      .def_prop_ro("mesh", [](const Layout& layout) { return layout.mesh(); })
      .def("_placement_tuples",
           [](const Layout& layout) {
             nb::list out;
             for (int a = 0; a < layout.mesh().numAxes(); ++a) out.append(placementTuple(layout.placement(a)));
             return out;
           })
      .def(
          "split_axes",
          [](const Layout& layout, int dim) {
            std::vector<std::string> names;
            for (int axis : layout.splitAxes(dim)) names.push_back(layout.mesh().axis(axis).name);
            return names;
          },
          nb::arg("dim"), "Names of the axes splitting tensor dim `dim`, outer first.")
      .def("validate", [](const Layout& layout, const TensorSpec& spec) { check(layout.validate(spec)); })
      .def("holds", &Layout::holds, nb::arg("rank"), "Whether world rank `rank` holds a copy.")
      .def("holders", &Layout::holders)
      .def("local_shape",
           [](const Layout& layout, const TensorSpec& spec) {
             check(layout.validate(spec));
             return nb::tuple(nb::cast(layout.localShape(spec)));
           })
      .def("local_bytes",
           [](const Layout& layout, const TensorSpec& spec) {
             check(layout.validate(spec));
             return layout.localBytes(spec);
           })
      .def(
          "rank_box",
          [](const Layout& layout, int rank, const TensorSpec& spec) {
            check(layout.validate(spec));
            checkRank(layout.mesh(), rank);
            const Box box = layout.rankBox(rank, spec);
            return std::make_pair(box.offset, box.extent);
          },
          nb::arg("rank"), nb::arg("spec"), "(offset, extent) of the logical box `rank` holds.")
      .def(
          "after",
          [](const Layout& layout, const std::string& opText, const TensorSpec& spec) {
            Chain chain;
            check(Chain::parse(opText, layout.mesh(), chain));
            ChainTrace trace;
            check(traceChain(layout, chain, spec, trace));
            return trace.final();
          },
          nb::arg("chain"), nb::arg("spec"),
          "The layout after applying `chain` (\"allreduce:tp,send:pp\") to a tensor of `spec` placed as this one.")
      .def("__str__", &Layout::toString)
      .def("__repr__",
           [](const Layout& layout) {
             return fmt::format("chimera.Layout(\"{}\", mesh=\"{}\")", layout.toString(), layout.mesh().toString());
           })
      .def("__eq__",
           [](const Layout& a, nb::handle b) { return nb::isinstance<Layout>(b) && a == nb::cast<Layout>(b); })
      .def("__hash__", [](const Layout& layout) {
        return std::hash<std::string>{}(layout.mesh().toString() + "|" + layout.toString());
      });
}

void bindTensorSpec(nb::module_& m) {
  nb::class_<TensorSpec>(m, "TensorSpec", "The logical (full, unsharded) shape and dtype of a tensor.")
      .def(
          "__init__",
          [](TensorSpec* self, const std::vector<std::int64_t>& shape, nb::handle dtype) {
            new (self) TensorSpec(makeSpec(shape, dtype));
          },
          nb::arg("shape"), nb::arg("dtype"), "dtype: \"bf16\", \"float32\", numpy or torch dtypes.")
      .def_prop_ro("shape", [](const TensorSpec& spec) { return nb::tuple(nb::cast(spec.shape)); })
      .def_prop_ro("dtype", [](const TensorSpec& spec) { return shortDataTypeName(spec.dtype); })
      .def_prop_ro("num_elements", &TensorSpec::numElements)
      .def_prop_ro("nbytes", &TensorSpec::bytes)
      .def("__str__", &TensorSpec::toString)
      .def("__repr__",
           [](const TensorSpec& spec) {
             std::string shape;
             for (auto e : spec.shape) shape += fmt::format("{}, ", e);
             return fmt::format("chimera.TensorSpec(({}), \"{}\")", shape.substr(0, shape.size() - 2),
                                shortDataTypeName(spec.dtype));
           })
      .def("__eq__", [](const TensorSpec& a, nb::handle b) {
        return nb::isinstance<TensorSpec>(b) && a == nb::cast<TensorSpec>(b);
      });
}

void bindDataTypes(nb::module_& m) {
  m.def(
      "dtype_name", [](nb::handle dtype) { return shortDataTypeName(toDataType(dtype)); }, nb::arg("dtype"),
      "The short name chimera uses for a dtype (\"bf16\" for torch.bfloat16, \"f32\" for numpy.float32).");
}

}  // namespace

void bindCore(nb::module_& m) {
  bindMesh(m);
  bindLayout(m);
  bindTensorSpec(m);
  bindDataTypes(m);
}

}  // namespace chimera::python
