// SPDX-License-Identifier: Apache-2.0
// Binding of the Session (call-time fusion): every recording call, consume by layout or byte
// range, flush/wait, stats, and `with session.window():` which flushes at exit. The wrapper
// keeps the caller's tensors of the open window alive until it is flushed, and knows each
// value's logical spec, so that every output tensor is checked to be exactly the local tensor
// the recorded call writes (the layout follows from the chain op, as in chain.hpp).
#include <fmt/format.h>
#include <nanobind/stl/string.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "chimera/chain.hpp"
#include "chimera/session.hpp"
#include "cost_choice.hpp"
#include "errors.hpp"
#include "local_tensor.hpp"
#include "resources.hpp"

namespace chimera::python {
namespace {

/// A value of the open window, as Python sees it: the C++ handle and the tensor holding it.
struct PyTensorHandle {
  TensorHandle handle;
  nb::object tensor;  ///< the caller's buffer (None on a rank that holds nothing)
};

/// The Python-side Session.
class PySession : public Resource {
 public:
  PySession(nb::object backend, nb::handle fusion, nb::handle checkEveryWindow, nb::handle topology,
            nb::handle preparedPlanLimit, nb::handle perRank)
      : Resource(nb::cast<PyBackend*>(backend)),
        backendRef_(std::move(backend)),
        cost_(topology.is_none() ? nullptr : makeCost(topology)) {
    SessionOptions options;
    check(SessionOptions::fromEnvironment(options));
    if (!fusion.is_none()) options.fusion = nb::cast<bool>(fusion);
    if (!checkEveryWindow.is_none()) options.checkEveryWindow = nb::cast<bool>(checkEveryWindow);
    if (!preparedPlanLimit.is_none()) options.preparedPlanLimit = nb::cast<std::size_t>(preparedPlanLimit);
    if (!perRank.is_none()) options.perRank = nb::cast<bool>(perRank);
    options.cost = cost_.get();
    check(Session::create(owner()->get("Session"), options, session_));
  }
  ~PySession() override { PySession::close(); }
  void close() override {
    session_.reset();
    window_.clear();
  }

  Session& get(const char* call) {
    if (session_ == nullptr) {
      raiseStatus(Status::invalidArgument(fmt::format("{}: the session (or its backend) is closed", call)));
    }
    return *session_;
  }
  const Backend& backend(const char* call) const { return owner()->get(call); }

  PyTensorHandle tensor(nb::handle buffer, nb::handle layoutObj, nb::handle specObj) {
    constexpr const char* kCall = "Session.tensor";
    Session& session = get(kCall);
    const Backend& b = backend(kCall);
    const Layout layout = toLayout(layoutObj, b.mesh(), "tensor");
    const TensorSpec spec = resolveSpec(specObj, {{buffer, &layout}}, b.rank(), kCall);
    check(layout.validate(spec));
    const LocalBuffer local = localBuffer(buffer, spec, layout, b.rank(), kCall, "tensor", owner()->space());
    TensorHandle handle;
    check(session.tensor(local.data, local.bytes, spec, layout, handle));
    return remember(handle, spec, buffer);
  }

  /// Per-rank recording: this rank's receiving side of a hand-off along `axes` (from the
  /// previous stage, or from the next one when `back`), arriving placed as `layout` into `out`.
  PyTensorHandle receive(nb::handle out, nb::handle layoutObj, nb::handle axes, nb::handle specObj, bool back) {
    const char* call = back ? "Session.recv_backward" : "Session.recv";
    Session& session = get(call);
    const Backend& b = backend(call);
    const Layout layout = toLayout(layoutObj, b.mesh(), "layout");
    const TensorSpec spec = resolveSpec(specObj, {{out, &layout}}, b.rank(), call);
    check(layout.validate(spec));
    const LocalBuffer local = localBuffer(out, spec, layout, b.rank(), call, "out", owner()->space());
    const AxisSet axis = toAxes(axes, b.mesh());
    TensorHandle handle;
    check(back ? session.recvBackward(spec, layout, axis, local.data, local.bytes, handle)
               : session.recv(spec, layout, axis, local.data, local.bytes, handle));
    return remember(handle, spec, out);
  }

  /// Records `op` on `in`, writing `out` (out-of-place kinds) or `in`'s buffer (in-place kinds).
  PyTensorHandle record(const PyTensorHandle& in, const ChainOp& op, nb::handle out, const char* call) {
    Session& session = get(call);
    const Backend& b = backend(call);
    const TensorSpec& spec = specOf(in, call);
    Layout layout;
    check(session.layoutOf(in.handle, layout));
    OpEffect effect;
    check(applyChainOp(layout, op, spec, effect));
    const bool inPlace = op.kind == ChainOp::Kind::AllReduce || op.kind == ChainOp::Kind::Broadcast;
    LocalBuffer output;
    nb::object result = in.tensor;
    if (inPlace) {
      if (!out.is_none()) {
        raiseValueError(fmt::format("{}: {} works in place on the input's tensor; do not pass 'out'", call,
                                    chainOpKindName(op.kind)));
      }
    } else {
      output = localBuffer(out, spec, effect.output, b.rank(), call, "out", owner()->space());
      result = nb::borrow(out);
    }
    TensorHandle handle;
    check(session.record(in.handle, op, output.data, output.bytes, handle));
    return remember(handle, spec, result);
  }

  PyTensorHandle recordText(const PyTensorHandle& in, const std::string& text, nb::handle out) {
    constexpr const char* kCall = "Session.record";
    Chain chain;
    check(Chain::parse(text, backend(kCall).mesh(), chain));
    if (chain.ops.size() != 1) {
      raiseStatus(Status::invalidArgument(
          fmt::format("{}: '{}' holds {} ops; record one at a time", kCall, text, chain.ops.size())));
    }
    return record(in, chain.ops[0], out, kCall);
  }

  ChainOp makeOp(ChainOp::Kind kind, nb::handle axes, const char* call) {
    ChainOp op;
    op.kind = kind;
    op.axes = toAxes(axes, backend(call).mesh());
    return op;
  }

  void declare(const PyTensorHandle& t, nb::handle layoutObj, nb::handle offset, nb::handle nbytes, bool flush) {
    const char* call = flush ? "Session.consume" : "Session.declare_read";
    Session& session = get(call);
    const bool byLayout = !layoutObj.is_none();
    const bool byRange = !offset.is_none() || !nbytes.is_none();
    if (byLayout == byRange) {
      raiseStatus(Status::invalidArgument(fmt::format(
          "{}: give either a layout or a byte range (offset=, nbytes=), not {}", call, byLayout ? "both" : "neither")));
    }
    if (byLayout) {
      const Layout layout = toLayout(layoutObj, backend(call).mesh(), "consume");
      if (!flush) {
        check(session.declareRead(t.handle, layout));
        return;
      }
      windowCall([&] { return session.consume(t.handle, layout); });
      return;
    }
    const std::size_t first = offset.is_none() ? 0 : nb::cast<std::size_t>(offset);
    const std::size_t bytes = nbytes.is_none() ? 0 : nb::cast<std::size_t>(nbytes);
    if (!flush) {
      check(session.declareRead(t.handle, first, bytes));
      return;
    }
    windowCall([&] { return session.consume(t.handle, first, bytes); });
  }

  void flush() {
    Session& session = get("Session.flush");
    windowCall([&] { return session.flush(); });
  }

  void wait(const PyTensorHandle& t) {
    Session& session = get("Session.wait");
    windowCall([&] { return session.wait(t.handle); });
  }

  Layout layoutOf(const PyTensorHandle& t) {
    Layout layout;
    check(get("Session.layout_of").layoutOf(t.handle, layout));
    return layout;
  }

  nb::dict stats() {
    const SessionStats s = get("Session.stats").stats();
    nb::dict out;
    for (const SessionStatsField& field : kSessionStatsFields)
      out[nb::str(field.name.data(), field.name.size())] = s.*field.member;
    return out;
  }

  nb::dict options() {
    const SessionOptions& o = get("Session.options").options();
    nb::dict out;
    out["fusion"] = o.fusion;
    out["check_every_window"] = o.checkEveryWindow;
    out["prepared_plan_limit"] = o.preparedPlanLimit;
    out["per_rank"] = o.perRank;
    out["topology"] = std::string(get("Session.options").cost().name());
    return out;
  }

 private:
  PyTensorHandle remember(TensorHandle handle, const TensorSpec& spec, nb::handle tensor) {
    window_[{handle.window, handle.index}] = Value{spec, nb::borrow(tensor)};
    return {handle, nb::borrow(tensor)};
  }

  const TensorSpec& specOf(const PyTensorHandle& t, const char* call) const {
    const auto it = window_.find({t.handle.window, t.handle.index});
    if (it == window_.end()) {
      raiseStatus(Status::invalidArgument(
          fmt::format("{}: the tensor handle (window {}, value {}) has expired: its window was flushed", call,
                      t.handle.window, t.handle.index)));
    }
    return it->second.spec;
  }

  // A collective call that ends the window: the tensors it kept are released whatever the outcome
  // (a failed flush drops the window).
  template <typename Call>
  void windowCall(Call&& call) {
    Status status;
    {
      nb::gil_scoped_release release;
      status = call();
    }
    window_.clear();
    check(status);
  }

  struct Value {
    TensorSpec spec;
    nb::object tensor;  // kept alive until the window is flushed
  };
  nb::object backendRef_;
  std::unique_ptr<PlanCost> cost_;  ///< the model topology= named; null: the Session's own (options.topology)
  std::unique_ptr<Session> session_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, Value> window_;
};

/// `with session.window():` flushes the recorded calls when the block ends normally.
struct PyWindow {
  nb::object session;
};

}  // namespace

void bindSession(nb::module_& m) {
  nb::class_<PyTensorHandle>(m, "TensorHandle",
                             "A value of a Session's open window (expires when the window is flushed).")
      .def_prop_ro(
          "tensor", [](const PyTensorHandle& t) { return t.tensor; }, "The buffer holding the value.")
      .def_prop_ro("index", [](const PyTensorHandle& t) { return t.handle.index; })
      .def_prop_ro("window", [](const PyTensorHandle& t) { return t.handle.window; })
      .def("__repr__", [](const PyTensorHandle& t) {
        return fmt::format("<chimera.TensorHandle window {} value {}>", t.handle.window, t.handle.index);
      });

  nb::class_<PyWindow>(m, "SessionWindow")
      .def("__enter__", [](PyWindow& w) { return w.session; })
      .def("__exit__", [](PyWindow& w, nb::args exception) {
        if (exception.size() == 0 || exception[0].is_none()) nb::cast<PySession&>(w.session).flush();
        return false;
      });

  using K = ChainOp::Kind;
  nb::class_<PySession>(m, "Session",
                        "Records collectives as a framework issues them and runs them, fused where the planner "
                        "finds it pays, when a result is needed (flush, wait, consume). Recording is local. SPMD "
                        "(the default): every rank records every call, and flush/wait/consume are collective over "
                        "the world. per_rank=True: each rank records only its own calls and its side of each "
                        "pipeline hand-off (send/recv, send_backward/recv_backward), and flush/wait/consume are "
                        "collective over the window's groups and hand-off peers.")
      .def(nb::init<nb::object, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle>(), nb::arg("backend"),
           nb::arg("fusion").none() = nb::none(), nb::arg("check_every_window").none() = nb::none(),
           nb::arg("topology").none() = nb::none(), nb::arg("prepared_plan_limit").none() = nb::none(),
           nb::arg("per_rank").none() = nb::none(),
           "Options default to the environment (CHIMERA_FUSION, CHIMERA_CHECK_EVERY_WINDOW, "
           "CHIMERA_PREPARED_PLAN_LIMIT, "
           "CHIMERA_TOPOLOGY). topology: the cost model, 'bytes' (fuse whenever fewer bytes move), a topology preset "
           "('host:8', "
           "'pcie-4080x8', ...) or a profile file; None: CHIMERA_TOPOLOGY, else the backend's own (host:N on "
           "MPI and gloo, bytes on NCCL). options()['topology'] names the model in use.")
      .def("tensor", &PySession::tensor, nb::arg("tensor").none(), nb::arg("layout"),
           nb::arg("spec").none() = nb::none(),
           "Registers this rank's local tensor (None on a rank that holds nothing; then pass spec=).")
      .def(
          "all_reduce",
          [](PySession& s, const PyTensorHandle& t, nb::handle axes) {
            return s.record(t, s.makeOp(K::AllReduce, axes, "Session.all_reduce"), nb::none(), "Session.all_reduce");
          },
          nb::arg("t"), nb::arg("axes").none(), "In place: reduces t over axes (P or R there).")
      .def(
          "reduce_scatter",
          [](PySession& s, const PyTensorHandle& t, nb::handle axes, int dim, nb::handle out) {
            ChainOp op = s.makeOp(K::ReduceScatter, axes, "Session.reduce_scatter");
            op.dim = dim;
            return s.record(t, op, out, "Session.reduce_scatter");
          },
          nb::arg("t"), nb::arg("axes").none(), nb::arg("dim"), nb::arg("out").none())
      .def(
          "all_gather",
          [](PySession& s, const PyTensorHandle& t, nb::handle axes, int dim, nb::handle out) {
            ChainOp op = s.makeOp(K::AllGather, axes, "Session.all_gather");
            op.dim = dim;
            return s.record(t, op, out, "Session.all_gather");
          },
          nb::arg("t"), nb::arg("axes").none(), nb::arg("dim"), nb::arg("out").none())
      .def(
          "all_to_all",
          [](PySession& s, const PyTensorHandle& t, nb::handle axes, int fromDim, int toDim, nb::handle out) {
            ChainOp op = s.makeOp(K::AllToAll, axes, "Session.all_to_all");
            op.dim = fromDim;
            op.toDim = toDim;
            return s.record(t, op, out, "Session.all_to_all");
          },
          nb::arg("t"), nb::arg("axes").none(), nb::arg("from_dim"), nb::arg("to_dim"), nb::arg("out").none())
      .def(
          "slice",
          [](PySession& s, const PyTensorHandle& t, nb::handle axes, int dim, nb::handle out) {
            ChainOp op = s.makeOp(K::Slice, axes, "Session.slice");
            op.dim = dim;
            return s.record(t, op, out, "Session.slice");
          },
          nb::arg("t"), nb::arg("axes").none(), nb::arg("dim"), nb::arg("out").none(),
          "Local: keeps this rank's block of dim over axes (R there).")
      .def(
          "broadcast",
          [](PySession& s, const PyTensorHandle& t, nb::handle axes, int root) {
            ChainOp op = s.makeOp(K::Broadcast, axes, "Session.broadcast");
            op.root = root;
            return s.record(t, op, nb::none(), "Session.broadcast");
          },
          nb::arg("t"), nb::arg("axes").none(), nb::arg("root") = 0)
      .def(
          "send",
          [](PySession& s, const PyTensorHandle& t, nb::handle axis, nb::handle out) {
            return s.record(t, s.makeOp(K::Send, axis, "Session.send"), out, "Session.send");
          },
          nb::arg("t"), nb::arg("axis"), nb::arg("out").none() = nb::none(),
          "Pipeline hand-off to the next stage along axis; receivers pass `out`, senders None.")
      .def(
          "send_backward",
          [](PySession& s, const PyTensorHandle& t, nb::handle axis, nb::handle out) {
            ChainOp op = s.makeOp(K::Send, axis, "Session.send_backward");
            op.stageStep = -1;
            return s.record(t, op, out, "Session.send_backward");
          },
          nb::arg("t"), nb::arg("axis"), nb::arg("out").none() = nb::none(),
          "The backward pass's hand-off, to the previous stage.")
      .def(
          "recv",
          [](PySession& s, nb::handle out, nb::handle layout, nb::handle axis, nb::handle spec) {
            return s.receive(out, layout, axis, spec, false);
          },
          nb::arg("out").none(), nb::arg("layout"), nb::arg("axis"), nb::arg("spec").none() = nb::none(),
          "Per-rank sessions: the receiving side of the previous stage's send along axis; the tensor arrives "
          "placed as layout (this rank's stage) into out.")
      .def(
          "recv_backward",
          [](PySession& s, nb::handle out, nb::handle layout, nb::handle axis, nb::handle spec) {
            return s.receive(out, layout, axis, spec, true);
          },
          nb::arg("out").none(), nb::arg("layout"), nb::arg("axis"), nb::arg("spec").none() = nb::none(),
          "Per-rank sessions: the receiving side of the next stage's send_backward along axis.")
      .def("record", &PySession::recordText, nb::arg("t"), nb::arg("op"), nb::arg("out").none() = nb::none(),
           "Records one chain op given as text (\"alltoall:ep:0:1\").")
      .def(
          "consume",
          [](PySession& s, const PyTensorHandle& t, nb::handle layout, nb::handle offset, nb::handle nbytes) {
            s.declare(t, layout, offset, nbytes, true);
          },
          nb::arg("t"), nb::arg("layout").none() = nb::none(), nb::kw_only(), nb::arg("offset").none() = nb::none(),
          nb::arg("nbytes").none() = nb::none(),
          "Declares that the next computation reads t as `layout` (or bytes [offset, offset+nbytes) of its "
          "buffer), then flushes. Collective.")
      .def(
          "declare_read",
          [](PySession& s, const PyTensorHandle& t, nb::handle layout, nb::handle offset, nb::handle nbytes) {
            s.declare(t, layout, offset, nbytes, false);
          },
          nb::arg("t"), nb::arg("layout").none() = nb::none(), nb::kw_only(), nb::arg("offset").none() = nb::none(),
          nb::arg("nbytes").none() = nb::none(), "The same declaration without the flush.")
      .def("flush", &PySession::flush, "Plans (or looks up) and runs the recorded window. Collective.")
      .def("wait", &PySession::wait, nb::arg("t"), "Flushes the window t belongs to. Collective.")
      .def("layout_of", &PySession::layoutOf, nb::arg("t"))
      .def("stats", &PySession::stats, "Counters since creation, as a dict.")
      .def_prop_ro("options", &PySession::options)
      .def(
          "window", [](nb::handle self) { return PyWindow{nb::borrow(self)}; },
          "Context manager: `with session.window(): ...` flushes when the block ends without an exception.")
      .def("close", &PySession::close);
}

}  // namespace chimera::python
