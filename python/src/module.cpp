// SPDX-License-Identifier: Apache-2.0
// Entry point of the extension module `chimera._chimera`; the public package is python/chimera.
#include <nanobind/nanobind.h>

#include "bindings.hpp"

NB_MODULE(_chimera, m) {
  m.doc() = "chimera's native bindings (use the `chimera` package).";
  // torch never frees an autograd graph still referenced when the interpreter exits, and a graph
  // through chimera.torch.moe holds the exchange, its dispatch state and the backend in its
  // contexts. nanobind's check at exit would report those as leaks of these bindings on every
  // rank of a training script that ends holding its last step's graph.
  nanobind::set_leak_warnings(false);
  chimera::python::bindErrors(m);
  chimera::python::bindCore(m);
  chimera::python::bindBackend(m);
  chimera::python::bindExecutor(m);
  chimera::python::bindSession(m);
  chimera::python::bindPlan(m);
  chimera::python::bindBench(m);
  chimera::python::bindRouted(m);
#ifdef CHIMERA_HAS_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
#ifdef CHIMERA_HAS_MPI
  m.attr("has_mpi") = true;
#else
  m.attr("has_mpi") = false;
#endif
}
