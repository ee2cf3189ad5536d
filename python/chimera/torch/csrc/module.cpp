// SPDX-License-Identifier: Apache-2.0
// Python module chimera.torch._C: creates the "chimera" c10d backend for torch.distributed.
// The only translation unit that includes torch's Python headers (they compile slowly).
// Everything else of chimera.torch goes through the package `chimera` (chimera._chimera), and
// so do this module's errors: they raise the exception of chimera's hierarchy named after the
// status (chimera.InvalidArgument, chimera.BackendError, ...).
#include <torch/python.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chimera/mpi_backend.hpp"
#include "host_transport.hpp"
#include "mpi_group_backend.hpp"
#include "mpi_rendezvous.hpp"
#include "process_group.hpp"

namespace py = pybind11;

namespace chimera::torch_ext {
namespace {

// Raises chimera's exception of `status`'s code (chimera._chimera owns the hierarchy).
void raiseChimeraError(const char* what, const Status& status) {
  if (status.isOk()) return;
  const std::string message = std::string("chimera ") + what + ": " + status.message();
  const py::object type = py::module_::import("chimera._chimera").attr("_error_type")(static_cast<int>(status.code()));
  PyErr_SetString(type.ptr(), message.c_str());
  throw py::error_already_set();
}

// Why this process cannot run CPU tensors of a torch world of `worldSize` ranks over MPI
// (empty when it can): MPI must have launched every rank, with torch's ranks as MPI's.
std::string mpiMismatch(int worldSize, int torchRank, bool isWorld) {
  int mpiRank = 0;
  int mpiSize = 0;
  raiseChimeraError("process group", mpiWorldOf(mpiRank, mpiSize));
  if (mpiSize != worldSize)
    return "torch.distributed has " + std::to_string(worldSize) + " ranks but the MPI world has " +
           std::to_string(mpiSize) +
           " (the MPI transport needs every rank started by one MPI launch; "
           "CHIMERA_TORCH_TRANSPORT=gloo, the default outside an MPI launch, bootstraps from the store instead)";
  if (isWorld && mpiRank != torchRank)
    return "torch rank " + std::to_string(torchRank) + " is MPI rank " + std::to_string(mpiRank) +
           "; set RANK from the MPI launcher (chimera.torch.init_process_group does)";
  return {};
}

// Waits until every member of the group has reached its creation (keys in the group's own
// store), at most `timeoutMs`, so that the collective creation of its communicators that
// follows cannot wait without end. Names the ranks that did not arrive (Timeout).
Status awaitMembers(c10d::Store& store, int rank, int size, std::int64_t timeoutMs) {
  const std::string prefix = "chimera/created/";
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + std::to_string(r));
  try {
    store.set(keys[static_cast<std::size_t>(rank)], std::vector<uint8_t>{1});
    store.wait(keys, std::chrono::milliseconds(timeoutMs));
  } catch (const std::exception& error) {
    std::string missing;
    for (int r = 0; r < size; ++r)
      if (!store.check({keys[static_cast<std::size_t>(r)]}))
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    return Status::timeout("group rank(s) " + missing + " of " + std::to_string(size) +
                           " did not create the group within its timeout of " + std::to_string(timeoutMs) + " ms (" +
                           error.what() + ")");
  }
  return Status::ok();
}

// The c10d backend of one group, its host transport made now: over `gloo` (a gloo backend of
// the same group, made with the same timeout) when given, else over MPI. `timeoutMs` and
// `abortOnTimeout` are the group's options as chimera.torch.Options resolved them.
c10::intrusive_ptr<c10d::Backend> createBackend(int rank, int size, std::vector<int> globalRanks, int worldSize,
                                                const std::string& groupId, c10::intrusive_ptr<c10d::Store> store,
                                                std::int64_t timeoutMs, bool abortOnTimeout,
                                                std::optional<c10::intrusive_ptr<c10d::Backend>> gloo) {
  const bool isWorld = globalRanks.empty();
  if (isWorld)
    for (int r = 0; r < size; ++r) globalRanks.push_back(r);
  if (static_cast<int>(globalRanks.size()) != size)
    raiseChimeraError("process group", Status::invalidArgument(std::to_string(globalRanks.size()) +
                                                               " global ranks for a group of " + std::to_string(size)));
  if (rank < 0 || rank >= size)
    raiseChimeraError("process group",
                      Status::invalidArgument("group rank " + std::to_string(rank) + " of " + std::to_string(size)));
  if (timeoutMs <= 0)
    raiseChimeraError("process group", Status::invalidArgument("a timeout of " + std::to_string(timeoutMs) + " ms"));
  auto options = ChimeraProcessGroup::Options::create(std::chrono::milliseconds(timeoutMs), abortOnTimeout);
  HostTransport host;
  bool asyncCpu = true;  // gloo's backend takes calls from any thread
  if (gloo.has_value() && *gloo) {
    raiseChimeraError("process group (gloo transport)", createGlooTransport(*gloo, timeoutMs, host));
  } else {
    const std::string mismatch =
        mpiMismatch(worldSize, isWorld ? rank : globalRanks[static_cast<std::size_t>(rank)], isWorld);
    if (!mismatch.empty()) raiseChimeraError("process group", Status::unsupported(mismatch));
    Status status;
    {
      py::gil_scoped_release release;
      status = awaitMembers(*store, rank, size, timeoutMs);
      const int tag = static_cast<int>(std::hash<std::string>{}(groupId)&0x3fffffff);
      if (status.isOk()) status = createMpiTransport(globalRanks, tag, timeoutMs, abortOnTimeout, host);
    }
    raiseChimeraError("process group (MPI transport)", status);
    asyncCpu = mpiThreadMultiple();
  }
  return c10::make_intrusive<ChimeraProcessGroup>(rank, size, std::move(host), std::move(store), asyncCpu,
                                                  std::move(options));
}

// The capsule that hands a chimera Backend to the package `chimera` (chimera._chimera's
// _adopt_backend takes it over and marks the capsule with a context); a capsule never adopted
// frees the backend itself.
py::capsule backendCapsule(std::unique_ptr<chimera::Backend> backend) {
  PyObject* capsule = PyCapsule_New(backend.get(), "chimera.Backend", [](PyObject* self) {
    if (PyCapsule_GetContext(self) == nullptr)
      delete static_cast<chimera::Backend*>(PyCapsule_GetPointer(self, "chimera.Backend"));
  });
  if (capsule == nullptr) throw py::error_already_set();
  (void)backend.release();
  return py::reinterpret_steal<py::capsule>(capsule);
}

// chimera's Backend over the mesh `meshText` of the torch global ranks `globalRanks` on gloo
// (see createGlooMeshBackend), as a capsule for chimera._chimera._adopt_backend. `makeGroup`
// (store prefix, rank, size, timeout_ms) -> a ProcessGroupGloo, called with the GIL held
// whenever the backend creates a group (also later, from createGroups without the GIL).
py::capsule glooMeshBackend(const std::string& meshText, const std::vector<int>& globalRanks, int globalRank,
                            c10::intrusive_ptr<c10d::Store> store, py::function makeGroup, std::int64_t timeoutMs) {
  Mesh mesh;
  raiseChimeraError("gloo mesh backend", Mesh::parse(meshText, mesh));
  // The callable outlives this call inside the backend, which may be freed without the GIL.
  std::shared_ptr<py::function> maker(new py::function(std::move(makeGroup)), [](py::function* f) {
    py::gil_scoped_acquire acquire;
    delete f;
  });
  const GlooGroupMaker make = [maker](const std::string& prefix, int rank, int size, std::int64_t timeout) {
    py::gil_scoped_acquire acquire;
    return (*maker)(prefix, rank, size, timeout).cast<c10::intrusive_ptr<c10d::Backend>>();
  };
  std::unique_ptr<chimera::Backend> backend;
  Status status;
  {
    py::gil_scoped_release release;
    status = createGlooMeshBackend(mesh, globalRanks, globalRank, std::move(store), make, timeoutMs, backend);
  }
  raiseChimeraError("gloo mesh backend", status);
  return backendCapsule(std::move(backend));
}

// torch's ProcessGroup of a chimera group, named "chimera": a plugin's group is otherwise
// named "custom" (ProcessGroup::getBackendName), which is what DDP's logging would report.
class NamedProcessGroup final : public c10d::ProcessGroup {
 public:
  NamedProcessGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
      : c10d::ProcessGroup(std::move(store), rank, size) {}
  const std::string getBackendName() const override { return "chimera"; }
};

}  // namespace
}  // namespace chimera::torch_ext

PYBIND11_MODULE(_C, m) {
  m.doc() = "chimera's torch.distributed backend (import chimera.torch to register it)";
  py::module_::import("torch.distributed");
  m.def("create_backend", &chimera::torch_ext::createBackend, py::arg("rank"), py::arg("size"), py::arg("global_ranks"),
        py::arg("world_size"), py::arg("group_id"), py::arg("store"), py::arg("timeout_ms"),
        py::arg("abort_on_timeout"), py::arg("gloo") = py::none(),
        "Creates the c10d backend of one process group (collective over its members): its host transport over "
        "`gloo` (a gloo backend of the same group) when given, else over MPI; every wait bounded by `timeout_ms`, "
        "a Timeout ending the job when `abort_on_timeout` (chimera.torch.Options resolves both).");
  m.def("gloo_mesh_backend", &chimera::torch_ext::glooMeshBackend, py::arg("mesh"), py::arg("global_ranks"),
        py::arg("global_rank"), py::arg("store"), py::arg("make_group"), py::arg("timeout_ms"),
        "chimera's Backend over a mesh of torch global ranks on gloo (collective over them; `make_group(prefix, "
        "rank, size, timeout_ms)` makes each gloo group, `store` counts the mesh's creations), as a capsule for "
        "chimera._chimera._adopt_backend.");
  m.def(
      "named_process_group",
      [](c10::intrusive_ptr<c10d::Store> store, int rank, int size) -> c10::intrusive_ptr<c10d::ProcessGroup> {
        return c10::make_intrusive<chimera::torch_ext::NamedProcessGroup>(std::move(store), rank, size);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"),
      "A torch ProcessGroup whose backend name is \"chimera\" (register the backends on it).");
  m.def(
      "mpi_world",
      [] {
        int rank = 0;
        int size = 0;
        chimera::torch_ext::raiseChimeraError("mpi_world", chimera::torch_ext::mpiWorldOf(rank, size));
        return py::make_tuple(rank, size);
      },
      "(rank, size) of MPI_COMM_WORLD, initialising MPI when nobody has.");
  m.def(
      "mpi_all_gather_bytes",
      [](const py::bytes& mine, std::int64_t timeoutMs, const std::string& what) {
        const std::string bytes = mine;
        std::vector<std::string> gathered;
        chimera::Status status;
        {
          py::gil_scoped_release release;
          status = chimera::torch_ext::mpiAllGatherBytes(bytes, timeoutMs, what, gathered);
        }
        chimera::torch_ext::raiseChimeraError("rendezvous", status);
        py::list out;
        for (const std::string& g : gathered) out.append(py::bytes(g));
        return out;
      },
      py::arg("mine"), py::arg("timeout_ms"), py::arg("what"),
      "Every MPI world rank's bytes, in rank order, on every rank (collective over MPI_COMM_WORLD), bounded by "
      "timeout_ms (chimera.Timeout naming `what`): the rendezvous' exchange before any store exists.");
  m.def("mpi_thread_multiple", &chimera::torch_ext::mpiThreadMultiple,
        "Whether MPI runs with MPI_THREAD_MULTIPLE (asynchronous CPU ops then run on a thread per group).");
  m.def("cuda_supported", &chimera::torch_ext::ChimeraProcessGroup::cudaSupported,
        "Whether this build runs CUDA tensors (on chimera's NCCL backend).");
  m.def("finalize_mpi", &chimera::torch_ext::finalizeExtensionMpi,
        "Finalises MPI if chimera initialised it (at interpreter exit).");
}
