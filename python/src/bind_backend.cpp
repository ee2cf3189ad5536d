// SPDX-License-Identifier: Apache-2.0
// Bindings of the transports: factories (MPI, NCCL) and the plain collectives on tensors over
// mesh axes. Counts come from the tensors; every tensor is checked (contiguous, dtype, memory
// space, exact size) before the call, and results land in the caller's tensors.
#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "chimera/mpi_backend.hpp"
#include "chimera/nccl_backend.hpp"
#include "errors.hpp"
#include "resources.hpp"
#include "tensor_view.hpp"

namespace chimera::python {
namespace {

std::string groupText(const Mesh& mesh, AxisSet axes) {
  return fmt::format("group {} of {} ranks", mesh.axesName(axes), mesh.groupSize(axes));
}

// The view of `result` when given (it must match `tensor` exactly), else of `tensor` (in place).
nb::object resultOf(nb::handle tensor, nb::handle out) { return nb::borrow(out.is_none() ? tensor : out); }

// Views of an in-place-or-`out` call: `in` of `tensor`, `result` of `out` (which must match
// `tensor` in dtype and size) or of `tensor` itself when `out` is None.
void viewInPlaceOrOut(nb::handle tensor, nb::handle out, const char* call, MemorySpace space, TensorView& in,
                      TensorView& result) {
  in = viewObject(tensor, call, "tensor", space);
  result = in;
  if (!out.is_none()) {
    result = viewObject(out, call, "out", space);
    expectDtype(result, in.dtype, call, "out", "the dtype of 'tensor'");
    expectBytes(result, in.bytes, call, "out", "the size of 'tensor'");
  }
}

// Runs the tensor checks of one collective call over `group`. They are local to this rank,
// while its peers are about to enter the collective: when one fails, this rank refuses the call
// (Backend::refuseCollective), so that with argument checking on (the default) every rank of the
// group gets an error instead of waiting for this one. Then the check's ValueError is raised here.
template <typename Checks>
void checkTensors(Backend& backend, AxisSet group, Checks&& checks) {
  try {
    checks();
  } catch (nb::python_error& error) {
    const Status local = Status::invalidArgument(nb::str(error.value()).c_str());
    {
      nb::gil_scoped_release release;
      (void)backend.refuseCollective(group, local);
    }
    throw;
  }
}

nb::object allReduce(PyBackend& self, nb::handle tensor, nb::handle op, nb::handle axes, nb::handle out) {
  constexpr const char* kCall = "all_reduce";
  Backend& backend = self.get(kCall);
  const AxisSet group = toGroupAxes(axes, backend);
  const ReduceOp reduceOp = toReduceOp(op);
  TensorView in, result;
  checkTensors(backend, group, [&] { viewInPlaceOrOut(tensor, out, kCall, self.space(), in, result); });
  checkWithoutGil([&] { return backend.allReduce(in.data, result.data, in.elements, in.dtype, reduceOp, group); });
  return resultOf(tensor, out);
}

nb::object reduceScatter(PyBackend& self, nb::handle input, nb::handle output, nb::handle op, nb::handle axes) {
  constexpr const char* kCall = "reduce_scatter";
  Backend& backend = self.get(kCall);
  const AxisSet group = toGroupAxes(axes, backend);
  const ReduceOp reduceOp = toReduceOp(op);
  const auto n = static_cast<std::size_t>(backend.mesh().groupSize(group));
  TensorView in, outView;
  checkTensors(backend, group, [&] {
    in = viewObject(input, kCall, "input", self.space());
    outView = viewObject(output, kCall, "output", self.space());
    expectDtype(outView, in.dtype, kCall, "output", "the dtype of 'input'");
    expectBytes(outView, in.bytes / n, kCall, "output",
                fmt::format("'input' ({} bytes) split over the {}", in.bytes, groupText(backend.mesh(), group)));
    if (in.elements % n != 0) {
      raiseValueError(fmt::format("{}: tensor 'input' has {} elements, not divisible by the {}", kCall, in.elements,
                                  groupText(backend.mesh(), group)));
    }
  });
  checkWithoutGil(
      [&] { return backend.reduceScatter(in.data, outView.data, outView.elements, in.dtype, reduceOp, group); });
  return nb::borrow(output);
}

nb::object allGather(PyBackend& self, nb::handle input, nb::handle output, nb::handle axes) {
  constexpr const char* kCall = "all_gather";
  Backend& backend = self.get(kCall);
  const AxisSet group = toGroupAxes(axes, backend);
  const auto n = static_cast<std::size_t>(backend.mesh().groupSize(group));
  TensorView in, outView;
  checkTensors(backend, group, [&] {
    in = viewObject(input, kCall, "input", self.space());
    outView = viewObject(output, kCall, "output", self.space());
    expectDtype(outView, in.dtype, kCall, "output", "the dtype of 'input'");
    expectBytes(outView, in.bytes * n, kCall, "output",
                fmt::format("'input' ({} bytes) from each rank of the {}", in.bytes, groupText(backend.mesh(), group)));
  });
  checkWithoutGil([&] { return backend.allGather(in.data, outView.data, in.elements, in.dtype, group); });
  return nb::borrow(output);
}

nb::object allToAll(PyBackend& self, nb::handle input, nb::handle output, nb::handle axes) {
  constexpr const char* kCall = "all_to_all";
  Backend& backend = self.get(kCall);
  const AxisSet group = toGroupAxes(axes, backend);
  const auto n = static_cast<std::size_t>(backend.mesh().groupSize(group));
  TensorView in, outView;
  checkTensors(backend, group, [&] {
    in = viewObject(input, kCall, "input", self.space());
    outView = viewObject(output, kCall, "output", self.space());
    expectDtype(outView, in.dtype, kCall, "output", "the dtype of 'input'");
    expectBytes(outView, in.bytes, kCall, "output", "the size of 'input'");
    if (in.elements % n != 0) {
      raiseValueError(fmt::format("{}: tensor 'input' has {} elements, not divisible into one block per rank of the {}",
                                  kCall, in.elements, groupText(backend.mesh(), group)));
    }
    if (in.data == outView.data && in.bytes != 0) {
      raiseValueError(
          fmt::format("{}: 'input' and 'output' are the same memory; all_to_all is out-of-place only", kCall));
    }
  });
  checkWithoutGil([&] { return backend.allToAll(in.data, outView.data, in.elements / n, in.dtype, group); });
  return nb::borrow(output);
}

nb::object broadcast(PyBackend& self, nb::handle tensor, int root, nb::handle axes, nb::handle out) {
  constexpr const char* kCall = "broadcast";
  Backend& backend = self.get(kCall);
  const AxisSet group = toGroupAxes(axes, backend);
  TensorView in, result;
  checkTensors(backend, group, [&] { viewInPlaceOrOut(tensor, out, kCall, self.space(), in, result); });
  checkWithoutGil([&] { return backend.broadcast(in.data, result.data, in.elements, in.dtype, root, group); });
  return resultOf(tensor, out);
}

void pointToPoint(PyBackend& self, nb::handle tensor, int peer, bool isSend) {
  const char* call = isSend ? "send" : "recv";
  Backend& backend = self.get(call);
  TensorView view;
  try {
    view = viewObject(tensor, call, "tensor", self.space());
  } catch (nb::python_error& error) {
    // As checkTensors for a collective: the peer about to take part learns of the failed check
    // (Backend::refuseTransfers: Mismatch naming this rank there) instead of waiting for it.
    const Status local = Status::invalidArgument(nb::str(error.value()).c_str());
    const P2POp op{isSend ? P2POp::Kind::Send : P2POp::Kind::Recv, nullptr, 0, DataType::U8, peer};
    {
      nb::gil_scoped_release release;
      (void)backend.refuseTransfers(std::span<const P2POp>(&op, 1), local);
    }
    throw;
  }
  checkWithoutGil([&] {
    return isSend ? backend.send(view.data, view.elements, view.dtype, peer)
                  : backend.recv(view.data, view.elements, view.dtype, peer);
  });
}

// Over MPI_COMM_WORLD, or over the world ranks `ranks` (mesh coordinate i is world rank ranks[i]).
PyBackend* mpiBackend(nb::handle meshObj, const std::optional<std::vector<int>>& ranks) {
#ifdef CHIMERA_HAS_MPI
  const Mesh mesh = toMesh(meshObj);
  std::unique_ptr<Backend> backend;
  checkWithoutGil([&] {
    if (!ranks.has_value()) return createMpiBackend(mesh, backend);
    MpiBackendOptions options;
    const Status fromEnvironment = MpiBackendOptions::fromEnvironment(options);
    return fromEnvironment.isOk() ? createMpiBackendOnRanks(*ranks, mesh, options, backend) : fromEnvironment;
  });
  return new PyBackend(std::move(backend));
#else
  (void)meshObj;
  (void)ranks;
  raiseStatus(Status::unsupported("chimera was built without MPI (CHIMERA_WITH_MPI=OFF)"));
#endif
}

// Takes over the Backend a capsule named "chimera.Backend" holds (made by another extension
// module linking the same libchimera, e.g. chimera.torch's gloo mesh backend); the capsule is
// marked so that it no longer frees it. InvalidArgument for anything else or a second adoption.
PyBackend* adoptBackend(nb::handle capsule) {
  if (PyCapsule_IsValid(capsule.ptr(), "chimera.Backend") == 0)
    raiseStatus(Status::invalidArgument("_adopt_backend: expected a capsule named chimera.Backend"));
  if (PyCapsule_GetContext(capsule.ptr()) != nullptr)
    raiseStatus(Status::invalidArgument("_adopt_backend: this backend was adopted already"));
  auto* backend = static_cast<Backend*>(PyCapsule_GetPointer(capsule.ptr(), "chimera.Backend"));
  static int adopted = 0;
  PyCapsule_SetContext(capsule.ptr(), &adopted);
  return new PyBackend(std::unique_ptr<Backend>(backend));
}

PyBackend* ncclBackendMpi(nb::handle meshObj) {
#ifdef CHIMERA_HAS_CUDA
  const Mesh mesh = toMesh(meshObj);
  std::unique_ptr<Backend> backend;
  checkWithoutGil([&] { return createNcclBackendMpi(mesh, backend); });
  return new PyBackend(std::move(backend));
#else
  (void)meshObj;
  raiseStatus(Status::unsupported("chimera was built without CUDA/NCCL; the nccl backend is not available"));
#endif
}

PyBackend* ncclBackendWithId(nb::handle meshObj, int rank, int device, nb::bytes id) {
#ifdef CHIMERA_HAS_CUDA
  const Mesh mesh = toMesh(meshObj);
  NcclUniqueId uid;
  if (id.size() != uid.bytes.size()) {
    raiseStatus(
        Status::invalidArgument(fmt::format("nccl unique id has {} bytes, expected {}", id.size(), uid.bytes.size())));
  }
  std::memcpy(uid.bytes.data(), id.c_str(), uid.bytes.size());
  std::unique_ptr<Backend> backend;
  checkWithoutGil([&] { return createNcclBackend(mesh, rank, device, uid, backend); });
  return new PyBackend(std::move(backend));
#else
  (void)meshObj, (void)rank, (void)device, (void)id;
  raiseStatus(Status::unsupported("chimera was built without CUDA/NCCL; the nccl backend is not available"));
#endif
}

nb::bytes ncclUniqueId() {
#ifdef CHIMERA_HAS_CUDA
  NcclUniqueId uid;
  check(createNcclUniqueId(uid));
  return nb::bytes(uid.bytes.data(), uid.bytes.size());
#else
  raiseStatus(Status::unsupported("chimera was built without CUDA/NCCL; the nccl backend is not available"));
#endif
}

std::pair<int, int> mpiWorldRankSize() {
#ifdef CHIMERA_HAS_MPI
  int rank = 0;
  int size = 0;
  check(mpiWorld(rank, size));
  return {rank, size};
#else
  raiseStatus(Status::unsupported("chimera was built without MPI (CHIMERA_WITH_MPI=OFF)"));
#endif
}

}  // namespace

void bindBackend(nb::module_& m) {
  nb::class_<PyBackend>(m, "Backend",
                        "A transport bound to one Mesh: MPI (host memory) or NCCL (CUDA device memory). Every "
                        "collective is collective over the group along `axes` (default: every axis); counts come "
                        "from the tensors, which must be C-contiguous and in the backend's memory.")
      .def_prop_ro("name", [](const PyBackend& self) { return std::string(self.get("name").name()); })
      .def_prop_ro("mesh", [](const PyBackend& self) { return self.get("mesh").mesh(); })
      .def_prop_ro("rank", [](const PyBackend& self) { return self.get("rank").rank(); })
      .def_prop_ro(
          "default_topology", [](const PyBackend& self) { return self.get("default_topology").defaultTopology(); },
          "The cost model a Session on this backend prices with when it names none: 'host:N' on the host "
          "backends (MPI, gloo), 'bytes' on NCCL.")
      .def_prop_ro("closed", &PyBackend::closed)
      .def("all_reduce", &allReduce, nb::arg("tensor"), nb::arg("op") = "sum", nb::arg("axes").none() = nb::none(),
           nb::arg("out").none() = nb::none(),
           "out = op over the group of tensor (in place when out is None). Returns the result tensor.")
      .def("reduce_scatter", &reduceScatter, nb::arg("input"), nb::arg("output"), nb::arg("op") = "sum",
           nb::arg("axes").none() = nb::none(), "Member g receives block g of input reduced over the group.")
      .def("all_gather", &allGather, nb::arg("input"), nb::arg("output"), nb::arg("axes").none() = nb::none(),
           "output = every member's input concatenated by group index.")
      .def("all_to_all", &allToAll, nb::arg("input"), nb::arg("output"), nb::arg("axes").none() = nb::none(),
           "Block j of member i's input lands in block i of member j's output.")
      .def("broadcast", &broadcast, nb::arg("tensor"), nb::arg("root") = 0, nb::arg("axes").none() = nb::none(),
           nb::arg("out").none() = nb::none(), "The member with group index root copies its tensor to all.")
      .def(
          "send", [](PyBackend& self, nb::handle t, int peer) { pointToPoint(self, t, peer, true); }, nb::arg("tensor"),
          nb::arg("peer"), "Sends tensor to world rank peer.")
      .def(
          "recv", [](PyBackend& self, nb::handle t, int peer) { pointToPoint(self, t, peer, false); },
          nb::arg("tensor"), nb::arg("peer"), "Receives into tensor from world rank peer.")
      .def(
          "create_groups",
          [](PyBackend& self, const std::vector<nb::object>& groups) {
            Backend& backend = self.get("create_groups");
            std::vector<AxisSet> sets;
            for (const nb::object& axes : groups) sets.push_back(toGroupAxes(axes, backend));
            checkWithoutGil([&] { return backend.createGroups(sets); });
          },
          nb::arg("groups"),
          "Creates the communicators of these axis groups (each a name like 'tp' or 'dp+tp'), "
          "collectively over the world, once at setup. Per-rank sessions need their groups made here.")
      .def(
          "synchronize",
          [](PyBackend& self) {
            Backend& backend = self.get("synchronize");
            checkWithoutGil([&] { return backend.synchronize(); });
          },
          "Waits until every call issued so far completed (host backends: returns at once).")
      .def("close", &PyBackend::close, "Frees the backend and everything built on it (executors, sessions).")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](PyBackend& self, nb::args) { self.close(); })
      .def("__repr__", [](const PyBackend& self) {
        if (self.closed()) return std::string("<chimera.Backend (closed)>");
        const Backend& b = self.get("repr");
        return fmt::format("<chimera.Backend {} rank {} mesh {}>", b.name(), b.rank(), b.mesh().toString());
      });

  m.def("_mpi_backend", &mpiBackend, nb::arg("mesh"), nb::arg("ranks").none() = nb::none());
  m.def("_nccl_backend_mpi", &ncclBackendMpi, nb::arg("mesh"));
  m.def("_adopt_backend", &adoptBackend, nb::arg("capsule"));
  m.def("_nccl_backend", &ncclBackendWithId, nb::arg("mesh"), nb::arg("rank"), nb::arg("device"), nb::arg("unique_id"));
  m.def("nccl_unique_id", &ncclUniqueId, "A fresh NCCL unique id (bytes) to share with every rank.");
  m.def("world", &mpiWorldRankSize, "(rank, size) of the MPI world, initialising MPI if nobody has.");
  m.def(
      "_view",
      [](nb::handle tensor, const std::string& memory) {
        const TensorView view =
            viewObject(tensor, "_view", "tensor", memory == "device" ? MemorySpace::Device : MemorySpace::Host);
        return nb::make_tuple(reinterpret_cast<std::uintptr_t>(view.data), view.bytes,
                              std::string(dataTypeName(view.dtype)));
      },
      nb::arg("tensor"), nb::arg("memory") = "host",
      "(address, bytes, dtype) of the zero-copy view chimera takes of `tensor` (the checks every call applies).");
  m.def("_set_default_mesh", [](const Mesh& mesh) { defaultMesh() = mesh; });
  m.def(
      "_shutdown",
      []() {
        closeAllResources();
#ifdef CHIMERA_HAS_MPI
        finalizeMpi();
#endif
      },
      "Closes every native object, newest first, then finalises MPI if chimera initialised it.");
}

}  // namespace chimera::python
