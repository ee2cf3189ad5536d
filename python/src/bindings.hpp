// SPDX-License-Identifier: Apache-2.0
// Shared declarations of the nanobind extension `chimera._chimera`: one bind function per
// part of the API (core types, backends, executor, session, planning), and the conversions
// from Python arguments (str or object) to chimera types that they all use.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/layout.hpp"
#include "chimera/mesh.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/tensor_spec.hpp"
#include "chimera/types.hpp"

namespace chimera::python {

namespace nb = nanobind;

void bindErrors(nb::module_& m);
void bindCore(nb::module_& m);
void bindBackend(nb::module_& m);
void bindExecutor(nb::module_& m);
void bindSession(nb::module_& m);
void bindPlan(nb::module_& m);
void bindBench(nb::module_& m);
void bindRouted(nb::module_& m);

/// The mesh `chimera.init` was last given; Layout("...") without a mesh parses on it.
std::optional<Mesh>& defaultMesh();

/// A Mesh from a Mesh object or its text ("pp=2,tp=4"; the world size is the product).
Mesh toMesh(nb::handle obj);
/// A Layout from a Layout object or its text parsed on `mesh`.
Layout toLayout(nb::handle obj, const Mesh& mesh, const char* what);
/// A DataType from "bf16", "float32", numpy or torch dtypes (anything whose str() names one).
DataType toDataType(nb::handle obj);
/// A ReduceOp from its name ("sum", "avg", ...).
ReduceOp toReduceOp(nb::handle obj);
/// An AxisSet on `mesh` from None (every axis), "tp", "dp+tp" or a sequence of axis names.
AxisSet toAxes(nb::handle obj, const Mesh& mesh);
/// toAxes for the group of a call on `backend`: axes that name no group of its mesh are a
/// failure before the group is known, announced to every rank (Backend::announceFault).
AxisSet toGroupAxes(nb::handle obj, Backend& backend);
/// The world size a mesh text names (product of its sizes; 0 when malformed).
int meshTextWorldSize(const std::string& text);

/// The plan `from` -> `to` of a tensor of `shape` and `dtype` on `mesh` priced by `cost`, not
/// run: {"bytes": over all ranks, "max_rank_bytes": the busiest rank's, "plan": its text}.
nb::dict redistributionReport(const Mesh& mesh, const std::vector<std::int64_t>& shape, nb::handle dtype,
                              nb::handle from, nb::handle to, const PlanCost& cost);

}  // namespace chimera::python
