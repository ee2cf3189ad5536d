// SPDX-License-Identifier: Apache-2.0
// Binding of the routed exchange (MoE dispatch and combine) on the caller's arrays. Every array
// is checked (contiguous, dtype, memory space, exact size); a rank whose check fails still
// takes part in the exchange with its failure, so that every rank of the group raises instead
// of waiting for it.
#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "chimera/routed_exchange.hpp"
#include "errors.hpp"
#include "resources.hpp"
#include "tensor_view.hpp"

namespace chimera::python {
namespace {

// The checks of one call: each view's failure is kept as a Status for the exchange to carry.
class Checks {
 public:
  Checks(const char* call, MemorySpace space) : call_(call), space_(space) {}
  // The view of `obj` with `elements` elements of `dtype` (None: a null view), or a null view
  // and the failure kept.
  TensorView view(nb::handle obj, const char* name, DataType dtype, std::size_t elements, bool optional = false) {
    TensorView v;
    if (!status_.isOk() || (optional && obj.is_none())) return v;
    try {
      v = viewObject(obj, call_, name, space_);
      expectDtype(v, dtype, call_, name, std::string(dataTypeName(dtype)));
      expectBytes(v, elements * dataTypeSize(dtype), call_, name, fmt::format("{} elements", elements));
    } catch (nb::python_error& e) {
      status_ = Status::invalidArgument(e.what());
      error_ = std::make_unique<nb::python_error>(std::move(e));
      return TensorView{};
    }
    return v;
  }
  // A failure the caller found before the call (e.g. a shape check in Python): kept, no view read.
  void fail(const std::string& message) {
    if (status_.isOk()) status_ = Status::invalidArgument(message);
  }
  const Status& status() const { return status_; }
  // Raises the kept check failure (after the exchange ran), else the exchange's error.
  void raise(const Status& exchanged) {
    if (error_ != nullptr) throw std::move(*error_);
    check(exchanged);
  }

 private:
  const char* call_;
  MemorySpace space_;
  Status status_;
  std::unique_ptr<nb::python_error> error_;
};

nb::dict statsDict(const RoutedStats& s) {
  nb::dict d;
  d["payload_bytes"] = s.payloadBytes;
  d["header_bytes"] = s.headerBytes;
  d["count_bytes"] = s.countBytes;
  d["padding_bytes"] = s.paddingBytes;
  d["reduce_bytes"] = s.reduceBytes;
  d["dropped_tokens"] = s.droppedTokens;
  d["rounds"] = s.rounds;
  d["bytes_sent"] = s.bytesSent();
  return d;
}

RoutedProgram toProgram(const std::string& text) {
  if (text == "planned") return RoutedProgram::Planned;
  if (text == "fused") return RoutedProgram::Fused;
  if (text == "per_expert") return RoutedProgram::PerExpert;
  raiseStatus(Status::invalidArgument(fmt::format("unknown program '{}' (planned, fused, per_expert)", text)));
}

class PyRoutedExchange : public Resource {
 public:
  PyRoutedExchange(nb::object backend, std::int64_t numExperts, int topK, std::int64_t hidden, nb::handle dtype,
                   nb::handle weightDtype, nb::handle group, const std::string& layout, std::int64_t capacity,
                   const std::string& overflow, const std::string& program, const std::string& topology,
                   std::size_t scratchLimit)
      : Resource(nb::cast<PyBackend*>(backend)), backendRef_(std::move(backend)) {
    Backend& b = owner()->get("RoutedExchange");
    RoutedExchangeOptions options;
    options.numExperts = numExperts;
    options.topK = topK;
    options.hidden = hidden;
    options.dtype = toDataType(dtype);
    options.weightDtype = toDataType(weightDtype);
    options.group = toAxes(group, b.mesh());
    options.tokenLayout = layout;
    options.capacity = capacity;
    if (overflow != "drop" && overflow != "error")
      raiseStatus(Status::invalidArgument(fmt::format("unknown overflow '{}' (drop, error)", overflow)));
    options.overflow = overflow == "drop" ? CapacityOverflow::Drop : CapacityOverflow::Error;
    options.program = toProgram(program);
    options.topology = topology;
    options.scratchLimitBytes = scratchLimit;
    check(RoutedExchange::create(b, options, exchange_));
  }
  ~PyRoutedExchange() override { PyRoutedExchange::close(); }
  void close() override { exchange_.reset(); }
  RoutedExchange& get(const char* call) {
    if (exchange_ == nullptr)
      raiseStatus(Status::invalidArgument(fmt::format("{}: the routed exchange (or its backend) is closed", call)));
    return *exchange_;
  }
  MemorySpace space() const { return owner()->space(); }

 private:
  nb::object backendRef_;
  std::unique_ptr<RoutedExchange> exchange_;
};

struct PyRoutedDispatch {
  RoutedDispatch handle;
};

std::size_t rowsOf(const RoutedDispatch& h, std::int64_t hidden) { return static_cast<std::size_t>(h.rows() * hidden); }

}  // namespace

void bindRouted(nb::module_& m) {
  nb::class_<PyRoutedDispatch>(m, "RoutedDispatch", "The state of one routed dispatch (counts, who sent what).")
      .def_prop_ro("rows", [](const PyRoutedDispatch& d) { return d.handle.rows(); })
      .def_prop_ro("tokens", [](const PyRoutedDispatch& d) { return d.handle.tokens(); })
      .def_prop_ro("tokens_per_expert", [](const PyRoutedDispatch& d) { return d.handle.tokensPerExpert(); })
      .def_prop_ro(
          "stats", [](const PyRoutedDispatch& d) { return statsDict(d.handle.stats()); },
          "bytes of the dispatch on this rank: payload_bytes, header_bytes, count_bytes, padding_bytes, "
          "reduce_bytes, dropped_tokens, rounds, bytes_sent");

  nb::class_<PyRoutedExchange>(m, "RoutedExchange",
                               "MoE top-k dispatch and combine over a group (docs/moe.md). Collective: every rank "
                               "of the group makes the same calls in the same order.")
      .def(nb::init<nb::object, std::int64_t, int, std::int64_t, nb::handle, nb::handle, nb::handle, const std::string&,
                    std::int64_t, const std::string&, const std::string&, const std::string&, std::size_t>(),
           nb::arg("backend"), nb::arg("num_experts"), nb::arg("top_k"), nb::arg("hidden"), nb::arg("dtype") = "f32",
           nb::arg("weight_dtype") = "f32", nb::arg("group").none() = nb::none(), nb::arg("layout") = "",
           nb::arg("capacity") = 0, nb::arg("overflow") = "drop", nb::arg("program") = "planned",
           nb::arg("topology") = "bytes", nb::arg("scratch_limit") = 0)
      .def_prop_ro("explain", [](PyRoutedExchange& self) { return self.get("explain").explain(); })
      .def_prop_ro("once_per_rank", [](PyRoutedExchange& self) { return self.get("once_per_rank").oncePerRank(); })
      .def_prop_ro("splits_replicas",
                   [](PyRoutedExchange& self) { return self.get("splits_replicas").splitsReplicas(); })
      .def(
          "dispatch",
          [](PyRoutedExchange& self, nb::handle x, nb::handle topkIdx, nb::handle topkWeights, std::int64_t tokens,
             const std::optional<std::string>& error) {
            constexpr const char* kCall = "RoutedExchange.dispatch";
            RoutedExchange& ex = self.get(kCall);
            const RoutedExchangeOptions& o = ex.options();
            Checks checks(kCall, self.space());
            if (error.has_value()) checks.fail(*error);
            const auto T = static_cast<std::size_t>(std::max<std::int64_t>(tokens, 0));
            const TensorView vx = checks.view(x, "x", o.dtype, T * static_cast<std::size_t>(o.hidden));
            const TensorView vi = checks.view(topkIdx, "topk_idx", DataType::I64, T * static_cast<std::size_t>(o.topK));
            const TensorView vw =
                checks.view(topkWeights, "topk_weights", o.weightDtype, T * static_cast<std::size_t>(o.topK));
            auto out = std::make_unique<PyRoutedDispatch>();
            Status st;
            {
              nb::gil_scoped_release release;
              st = ex.dispatch(vx.data, static_cast<const std::int64_t*>(vi.data), vw.data, tokens, out->handle,
                               checks.status());
            }
            checks.raise(st);
            return out.release();
          },
          nb::arg("x").none(), nb::arg("topk_idx").none(), nb::arg("topk_weights").none(), nb::arg("tokens"),
          nb::arg("error").none() = nb::none(), nb::rv_policy::take_ownership,
          "Count exchange and records out; returns the handle (its rows, tokens_per_expert). `error`: this rank's "
          "own failure found before the call; the rank still takes part, raises InvalidArgument with it, and every "
          "peer raises Mismatch naming this rank.")
      .def(
          "receive",
          [](PyRoutedExchange& self, PyRoutedDispatch& d, nb::handle recvX, nb::handle recvExpert,
             nb::handle recvWeight) {
            constexpr const char* kCall = "RoutedExchange.receive";
            RoutedExchange& ex = self.get(kCall);
            const RoutedExchangeOptions& o = ex.options();
            Checks checks(kCall, self.space());
            const auto rows = static_cast<std::size_t>(d.handle.rows());
            const TensorView vx = checks.view(recvX, "recv_x", o.dtype, rowsOf(d.handle, o.hidden));
            const TensorView ve = checks.view(recvExpert, "recv_expert", DataType::I64, rows);
            const TensorView vw = checks.view(recvWeight, "recv_weight", o.weightDtype, rows);
            checks.raise(Status::ok());
            check(ex.receive(d.handle, vx.data, static_cast<std::int64_t*>(ve.data), vw.data));
          },
          nb::arg("handle"), nb::arg("recv_x"), nb::arg("recv_expert"), nb::arg("recv_weight"))
      .def(
          "combine",
          [](PyRoutedExchange& self, nb::handle expertOut, nb::handle rowWeights, PyRoutedDispatch& d, nb::handle y) {
            constexpr const char* kCall = "RoutedExchange.combine";
            RoutedExchange& ex = self.get(kCall);
            const RoutedExchangeOptions& o = ex.options();
            Checks checks(kCall, self.space());
            const auto rows = static_cast<std::size_t>(d.handle.rows());
            const TensorView vo = checks.view(expertOut, "expert_out", o.dtype, rowsOf(d.handle, o.hidden));
            const TensorView vw = checks.view(rowWeights, "row_weights", o.weightDtype, rows, true);
            const TensorView vy = checks.view(y, "y", o.dtype, static_cast<std::size_t>(d.handle.tokens() * o.hidden));
            RoutedStats stats;
            Status st;
            {
              nb::gil_scoped_release release;
              st = ex.combine(vo.data, vw.data, d.handle, vy.data, &stats, checks.status());
            }
            checks.raise(st);
            return statsDict(stats);
          },
          nb::arg("expert_out"), nb::arg("row_weights").none(), nb::arg("handle"), nb::arg("y"),
          "y[t] = sum_k w[t,k] * expert_out[row of (t,k)]; returns the combine's stats.")
      .def(
          "combine_backward",
          [](PyRoutedExchange& self, nb::handle gradY, nb::handle expertOut, nb::handle rowWeights, PyRoutedDispatch& d,
             nb::handle gradExpertOut, nb::handle gradRowWeights) {
            constexpr const char* kCall = "RoutedExchange.combine_backward";
            RoutedExchange& ex = self.get(kCall);
            const RoutedExchangeOptions& o = ex.options();
            Checks checks(kCall, self.space());
            const auto rows = static_cast<std::size_t>(d.handle.rows());
            const auto tokenElements = static_cast<std::size_t>(d.handle.tokens() * o.hidden);
            const TensorView vg = checks.view(gradY, "grad_y", o.dtype, tokenElements);
            const TensorView vo = checks.view(expertOut, "expert_out", o.dtype, rowsOf(d.handle, o.hidden), true);
            const TensorView vw = checks.view(rowWeights, "row_weights", o.weightDtype, rows, true);
            const TensorView vgo = checks.view(gradExpertOut, "grad_expert_out", o.dtype, rowsOf(d.handle, o.hidden));
            const TensorView vgw = checks.view(gradRowWeights, "grad_row_weights", o.weightDtype, rows, true);
            RoutedStats stats;
            Status st;
            {
              nb::gil_scoped_release release;
              st = ex.combineBackward(vg.data, vo.data, vw.data, d.handle, vgo.data, vgw.data, &stats, checks.status());
            }
            checks.raise(st);
            return statsDict(stats);
          },
          nb::arg("grad_y"), nb::arg("expert_out").none(), nb::arg("row_weights").none(), nb::arg("handle"),
          nb::arg("grad_expert_out"), nb::arg("grad_row_weights").none())
      .def(
          "dispatch_backward",
          [](PyRoutedExchange& self, nb::handle gradRecvX, nb::handle gradRowWeights, PyRoutedDispatch& d,
             nb::handle gradX, nb::handle gradWeights) {
            constexpr const char* kCall = "RoutedExchange.dispatch_backward";
            RoutedExchange& ex = self.get(kCall);
            const RoutedExchangeOptions& o = ex.options();
            Checks checks(kCall, self.space());
            const auto rows = static_cast<std::size_t>(d.handle.rows());
            const auto T = static_cast<std::size_t>(d.handle.tokens());
            const TensorView vg = checks.view(gradRecvX, "grad_recv_x", o.dtype, rowsOf(d.handle, o.hidden));
            const TensorView vgw = checks.view(gradRowWeights, "grad_recv_weight", o.weightDtype, rows, true);
            const TensorView vx = checks.view(gradX, "grad_x", o.dtype, T * static_cast<std::size_t>(o.hidden));
            const TensorView vw =
                checks.view(gradWeights, "grad_weights", o.weightDtype, T * static_cast<std::size_t>(o.topK), true);
            RoutedStats stats;
            Status st;
            {
              nb::gil_scoped_release release;
              st = ex.dispatchBackward(vg.data, vgw.data, d.handle, vx.data, vw.data, &stats, checks.status());
            }
            checks.raise(st);
            return statsDict(stats);
          },
          nb::arg("grad_recv_x"), nb::arg("grad_recv_weight").none(), nb::arg("handle"), nb::arg("grad_x"),
          nb::arg("grad_weights").none())
      .def("close", &PyRoutedExchange::close);
}

}  // namespace chimera::python
