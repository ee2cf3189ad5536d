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

nb::dict statsDict(const RoutedStats& s) {
  nb::dict d;
  d["payload_bytes"] = s.payloadBytes;
  d["header_bytes"] = s.headerBytes;
  d["count_bytes"] = s.countBytes;
  d["padding_bytes"] = s.paddingBytes;
  d["reduce_bytes"] = s.reduceBytes;
  d["dropped_tokens"] = s.droppedTokens;
  d["rounds"] = s.rounds;
  d["cross_host_bytes"] = s.crossHostBytes;
  d["bytes_sent"] = s.bytesSent();
  return d;
}

Status toProgram(const std::string& text, RoutedProgram& out) {
  if (text == "planned") {
    out = RoutedProgram::Planned;
  } else if (text == "fused") {
    out = RoutedProgram::Fused;
  } else if (text == "per_expert") {
    out = RoutedProgram::PerExpert;
  } else {
    return Status::invalidArgument(fmt::format("unknown program '{}' (planned, fused, per_expert)", text));
  }
  return Status::ok();
}

class PyRoutedExchange : public Resource {
 public:
  PyRoutedExchange(nb::object backend, std::int64_t numExperts, int topK, std::int64_t hidden, nb::handle dtype,
                   nb::handle weightDtype, nb::handle group, const std::string& layout, std::int64_t capacity,
                   const std::string& overflow, const std::string& program, const std::optional<std::string>& topology,
                   std::size_t scratchLimit, const std::optional<std::string>& failure)
      : Resource(nb::cast<PyBackend*>(backend)), backendRef_(std::move(backend)) {
    Backend& b = owner()->get("RoutedExchange");
    // A bad option here is this rank's failure in the exchange's first round, not a raise
    // before it: every peer then raises at once (Mismatch naming this rank) instead of waiting.
    // Except the group: naming none, the rank cannot tell which group that round is over, so it
    // raises here after announcing the failure to every rank (Backend::announceFault).
    RoutedExchangeOptions options;
    options.group = toGroupAxes(group, b);
    std::unique_ptr<nb::python_error> error;
    const auto convert = [&](auto&& body) {
      if (error != nullptr) return;
      try {
        body();
      } catch (nb::python_error& e) {
        error = std::make_unique<nb::python_error>(std::move(e));
      }
    };
    options.numExperts = numExperts;
    options.topK = topK;
    options.hidden = hidden;
    convert([&] { options.dtype = toDataType(dtype); });
    convert([&] { options.weightDtype = toDataType(weightDtype); });
    options.tokenLayout = layout;
    options.capacity = capacity;
    options.overflow = overflow == "error" ? CapacityOverflow::Error : CapacityOverflow::Drop;
    Status local = failure.has_value() ? Status::invalidArgument(*failure)
                   : error != nullptr  ? Status::invalidArgument(error->what())
                                       : Status::ok();
    if (local.isOk() && overflow != "drop" && overflow != "error")
      local = Status::invalidArgument(fmt::format("unknown overflow '{}' (drop, error)", overflow));
    if (const Status parsed = toProgram(program, options.program); local.isOk()) local = parsed;
    options.topology = topology.value_or("");
    options.scratchLimitBytes = scratchLimit;
    const Status created = RoutedExchange::create(b, options, exchange_, local);
    if (error != nullptr && !failure.has_value()) throw std::move(*error);
    check(created);
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

// One call of the binding on an exchange: its arrays' checks, each failure kept as a Status for
// the exchange to carry, and the exchange run without the GIL.
class RoutedCall {
 public:
  RoutedCall(PyRoutedExchange& self, const char* call)
      : exchange(self.get(call)), options(exchange.options()), call_(call), space_(self.space()) {}

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
  // The view of `count` rows of `hidden` elements of the row dtype.
  TensorView rows(nb::handle obj, const char* name, std::size_t count, bool optional = false) {
    return view(obj, name, options.dtype, count * static_cast<std::size_t>(options.hidden), optional);
  }
  // The view of `count` weights of the weight dtype.
  TensorView weights(nb::handle obj, const char* name, std::size_t count, bool optional = false) {
    return view(obj, name, options.weightDtype, count, optional);
  }
  // A failure the caller found before the call (e.g. a shape check in Python): kept, no view read.
  void fail(const std::string& message) {
    if (status_.isOk()) status_ = Status::invalidArgument(message);
  }
  // Raises the kept check failure, if any.
  void raise() { raiseFirst(Status::ok()); }
  // Runs the exchange `call(localError)` without the GIL, this rank's check failure as its local
  // error, then raises the check failure, else the exchange's error.
  template <typename Call>
  void run(Call&& call) {
    Status exchanged;
    {
      nb::gil_scoped_release release;
      exchanged = call(status_);
    }
    raiseFirst(exchanged);
  }
  // run for a call that reports its stats (`call(stats, localError)`); returns them as a dict.
  template <typename Call>
  nb::dict runWithStats(Call&& call) {
    RoutedStats stats;
    run([&](const Status& local) { return call(&stats, local); });
    return statsDict(stats);
  }

  RoutedExchange& exchange;
  const RoutedExchangeOptions& options;

 private:
  // Raises the kept check failure, else `exchanged`'s error.
  void raiseFirst(const Status& exchanged) {
    if (error_ != nullptr) throw std::move(*error_);
    check(exchanged);
  }

  const char* call_;
  MemorySpace space_;
  Status status_;
  std::unique_ptr<nb::python_error> error_;
};

struct PyRoutedDispatch {
  RoutedDispatch handle;
};

}  // namespace

void bindRouted(nb::module_& m) {
  nb::class_<PyRoutedDispatch>(m, "RoutedDispatch", "The state of one routed dispatch (counts, who sent what).")
      .def_prop_ro("rows", [](const PyRoutedDispatch& d) { return d.handle.rows(); })
      .def_prop_ro("tokens", [](const PyRoutedDispatch& d) { return d.handle.tokens(); })
      .def_prop_ro("tokens_per_expert", [](const PyRoutedDispatch& d) { return d.handle.tokensPerExpert(); })
      .def_prop_ro(
          "stats", [](const PyRoutedDispatch& d) { return statsDict(d.handle.stats()); },
          "bytes of the dispatch on this rank: payload_bytes, header_bytes, count_bytes, padding_bytes, "
          "reduce_bytes, dropped_tokens, rounds, cross_host_bytes (of those, sent to members on other hosts), "
          "bytes_sent");

  nb::class_<PyRoutedExchange>(m, "RoutedExchange",
                               "MoE top-k dispatch and combine over a group (docs/moe.md). Collective: every rank "
                               "of the group makes the same calls in the same order.")
      .def(nb::init<nb::object, std::int64_t, int, std::int64_t, nb::handle, nb::handle, nb::handle, const std::string&,
                    std::int64_t, const std::string&, const std::string&, const std::optional<std::string>&,
                    std::size_t, const std::optional<std::string>&>(),
           nb::arg("backend"), nb::arg("num_experts"), nb::arg("top_k"), nb::arg("hidden"), nb::arg("dtype") = "f32",
           nb::arg("weight_dtype") = "f32", nb::arg("group").none() = nb::none(), nb::arg("layout") = "",
           nb::arg("capacity") = 0, nb::arg("overflow") = "drop", nb::arg("program") = "planned",
           nb::arg("topology").none() = nb::none(), nb::arg("scratch_limit") = 0, nb::arg("error").none() = nb::none(),
           "Creates the exchange, collectively over its group (and over the mesh while its groups' communicators do "
           "not exist). A bad option on this rank raises InvalidArgument here and Mismatch naming this rank on the "
           "peers, in the creation's first round. `error`: this rank's own failure found before the call; the rank "
           "takes part in the creation with it and raises it.")
      .def_prop_ro("explain", [](PyRoutedExchange& self) { return self.get("explain").explain(); })
      .def_prop_ro("once_per_rank", [](PyRoutedExchange& self) { return self.get("once_per_rank").oncePerRank(); })
      .def_prop_ro(
          "once_per_host", [](PyRoutedExchange& self) { return self.get("once_per_host").oncePerHost(); },
          "Whether a token crosses to another host once, a forwarder there fanning it out (docs/moe.md, rule 6).")
      .def_prop_ro("splits_replicas",
                   [](PyRoutedExchange& self) { return self.get("splits_replicas").splitsReplicas(); })
      .def_prop_ro(
          "straight_from_stage",
          [](PyRoutedExchange& self) { return self.get("straight_from_stage").straightFromStage(); },
          "'pp=@k': whether stage k sends straight to stage k+1's experts (else the hand-off, then the dispatch).")
      .def_prop_ro(
          "role",
          [](PyRoutedExchange& self) {
            switch (self.get("role").role()) {
              case RoutedRole::Source: return "source";
              case RoutedRole::Experts: return "experts";
              case RoutedRole::Outside: return "outside";
              default: return "both";
            }
          },
          "This rank's part: 'both' (every layout but 'pp=@k'); for 'pp=@k' 'source' (stage k: dispatch, "
          "dispatch_backward), 'experts' (stage k+1: every call, no tokens in dispatch), 'outside' (no call).")
      .def(
          "dispatch",
          [](PyRoutedExchange& self, nb::handle x, nb::handle topkIdx, nb::handle topkWeights, std::int64_t tokens,
             const std::optional<std::string>& error) {
            RoutedCall c(self, "RoutedExchange.dispatch");
            if (error.has_value()) c.fail(*error);
            const auto T = static_cast<std::size_t>(std::max<std::int64_t>(tokens, 0));
            const auto pairs = T * static_cast<std::size_t>(c.options.topK);
            // None passes null (the exchange refuses it with tokens: the experts' stage of "pp=@k" passes none).
            const TensorView vx = c.rows(x, "x", T, true);
            const TensorView vi = c.view(topkIdx, "topk_idx", DataType::I64, pairs, true);
            const TensorView vw = c.weights(topkWeights, "topk_weights", pairs, true);
            auto out = std::make_unique<PyRoutedDispatch>();
            c.run([&](const Status& local) {
              return c.exchange.dispatch(vx.data, static_cast<const std::int64_t*>(vi.data), vw.data, tokens,
                                         out->handle, local);
            });
            return out.release();
          },
          nb::arg("x").none(), nb::arg("topk_idx").none(), nb::arg("topk_weights").none(), nb::arg("tokens"),
          nb::arg("error").none() = nb::none(), nb::rv_policy::take_ownership,
          "Count exchange and records out; returns the handle (its rows, tokens_per_expert, tokens). `error`: this "
          "rank's own failure found before the call; the rank still takes part, raises InvalidArgument with it, and "
          "every peer raises Mismatch naming this rank. With layout 'pp=@k' stage k+1 passes None, None, None, 0 "
          "and its handle takes its stage-k peer's tokens.")
      .def(
          "receive",
          [](PyRoutedExchange& self, PyRoutedDispatch& d, nb::handle recvX, nb::handle recvExpert,
             nb::handle recvWeight) {
            RoutedCall c(self, "RoutedExchange.receive");
            const auto rows = static_cast<std::size_t>(d.handle.rows());
            const TensorView vx = c.rows(recvX, "recv_x", rows);
            const TensorView ve = c.view(recvExpert, "recv_expert", DataType::I64, rows);
            const TensorView vw = c.weights(recvWeight, "recv_weight", rows);
            c.raise();
            check(c.exchange.receive(d.handle, vx.data, static_cast<std::int64_t*>(ve.data), vw.data));
          },
          nb::arg("handle"), nb::arg("recv_x"), nb::arg("recv_expert"), nb::arg("recv_weight"))
      .def(
          "combine",
          [](PyRoutedExchange& self, nb::handle expertOut, nb::handle rowWeights, PyRoutedDispatch& d, nb::handle y) {
            RoutedCall c(self, "RoutedExchange.combine");
            const TensorView vo = c.rows(expertOut, "expert_out", static_cast<std::size_t>(d.handle.rows()));
            const TensorView vw = c.weights(rowWeights, "row_weights", static_cast<std::size_t>(d.handle.rows()), true);
            const TensorView vy = c.rows(y, "y", static_cast<std::size_t>(d.handle.tokens()));
            return c.runWithStats([&](RoutedStats* stats, const Status& local) {
              return c.exchange.combine(vo.data, vw.data, d.handle, vy.data, stats, local);
            });
          },
          nb::arg("expert_out"), nb::arg("row_weights").none(), nb::arg("handle"), nb::arg("y"),
          "y[t] = sum_k w[t,k] * expert_out[row of (t,k)]; returns the combine's stats.")
      .def(
          "combine_backward",
          [](PyRoutedExchange& self, nb::handle gradY, nb::handle expertOut, nb::handle rowWeights, PyRoutedDispatch& d,
             nb::handle gradExpertOut, nb::handle gradRowWeights) {
            RoutedCall c(self, "RoutedExchange.combine_backward");
            const auto rows = static_cast<std::size_t>(d.handle.rows());
            const TensorView vg = c.rows(gradY, "grad_y", static_cast<std::size_t>(d.handle.tokens()));
            const TensorView vo = c.rows(expertOut, "expert_out", rows, true);
            const TensorView vw = c.weights(rowWeights, "row_weights", rows, true);
            const TensorView vgo = c.rows(gradExpertOut, "grad_expert_out", rows);
            const TensorView vgw = c.weights(gradRowWeights, "grad_row_weights", rows, true);
            return c.runWithStats([&](RoutedStats* stats, const Status& local) {
              return c.exchange.combineBackward(vg.data, vo.data, vw.data, d.handle, vgo.data, vgw.data, stats, local);
            });
          },
          nb::arg("grad_y"), nb::arg("expert_out").none(), nb::arg("row_weights").none(), nb::arg("handle"),
          nb::arg("grad_expert_out"), nb::arg("grad_row_weights").none())
      .def(
          "dispatch_backward",
          [](PyRoutedExchange& self, nb::handle gradRecvX, nb::handle gradRowWeights, PyRoutedDispatch& d,
             nb::handle gradX, nb::handle gradWeights) {
            RoutedCall c(self, "RoutedExchange.dispatch_backward");
            const auto rows = static_cast<std::size_t>(d.handle.rows());
            const auto T = static_cast<std::size_t>(d.handle.tokens());
            // None passes null: stage k of "pp=@k" has no rows, stage k+1 forms no grad x.
            const TensorView vg = c.rows(gradRecvX, "grad_recv_x", rows, true);
            const TensorView vgw = c.weights(gradRowWeights, "grad_recv_weight", rows, true);
            const TensorView vx = c.rows(gradX, "grad_x", T, true);
            const TensorView vw =
                c.weights(gradWeights, "grad_weights", T * static_cast<std::size_t>(c.options.topK), true);
            return c.runWithStats([&](RoutedStats* stats, const Status& local) {
              return c.exchange.dispatchBackward(vg.data, vgw.data, d.handle, vx.data, vw.data, stats, local);
            });
          },
          nb::arg("grad_recv_x").none(), nb::arg("grad_recv_weight").none(), nb::arg("handle"),
          nb::arg("grad_x").none(), nb::arg("grad_weights").none(),
          "grad_x [T, H] and grad_weights [T, K] from the rows' gradients. 'pp=@k': stage k+1 passes its rows' "
          "gradients and None for grad_x and grad_weights; stage k passes None for the rows and receives them.")
      .def("close", &PyRoutedExchange::close);
}

}  // namespace chimera::python
