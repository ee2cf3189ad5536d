// SPDX-License-Identifier: Apache-2.0
// Python module chimera.torch._C: creates the "chimera" c10d backend for torch.distributed.
// The only translation unit that includes torch's Python headers (they compile slowly).
#include <torch/python.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chimera/mpi_backend.hpp"
#include "mpi_group_backend.hpp"
#include "process_group.hpp"

namespace py = pybind11;

namespace chimera::torch_ext {
namespace {

void check(const char* what, const Status& status) {
  TORCH_CHECK(status.isOk(), "chimera ", what, ": ", status.toString());
}

// torch's ranks must be MPI's: the world group proves it, and sub-groups rely on it.
void checkWorld(int rank, int size) {
  int mpiRank = 0;
  int mpiSize = 0;
  check("process group", mpiWorldOf(mpiRank, mpiSize));
  TORCH_CHECK(mpiSize == size,
              "chimera process group: torch.distributed has ", size, " ranks but the MPI world has ", mpiSize,
              ". The chimera backend runs CPU tensors over MPI and needs every rank started by an MPI launcher "
              "(mpirun -np ", size, " ...); under torchrun each process is a one-rank MPI world, which chimera "
              "cannot join (use backend \"gloo\" there, or launch with mpirun)");
  TORCH_CHECK(mpiRank == rank, "chimera process group: torch rank ", rank, " is MPI rank ", mpiRank,
              "; set RANK from the MPI launcher (chimera.torch.init_process_group does)");
}

c10::intrusive_ptr<c10d::Backend> createBackend(int rank, int size, std::vector<int> globalRanks,
                                                const std::string& groupId) {
  int mpiRank = 0;
  int mpiSize = 0;
  check("process group", mpiWorldOf(mpiRank, mpiSize));
  if (globalRanks.empty()) {
    checkWorld(rank, size);
    for (int r = 0; r < size; ++r) globalRanks.push_back(r);
  }
  TORCH_CHECK(static_cast<int>(globalRanks.size()) == size, "chimera process group: ", globalRanks.size(),
              " global ranks for a group of ", size);
  TORCH_CHECK(rank >= 0 && rank < size && globalRanks[static_cast<std::size_t>(rank)] == mpiRank,
              "chimera process group: group rank ", rank, " is not MPI rank ", mpiRank);
  const int tag = static_cast<int>(std::hash<std::string>{}(groupId) & 0x3fffffff);
  std::unique_ptr<Backend> backend;
  check("process group", createGroupBackend(globalRanks, tag, backend));
  return c10::make_intrusive<ChimeraProcessGroup>(rank, size, std::move(backend));
}

}  // namespace
}  // namespace chimera::torch_ext

PYBIND11_MODULE(_C, m) {
  m.doc() = "chimera's torch.distributed backend (import chimera.torch to register it)";
  py::module_::import("torch.distributed");
  m.def("create_backend", &chimera::torch_ext::createBackend, py::arg("rank"), py::arg("size"),
        py::arg("global_ranks"), py::arg("group_id"),
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
  m.def("finalize_mpi", &chimera::finalizeMpi, "Finalises MPI if chimera initialised it (at interpreter exit).");
}
