// SPDX-License-Identifier: Apache-2.0
// Binding of the Executor: run a chain (as written, planned or fused) or redistribute a
// tensor between layouts, on the caller's tensors (checked to be exactly the rank's local
// tensors of the layouts, a misfit failing every rank; the logical spec is derived from them
// unless given).
#include <fmt/format.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "chimera/executor.hpp"
#include "cost_choice.hpp"
#include "errors.hpp"
#include "local_tensor.hpp"
#include "resources.hpp"

namespace chimera::python {
namespace {

ChainMode toMode(const std::string& text) {
  if (text == "baseline") return ChainMode::Baseline;
  if (text == "planned") return ChainMode::Planned;
  if (text == "fused") return ChainMode::Fused;
  raiseStatus(Status::invalidArgument(fmt::format("unknown mode '{}' (baseline, planned, fused)", text)));
}

/// The rank's local tensor as localBuffer checks it, or, when it does not fit, no buffer and
/// the problem in `problem` (the first one found). The executor is then still called: its
/// buffer agreement fails the call on every rank at once (docs/reliability.md) where raising
/// here would leave the peers waiting in the call's first collective until the timeout.
LocalBuffer fittingOrNone(nb::handle obj, const TensorSpec& spec, const Layout& layout, int rank, const char* call,
                          const char* name, MemorySpace space, std::string& problem) {
  try {
    return localBuffer(obj, spec, layout, rank, call, name, space);
  } catch (nb::python_error& error) {
    if (problem.empty()) problem = nb::str(error.value()).c_str();
    return {};
  }
}

/// Runs `call` (an executor call, without the GIL); this rank's tensor problem, where there is
/// one, is raised as InvalidArgument in place of the executor's verdict.
template <typename Call>
void runOrRaise(const std::string& problem, Call call) {
  Status status;
  {
    nb::gil_scoped_release release;
    status = call();
  }
  if (!problem.empty()) raiseStatus(Status::invalidArgument(problem));
  check(status);
}

/// The Python-side Executor: owns the C++ executor and the cost model it was given until closed
/// (none given: the executor chooses its own, as a C++ one does).
class PyExecutor : public Resource {
 public:
  PyExecutor(nb::object backend, nb::handle cost)
      : Resource(nb::cast<PyBackend*>(backend)),
        backendRef_(std::move(backend)),
        cost_(cost.is_none() ? nullptr : makeCost(cost)) {
    executor_ = std::make_unique<Executor>(owner()->get("Executor"), cost_.get());
  }
  ~PyExecutor() override { PyExecutor::close(); }
  void close() override { executor_.reset(); }

  Executor& get(const char* call) {
    if (executor_ == nullptr) {
      raiseStatus(Status::invalidArgument(fmt::format("{}: the executor (or its backend) is closed", call)));
    }
    return *executor_;
  }
  const PyBackend& backend() const { return *owner(); }

  nb::object runChain(const std::string& chainText, nb::handle input, nb::handle output, nb::handle from,
                      nb::handle consume, nb::handle specObj, const std::string& mode) {
    constexpr const char* kCall = "run_chain";
    Executor& executor = get(kCall);
    const Backend& b = backend().get(kCall);
    const Mesh& mesh = b.mesh();
    ChainRequest request;
    request.from = toLayout(from, mesh, "from");
    check(Chain::parse(chainText, mesh, request.chain));
    std::optional<Layout> consumed;
    if (!consume.is_none()) consumed = toLayout(consume, mesh, "consume");
    request.spec = resolveSpec(specObj, {{input, &request.from}}, b.rank(), kCall);
    ChainTrace trace;
    check(traceChain(request.from, request.chain, request.spec, trace));
    const Layout outLayout = consumed ? *consumed : trace.final();
    check(outLayout.validate(request.spec));
    request.consume = consumed;
    const ChainMode chainMode = toMode(mode);
    std::string problem;
    const LocalBuffer in =
        fittingOrNone(input, request.spec, request.from, b.rank(), kCall, "input", backend().space(), problem);
    const LocalBuffer out =
        fittingOrNone(output, request.spec, outLayout, b.rank(), kCall, "output", backend().space(), problem);
    runOrRaise(problem, [&] { return executor.runChain(request, chainMode, in.data, in.bytes, out.data, out.bytes); });
    return nb::borrow(output);
  }

  nb::object redistribute(nb::handle tensor, nb::handle from, nb::handle to, nb::handle output, nb::handle specObj) {
    constexpr const char* kCall = "redistribute";
    Executor& executor = get(kCall);
    const Backend& b = backend().get(kCall);
    const Layout fromLayout = toLayout(from, b.mesh(), "from");
    const Layout toLayoutValue = toLayout(to, b.mesh(), "to");
    const TensorSpec spec = resolveSpec(specObj, {{tensor, &fromLayout}, {output, &toLayoutValue}}, b.rank(), kCall);
    check(fromLayout.validate(spec));
    check(toLayoutValue.validate(spec));
    std::string problem;
    const LocalBuffer in =
        fittingOrNone(tensor, spec, fromLayout, b.rank(), kCall, "tensor", backend().space(), problem);
    const LocalBuffer out =
        fittingOrNone(output, spec, toLayoutValue, b.rank(), kCall, "out", backend().space(), problem);
    runOrRaise(problem, [&] {
      return executor.redistribute(spec, fromLayout, toLayoutValue, in.data, in.bytes, out.data, out.bytes);
    });
    return nb::borrow(output);
  }

 private:
  nb::object backendRef_;  // keeps the backend's wrapper alive as long as this executor
  std::unique_ptr<PlanCost> cost_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace

void bindExecutor(nb::module_& m) {
  nb::class_<PyExecutor>(m, "Executor",
                         "Runs chains and redistributions on a Backend, planning each distinct one once (cached). "
                         "Every rank of the mesh must make the same calls in the same order.")
      .def(nb::init<nb::object, nb::handle>(), nb::arg("backend"), nb::arg("topology").none() = nb::none(),
           "topology: the cost model, \"bytes\" (fuse whenever fewer bytes move), a topology preset ('host:8', "
           "'pcie-4080x8', ...) "
           "or a calibrated profile path; None: CHIMERA_TOPOLOGY, else the backend's own (host:N on the MPI and "
           "gloo host backends, bytes on NCCL), as a Session prices. `.topology` names it.")
      .def("run_chain", &PyExecutor::runChain, nb::arg("chain"), nb::arg("input").none(), nb::arg("output").none(),
           nb::arg("from_layout"), nb::arg("consume").none() = nb::none(), nb::arg("spec").none() = nb::none(),
           nb::arg("mode") = "planned",
           "Runs `chain` (\"allreduce:tp,send:pp\") on this rank's local tensor `input` of `from_layout` into "
           "`output`, the local tensor of `consume` (default: the chain's final layout). mode: baseline (as "
           "written), planned (the planner's decision) or fused. Returns output.")
      .def("redistribute", &PyExecutor::redistribute, nb::arg("tensor").none(), nb::arg("from_layout"),
           nb::arg("to_layout"), nb::arg("out").none(), nb::arg("spec").none() = nb::none(),
           "Moves the tensor placed as from_layout into to_layout (local tensor `out`) by the cheapest plan.")
      .def_prop_ro("topology", [](PyExecutor& self) { return std::string(self.get("topology").cost().name()); })
      .def(
          "plan_redistribution",
          [](PyExecutor& self, const std::vector<std::int64_t>& shape, nb::handle dtype, nb::handle from,
             nb::handle to) {
            const Executor& executor = self.get("plan_redistribution");
            return redistributionReport(self.backend().get("plan_redistribution").mesh(), shape, dtype, from, to,
                                        executor.cost());
          },
          nb::arg("shape"), nb::arg("dtype"), nb::arg("from_layout"), nb::arg("to_layout"),
          "chimera.plan_redistribution priced by this executor's cost model: the plan redistribute() runs for "
          "from_layout -> to_layout, not run (nothing is communicated).")
      .def_prop_ro("cached_plans", [](PyExecutor& self) { return self.get("cached_plans").cachedPlans(); })
      .def_prop_ro("evicted_plans", [](PyExecutor& self) { return self.get("evicted_plans").evictedPlans(); })
      .def_prop_ro("planning_passes", [](PyExecutor& self) { return self.get("planning_passes").planningPasses(); })
      .def(
          "set_prepared_plan_limit",
          [](PyExecutor& self, std::size_t limit) {
            check(self.get("set_prepared_plan_limit").setPreparedPlanLimit(limit));
          },
          nb::arg("limit"))
      .def("close", &PyExecutor::close);
}

}  // namespace chimera::python
