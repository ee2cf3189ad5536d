// SPDX-License-Identifier: Apache-2.0
// Candidate programs of the planner (private). A program is a list of steps, each with the
// layout it produces; the planner prices every candidate and keeps the cheapest.
#pragma once

#include <vector>

#include "chimera/layout.hpp"
#include "chimera/planning/plan.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera::detail {

/// One step of a candidate program and the layout it leaves the tensor in.
struct ProgramStep {
  PlanStep step;  ///< input/output are assigned when the program becomes a Plan
  Layout output;
};

/// A candidate program.
using Program = std::vector<ProgramStep>;

/// Local trims of `from` before any reduction or move: every axis that is R in `from` and
/// S(d) in `to` also splits a dim of `from`, so that each rank keeps only what ranks with
/// its coordinates on those axes will read. One trim puts each axis on its `to` dim (in
/// `to`'s nesting order), the others put them all on one dim e (to be moved later by an
/// AllToAll when that is cheaper). Only trims valid for `spec` and different from `from`.
std::vector<Layout> trimsToward(const Layout& from, const Layout& to, const TensorSpec& spec);

/// Ways to reduce the partial axes `axes` of `from` (all partial with one op), with `to`
/// the layout wanted in the end: one AllReduce; a ReduceScatter toward each dim that
/// divides evenly; reduction straight toward `to` (ReduceScatter of the axes `to` shards,
/// grouped by dim, then AllReduce of the rest on the shards); and the hierarchical forms
/// (see patterns/merge_all_reduces.cpp).
std::vector<Program> reductionOptions(const Layout& from, AxisSet axes, const Layout& to, const TensorSpec& spec);

/// The program prefixes that end without the partial axes `reduce`: for the input and for
/// each trim (trimsToward), every reduction option (a single empty prefix when `reduce` is
/// empty and there is no trim).
std::vector<Program> reductionPrefixes(const Layout& from, const Layout& to, AxisSet reduce, const TensorSpec& spec);

/// Hierarchical AllReduce over `axes` (>= 2 axes): ReduceScatter over an outer part A,
/// AllReduce over the rest B on the shard, AllGather over A. One program per (A, dim).
std::vector<Program> hierarchicalAllReduces(const Layout& from, AxisSet axes, const TensorSpec& spec);

/// Ways to move a tensor without reductions from `from` to `to`: directly (many-to-many,
/// a local copy, or the single collective the many-to-many collapses to), or to a sharded
/// layout at the destination followed by an AllGather there. A many-to-many lists every
/// rank's flows but builds the box transfers of `rank` only (all for kWorldPlan).
[[nodiscard]] Status movementOptions(const Layout& from, const Layout& to, const TensorSpec& spec, int rank,
                                     std::vector<Program>& out);

/// Turns a program into the Plan of `rank` (kWorldPlan for all) from `from` to `to`,
/// appending a Scale step when scale != 1. The program's steps move into the plan (a
/// many-to-many's transfers are not copied).
Plan assemblePlan(const TensorSpec& spec, const Layout& from, const Layout& to, Program&& program, std::int64_t scale,
                  int rank);

}  // namespace chimera::detail
