// SPDX-License-Identifier: Apache-2.0
// chimera's C++ API in one include: the stable tier (status and types, meshes, layouts and
// tensor specs, chains, backends, the Executor and the Session). The planning and cost
// headers under chimera/planning/ are an unstable tier (docs/architecture.md) and are not
// pulled in here beyond what the Executor and Session declarations need.
#pragma once

#include "chimera/backend.hpp"
#include "chimera/chain.hpp"
#include "chimera/executor.hpp"
#include "chimera/layout.hpp"
#include "chimera/mesh.hpp"
#include "chimera/op_kind.hpp"
#include "chimera/routed_exchange.hpp"
#include "chimera/session.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"
#include "chimera/types.hpp"

#if defined(CHIMERA_HAS_MPI)
#include "chimera/mpi_backend.hpp"
#endif
#if defined(CHIMERA_HAS_CUDA)
#include "chimera/nccl_backend.hpp"
#endif
