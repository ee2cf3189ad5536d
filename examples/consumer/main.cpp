// SPDX-License-Identifier: Apache-2.0
// A program outside chimera's tree, built against an installed copy through
// find_package(chimera) and the umbrella header: it runs a Session on the MPI backend (an
// AllReduce whose result is read as shards, which the Session runs as a ReduceScatter) and
// checks every element it reads. It proves that the installed headers, the library and its
// MPI dependency link and work. Run it as `mpirun -np 4 chimera-consumer` (one rank works too).
#include <mpi.h>
#include <chimera/chimera.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

// Reports a failed call on this rank and ends the job (every rank gets the same error here).
void check(const char* what, const chimera::Status& status) {
  if (status.isOk()) return;
  std::fprintf(stderr, "consumer: %s: %s\n", what, status.toString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  chimera::Mesh mesh;
  check("mesh", chimera::Mesh::parse("tp=" + std::to_string(world), mesh));
  std::unique_ptr<chimera::Backend> backend;
  check("backend", chimera::createMpiBackend(mesh, backend));
  std::unique_ptr<chimera::Session> session;
  check("session", chimera::Session::create(*backend, chimera::SessionOptions{}, session));

  // A 4*world x 8 float tensor held as partial sums over tp: rank r holds r+1 everywhere.
  const chimera::TensorSpec spec{{4 * static_cast<std::int64_t>(world), 8}, chimera::DataType::F32};
  chimera::Layout partial;
  chimera::Layout shards;
  check("layout", chimera::Layout::parse("tp=P", mesh, partial));
  check("layout", chimera::Layout::parse("tp=S0", mesh, shards));
  std::vector<float> data(static_cast<std::size_t>(spec.numElements()), static_cast<float>(rank + 1));

  chimera::AxisSet tp;
  check("axes", mesh.parseAxes("tp", tp));
  chimera::TensorHandle tensor;
  chimera::TensorHandle reduced;
  check("tensor", session->tensor(data.data(), data.size() * sizeof(float), spec, partial, tensor));
  check("allReduce", session->allReduce(tensor, tp, reduced));
  check("consume", session->consume(reduced, shards));

  // Rank r reads rows [4r, 4r+4): every element is 1 + 2 + ... + world.
  const float expected = static_cast<float>(world * (world + 1) / 2);
  int wrong = 0;
  for (std::size_t i = static_cast<std::size_t>(rank) * 32; i < static_cast<std::size_t>(rank + 1) * 32; ++i)
    wrong += data[i] != expected ? 1 : 0;
  const chimera::SessionStats stats = session->stats();
  std::printf("consumer rank %d/%d: Session on the installed library, %d wrong elements, %llu of %llu chains fused\n",
              rank, world, wrong, static_cast<unsigned long long>(stats.fusedChains),
              static_cast<unsigned long long>(stats.chainsRun));
  session.reset();
  backend.reset();
  MPI_Finalize();
  // With more than one rank the Session must have fused the AllReduce into its shards.
  return wrong == 0 && (world == 1 || stats.fusedChains == 1) ? 0 : 1;
}
