// SPDX-License-Identifier: Apache-2.0
// Python module chimera.torch._C: creates the "chimera" c10d backend for torch.distributed.
// The only translation unit that includes torch's Python headers (they compile slowly).
// Everything else of chimera.torch goes through the package `chimera` (chimera._chimera), and
// so do this module's errors: they raise the exception of chimera's hierarchy named after the
// status (chimera.InvalidArgument, chimera.BackendError, ...).
#include <torch/python.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chimera/mpi_backend.hpp"
#include "mpi_group_backend.hpp"
#include "process_group.hpp"

namespace py = pybind11;

namespace chimera::torch_ext {
namespace {

// Raises chimera's exception of `status`'s code (chimera._chimera owns the hierarchy).
void check(const char* what, const Status& status) {
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
  check("process group", mpiWorldOf(mpiRank, mpiSize));
  if (mpiSize != worldSize)
    return "torch.distributed has " + std::to_string(worldSize) + " ranks but the MPI world has " +
           std::to_string(mpiSize) +
           ". The chimera backend runs CPU tensors over MPI and needs every rank started by an MPI launcher "
           "(mpirun -np " +
           std::to_string(worldSize) +
           " ...); under torchrun each process is a one-rank MPI world, which chimera cannot join (use backend "
           "\"gloo\" for CPU tensors there, or launch with mpirun)";
  if (isWorld && mpiRank != torchRank)
    return "torch rank " + std::to_string(torchRank) + " is MPI rank " + std::to_string(mpiRank) +
           "; set RANK from the MPI launcher (chimera.torch.init_process_group does)";
  return {};
}

c10::intrusive_ptr<c10d::Backend> createBackend(int rank, int size, std::vector<int> globalRanks, int worldSize,
                                                const std::string& groupId, c10::intrusive_ptr<c10d::Store> store,
                                                std::int64_t timeoutMs) {
  const bool isWorld = globalRanks.empty();
  if (isWorld)
    for (int r = 0; r < size; ++r) globalRanks.push_back(r);
  if (static_cast<int>(globalRanks.size()) != size)
    check("process group", Status::invalidArgument(std::to_string(globalRanks.size()) +
                                                   " global ranks for a group of " + std::to_string(size)));
  if (rank < 0 || rank >= size)
    check("process group",
          Status::invalidArgument("group rank " + std::to_string(rank) + " of " + std::to_string(size)));
  std::string hostError = mpiMismatch(worldSize, isWorld ? rank : globalRanks[static_cast<std::size_t>(rank)], isWorld);
  const int tag = static_cast<int>(std::hash<std::string>{}(groupId)&0x3fffffff);
  ChimeraProcessGroup::HostFactory makeHost = [globalRanks, tag, timeoutMs](std::unique_ptr<Backend>& out) {
    return createGroupBackend(globalRanks, tag, timeoutMs, out);
  };
  if (!hostError.empty()) {
    // Without CUDA there is nothing this group could run: say so now, on every rank.
    if (!ChimeraProcessGroup::cudaSupported()) check("process group", Status::unsupported(hostError));
    hostError = "chimera process group: " + hostError;
  }
  return c10::make_intrusive<ChimeraProcessGroup>(rank, size, std::move(makeHost), std::move(hostError),
                                                  std::move(store), mpiThreadMultiple());
}

}  // namespace
}  // namespace chimera::torch_ext

PYBIND11_MODULE(_C, m) {
  m.doc() = "chimera's torch.distributed backend (import chimera.torch to register it)";
  py::module_::import("torch.distributed");
  m.def("create_backend", &chimera::torch_ext::createBackend, py::arg("rank"), py::arg("size"), py::arg("global_ranks"),
        py::arg("world_size"), py::arg("group_id"), py::arg("store"), py::arg("timeout_ms") = 0,
        "Creates the c10d backend of one process group (collective over its members).");
  m.def(
      "mpi_world",
      [] {
        int rank = 0;
        int size = 0;
        chimera::torch_ext::check("mpi_world", chimera::torch_ext::mpiWorldOf(rank, size));
        return py::make_tuple(rank, size);
      },
      "(rank, size) of MPI_COMM_WORLD, initialising MPI when nobody has.");
  m.def("mpi_thread_multiple", &chimera::torch_ext::mpiThreadMultiple,
        "Whether MPI runs with MPI_THREAD_MULTIPLE (asynchronous CPU ops then run on a thread per group).");
  m.def("cuda_supported", &chimera::torch_ext::ChimeraProcessGroup::cudaSupported,
        "Whether this build runs CUDA tensors (on chimera's NCCL backend).");
  m.def("finalize_mpi", &chimera::torch_ext::finalizeExtensionMpi,
        "Finalises MPI if chimera initialised it (at interpreter exit).");
}
