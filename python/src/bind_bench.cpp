// SPDX-License-Identifier: Apache-2.0
// The C++ side of the Python overhead measurement (python -m chimera.bench): the same calls as
// the Python benchmark makes, made from C++ on the same backend, and a backend that moves no
// data (so what is timed is the call path alone, not communication). Private (`_` names).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "backend/null/null_backend.hpp"
#include "bindings.hpp"
#include "chimera/session.hpp"
#include "errors.hpp"
#include "resources.hpp"
#include "tensor_view.hpp"

namespace chimera::python {
namespace {

using Clock = std::chrono::steady_clock;

double micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

Layout parsed(const Mesh& mesh, const char* text) {
  Layout layout;
  check(Layout::parse(text, mesh, layout));
  return layout;
}

// The 8-call window of chimera-session-bench on pp=2,tp=4 as rank 0 sees it, with layouts and
// axes prepared once (as a framework holds them); python/chimera/bench.py records the same.
struct Window8 {
  explicit Window8(const Mesh& m)
      : mesh(m),
        stage0Partial(parsed(m, "pp=@0,tp=P")),
        stage0Shard(parsed(m, "pp=@0,tp=S0")),
        partial(parsed(m, "tp=P")),
        stage1(parsed(m, "pp=@1,tp=R")),
        stage1Shard(parsed(m, "pp=@1,tp=S1")),
        shard(parsed(m, "tp=S0")) {
    check(mesh.parseAxes("tp", tp));
    check(mesh.parseAxes("pp", pp));
  }
  void record(Session& s) {
    const std::size_t n = a.size() * 4;
    TensorHandle x, x1, x2, y, y1, y2, z, z1, z2, w, w1, v, v1;
    check(s.tensor(a.data(), n, spec, stage0Partial, x));
    check(s.allReduce(x, tp, x1));
    check(s.send(x1, pp, nullptr, 0, x2));
    check(s.tensor(b.data(), n / 4, spec, stage0Shard, y));
    check(s.allGather(y, tp, 0, c.data(), n, y1));
    check(s.send(y1, pp, nullptr, 0, y2));
    check(s.tensor(d.data(), n / 4, spec, stage0Shard, z));
    check(s.send(z, pp, nullptr, 0, z1));
    check(s.allToAll(z1, tp, 0, 1, nullptr, 0, z2));
    check(s.tensor(e.data(), n, spec, partial, w));
    check(s.allReduce(w, tp, w1));
    check(s.tensor(f.data(), n, spec, partial, v));
    check(s.reduceScatter(v, tp, 0, g.data(), n / 4, v1));
    check(s.declareRead(x2, stage1));
    check(s.declareRead(y2, stage1));
    check(s.declareRead(z2, stage1Shard));
    check(s.consume(w1, shard));
  }
  Mesh mesh;
  TensorSpec spec{{64, 64}, DataType::F32};
  Layout stage0Partial, stage0Shard, partial, stage1, stage1Shard, shard;
  AxisSet tp, pp;
  std::vector<float> a = std::vector<float>(64 * 64), b = a, c = a, d = a, e = a, f = a, g = a;
};

// Per recorded call of the cached window (us), one entry per repetition.
std::vector<double> windowPerCall(int iters) {
  Mesh mesh;
  check(Mesh::parse("pp=2,tp=4", 8, mesh));
  detail::NullBackend backend(mesh, 0);
  std::unique_ptr<Session> session;
  check(Session::create(backend, SessionOptions{}, session));
  Window8 window(mesh);
  window.record(*session);  // plans once
  std::vector<double> out;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    window.record(*session);
    out.push_back(micros(t0, Clock::now()) / 8);
  }
  return out;
}

// Per allReduce (us) of `tensor` in place over every axis, `calls` calls per repetition.
std::vector<double> allReducePerCall(PyBackend& self, nb::handle tensor, int iters, int calls) {
  Backend& backend = self.get("_bench_all_reduce_cpp");
  const TensorView view = viewObject(tensor, "_bench_all_reduce_cpp", "tensor", self.space());
  const AxisSet all = backend.mesh().allAxes();
  std::vector<double> out;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    for (int c = 0; c < calls; ++c) {
      check(backend.allReduce(view.data, view.data, view.elements, view.dtype, ReduceOp::Max, all));
    }
    out.push_back(micros(t0, Clock::now()) / calls);
  }
  return out;
}

}  // namespace

void bindBench(nb::module_& m) {
  m.def(
      "_null_backend",
      [](nb::handle mesh, int rank) {
        return new PyBackend(std::make_unique<detail::NullBackend>(toMesh(mesh), rank));
      },
      nb::arg("mesh"), nb::arg("rank"), "A backend that moves no data (overhead measurement only).");
  m.def("_bench_window_cpp", &windowPerCall, nb::arg("iters"));
  m.def("_bench_all_reduce_cpp", &allReducePerCall, nb::arg("backend"), nb::arg("tensor"), nb::arg("iters"),
        nb::arg("calls"));
}

}  // namespace chimera::python
