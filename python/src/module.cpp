// SPDX-License-Identifier: Apache-2.0
// Entry point of the extension module `chimera._chimera`; the public package is python/chimera.
#include <nanobind/nanobind.h>

#include "bindings.hpp"

NB_MODULE(_chimera, m) {
  m.doc() = "chimera's native bindings (use the `chimera` package).";
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
