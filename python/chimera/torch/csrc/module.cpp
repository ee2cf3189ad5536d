// SPDX-License-Identifier: Apache-2.0
// Python module chimera.torch._C: creates the "chimera" c10d backend for torch.distributed.
// The only translation unit that includes torch's Python headers (they compile slowly).
#include <torch/python.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "chimera/mpi_backend.hpp"
#include "host_transport.hpp"
#include "mesh_runtime.hpp"
#include "mpi_group_backend.hpp"
#include "process_group.hpp"

namespace py = pybind11;

namespace chimera::torch_ext {
namespace {

void check(const char* what, const Status& status) {
  TORCH_CHECK(status.isOk(), "chimera ", what, ": ", status.toString());
}

// Why this process cannot run CPU tensors of a torch world of `worldSize` ranks over MPI
// (empty when it can): MPI must have launched every rank, with torch's ranks as MPI's.
std::string mpiMismatch(int worldSize, int torchRank, bool isWorld) {
  int mpiRank = 0;
  int mpiSize = 0;
  check("process group", mpiWorldOf(mpiRank, mpiSize));
  if (mpiSize != worldSize)
    return "torch.distributed has " + std::to_string(worldSize) + " ranks but the MPI world has " +
           std::to_string(mpiSize) +
           " (the MPI transport needs every rank started by one MPI launch; "
           "CHIMERA_TORCH_TRANSPORT=gloo, the default outside an MPI launch, bootstraps from the store instead)";
  if (isWorld && mpiRank != torchRank)
    return "torch rank " + std::to_string(torchRank) + " is MPI rank " + std::to_string(mpiRank) +
           "; set RANK from the MPI launcher (chimera.torch.init_process_group does)";
  return {};
}

// Waits until every member of the group has reached its creation (keys in the group's own
// store), at most `timeoutMs`, so that the collective creation of its communicators that
// follows cannot wait without end. Names the ranks that did not arrive.
void awaitMembers(c10d::Store& store, int rank, int size, std::int64_t timeoutMs) {
  const std::string prefix = "chimera/created/";
  store.set(prefix + std::to_string(rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + std::to_string(r));
  try {
    store.wait(keys, std::chrono::milliseconds(timeoutMs));
  } catch (const std::exception& error) {
    std::string missing;
    for (int r = 0; r < size; ++r)
      if (!store.check({keys[static_cast<std::size_t>(r)]}))
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    TORCH_CHECK(false, "chimera process group: group rank(s) ", missing, " of ", size,
                " did not create the group within its timeout of ", timeoutMs, " ms (", error.what(), ")");
  }
}

// The c10d backend of one group, its host transport made now: over `gloo` (a gloo backend of
// the same group) when given, else over MPI.
c10::intrusive_ptr<c10d::Backend> createBackend(int rank, int size, std::vector<int> globalRanks, int worldSize,
                                                const std::string& groupId, c10::intrusive_ptr<c10d::Store> store,
                                                std::int64_t timeoutMs,
                                                std::optional<c10::intrusive_ptr<c10d::Backend>> gloo) {
  const bool isWorld = globalRanks.empty();
  if (isWorld)
    for (int r = 0; r < size; ++r) globalRanks.push_back(r);
  TORCH_CHECK(static_cast<int>(globalRanks.size()) == size, "chimera process group: ", globalRanks.size(),
              " global ranks for a group of ", size);
  TORCH_CHECK(rank >= 0 && rank < size, "chimera process group: group rank ", rank, " of ", size);
  const std::int64_t bound = timeoutMs > 0 ? timeoutMs : std::int64_t{30} * 60 * 1000;
  HostTransport host;
  bool asyncCpu = true;  // gloo's backend takes calls from any thread
  if (gloo.has_value() && *gloo) {
    check("process group (gloo transport)", createGlooTransport(*gloo, bound, host));
  } else {
    const std::string mismatch =
        mpiMismatch(worldSize, isWorld ? rank : globalRanks[static_cast<std::size_t>(rank)], isWorld);
    TORCH_CHECK(mismatch.empty(), "chimera process group: ", mismatch);
    {
      py::gil_scoped_release release;
      awaitMembers(*store, rank, size, bound);
      const int tag = static_cast<int>(std::hash<std::string>{}(groupId)&0x3fffffff);
      check("process group (MPI transport)", createMpiTransport(globalRanks, tag, timeoutMs, host));
    }
    asyncCpu = mpiThreadMultiple();
  }
  return c10::make_intrusive<ChimeraProcessGroup>(rank, size, std::move(host), std::move(store), asyncCpu, bound);
}

// torch's ProcessGroup of a chimera group, named "chimera": a plugin's group is otherwise
// named "custom" (ProcessGroup::getBackendName), which is what DDP's logging would report.
class NamedProcessGroup final : public c10d::ProcessGroup {
 public:
  NamedProcessGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
      : c10d::ProcessGroup(std::move(store), rank, size) {}
  const std::string getBackendName() const override { return "chimera"; }
};

// InvalidArgument and Unsupported mean "chimera cannot do this one": ValueError, which callers
// that can fall back catch; every other failure is a RuntimeError.
void raise(const char* what, const Status& status) {
  if (status.isOk()) return;
  const std::string message = std::string("chimera ") + what + ": " + status.toString();
  if (status.code() == StatusCode::InvalidArgument || status.code() == StatusCode::Unsupported)
    throw py::value_error(message);
  throw std::runtime_error(message);
}

DataType dataTypeOf(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DataType::F32;
    case at::kDouble: return DataType::F64;
    case at::kHalf: return DataType::F16;
    case at::kBFloat16: return DataType::BF16;
    case at::kInt: return DataType::I32;
    case at::kLong: return DataType::I64;
    case at::kByte: return DataType::U8;
    default: break;
  }
  throw py::value_error(std::string("chimera: dtype ") + c10::toString(type) +
                        " is not supported (float32, float64, float16, bfloat16, int32, int64, uint8 are)");
}

TensorSpec specOf(const std::vector<std::int64_t>& shape, at::ScalarType type) {
  return TensorSpec{shape, dataTypeOf(type)};
}

void requireHostContiguous(const char* what, const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(), "chimera ", what,
              ": needs a contiguous CPU tensor (the MPI backend works on host memory)");
}

std::size_t bytesOf(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()) * t.element_size(); }

py::tuple handleTuple(TensorHandle h) { return py::make_tuple(h.index, h.window); }
TensorHandle handleOf(const py::tuple& t) {
  TensorHandle h;
  h.index = t[0].cast<std::uint32_t>();
  h.window = t[1].cast<std::uint64_t>();
  return h;
}

AxisSet axesOf(MeshRuntime& runtime, const std::string& text) {
  AxisSet axes;
  raise("axes", runtime.mesh().parseAxes(text, axes));
  return axes;
}

Layout layoutOf(MeshRuntime& runtime, const std::string& text) {
  Layout layout;
  raise("layout", runtime.layout(text, layout));
  return layout;
}

// Output buffer of a recorded call: (pointer, bytes) of a tensor, or none.
std::pair<void*, std::size_t> bufferOf(const char* what, const std::optional<at::Tensor>& t) {
  if (!t.has_value() || !t->defined()) return {nullptr, 0};
  requireHostContiguous(what, *t);
  return {t->data_ptr(), bytesOf(*t)};
}

void bindMeshRuntime(py::module_& m) {
  py::class_<MeshRuntime>(m, "MeshRuntime",
                          "chimera's backend, executor and Session over the world laid out as a device mesh.")
      .def(py::init([](const std::vector<std::pair<std::string, int>>& axes, bool fusion, bool perRank) {
             std::vector<MeshAxis> meshAxes;
             for (const auto& [name, size] : axes) meshAxes.push_back({name, size});
             std::unique_ptr<MeshRuntime> runtime;
             raise("mesh", MeshRuntime::create(meshAxes, fusion, perRank, runtime));
             return runtime;
           }),
           py::arg("axes"), py::arg("fusion") = true, py::arg("per_rank") = false)
      .def_property_readonly("mesh", [](MeshRuntime& r) { return r.mesh().toString(); })
      .def("local_shape",
           [](MeshRuntime& r, const std::vector<std::int64_t>& shape, const std::string& layout) {
             std::vector<std::int64_t> out;
             raise("local_shape", r.localShape(TensorSpec{shape, DataType::F32}, layout, out));
             return out;
           })
      .def("plan_bytes",
           [](MeshRuntime& r, const std::vector<std::int64_t>& shape, at::ScalarType dtype, const std::string& from,
              const std::string& to) {
             RedistributionBytes bytes;
             raise("redistribute", r.planBytes(specOf(shape, dtype), from, to, bytes));
             return py::make_tuple(bytes.total, bytes.maxPerRank, bytes.plan);
           })
      .def("redistribute",
           [](MeshRuntime& r, const at::Tensor& input, const std::vector<std::int64_t>& shape, const std::string& from,
              const std::string& to) {
             requireHostContiguous("redistribute", input);
             const TensorSpec spec = specOf(shape, input.scalar_type());
             std::vector<std::int64_t> local;
             raise("redistribute", r.localShape(spec, to, local));
             at::Tensor output = at::empty(local, input.options());
             {
               py::gil_scoped_release release;
               raise("redistribute", r.redistribute(spec, from, to, input.data_ptr(), bytesOf(input), output.data_ptr(),
                                                    bytesOf(output)));
             }
             return output;
           })
      // --- Session: record collectives as a layer issues them; fusion at flush/consume ---
      .def("tensor",
           [](MeshRuntime& r, const at::Tensor& t, const std::vector<std::int64_t>& shape, const std::string& layout) {
             std::pair<void*, std::size_t> buffer{nullptr, 0};
             if (t.defined() && t.numel() > 0) buffer = bufferOf("Session.tensor", t);
             TensorHandle h;
             raise("Session.tensor", r.session().tensor(buffer.first, buffer.second, specOf(shape, t.scalar_type()),
                                                        layoutOf(r, layout), h));
             return handleTuple(h);
           })
      .def("all_reduce",
           [](MeshRuntime& r, const py::tuple& in, const std::string& axes) {
             TensorHandle h;
             raise("Session.all_reduce", r.session().allReduce(handleOf(in), axesOf(r, axes), h));
             return handleTuple(h);
           })
      .def("reduce_scatter",
           [](MeshRuntime& r, const py::tuple& in, const std::string& axes, int dim, const at::Tensor& out) {
             auto buffer = bufferOf("Session.reduce_scatter", out);
             TensorHandle h;
             raise("Session.reduce_scatter",
                   r.session().reduceScatter(handleOf(in), axesOf(r, axes), dim, buffer.first, buffer.second, h));
             return handleTuple(h);
           })
      .def("all_gather",
           [](MeshRuntime& r, const py::tuple& in, const std::string& axes, int dim, const at::Tensor& out) {
             auto buffer = bufferOf("Session.all_gather", out);
             TensorHandle h;
             raise("Session.all_gather",
                   r.session().allGather(handleOf(in), axesOf(r, axes), dim, buffer.first, buffer.second, h));
             return handleTuple(h);
           })
      .def("all_to_all",
           [](MeshRuntime& r, const py::tuple& in, const std::string& axes, int fromDim, int toDim,
              const at::Tensor& out) {
             auto buffer = bufferOf("Session.all_to_all", out);
             TensorHandle h;
             raise("Session.all_to_all",
                   r.session().allToAll(handleOf(in), axesOf(r, axes), fromDim, toDim, buffer.first, buffer.second, h));
             return handleTuple(h);
           })
      .def(
          "send",
          [](MeshRuntime& r, const py::tuple& in, const std::string& axis, const std::optional<at::Tensor>& recv,
             bool backward) {
            auto buffer = bufferOf("Session.send", recv);
            TensorHandle h;
            const AxisSet axes = axesOf(r, axis);
            raise("Session.send", backward ? r.session().sendBack(handleOf(in), axes, buffer.first, buffer.second, h)
                                           : r.session().send(handleOf(in), axes, buffer.first, buffer.second, h));
            return handleTuple(h);
          },
          py::arg("handle"), py::arg("axis"), py::arg("recv"), py::arg("backward") = false)
      .def(
          "recv",
          [](MeshRuntime& r, const at::Tensor& out, const std::vector<std::int64_t>& shape, const std::string& layout,
             const std::string& axis, bool backward) {
            auto buffer = bufferOf("Session.recv", out);
            const TensorSpec spec = specOf(shape, out.scalar_type());
            TensorHandle h;
            const AxisSet axes = axesOf(r, axis);
            raise("Session.recv",
                  backward ? r.session().recvBack(spec, layoutOf(r, layout), axes, buffer.first, buffer.second, h)
                           : r.session().recv(spec, layoutOf(r, layout), axes, buffer.first, buffer.second, h));
            return handleTuple(h);
          },
          py::arg("out"), py::arg("shape"), py::arg("layout"), py::arg("axis"), py::arg("backward") = false,
          "Per-rank recording: this rank's receiving side of a hand-off along `axis` (backward: of a send_back).")
      .def("declare_read",
           [](MeshRuntime& r, const py::tuple& t, const std::string& layout) {
             raise("Session.declare_read", r.session().declareRead(handleOf(t), layoutOf(r, layout)));
           })
      .def("flush",
           [](MeshRuntime& r) {
             py::gil_scoped_release release;
             raise("Session.flush", r.session().flush());
           })
      .def("stats", [](MeshRuntime& r) {
        const SessionStats s = r.session().stats();
        py::dict d;
        d["recorded_calls"] = s.recordedCalls;
        d["windows"] = s.windows;
        d["window_cache_hits"] = s.windowCacheHits;
        d["chains_run"] = s.chainsRun;
        d["fused_chains"] = s.fusedChains;
        d["bytes_as_recorded"] = s.bytesAsRecorded;
        d["bytes_sent"] = s.bytesSent;
        d["rank_bytes_as_recorded"] = s.rankBytesAsRecorded;
        d["rank_bytes_sent"] = s.rankBytesSent;
        return d;
      });
}

}  // namespace
}  // namespace chimera::torch_ext

PYBIND11_MODULE(_C, m) {
  m.doc() = "chimera's torch.distributed backend (import chimera.torch to register it)";
  py::module_::import("torch.distributed");
  m.def("create_backend", &chimera::torch_ext::createBackend, py::arg("rank"), py::arg("size"), py::arg("global_ranks"),
        py::arg("world_size"), py::arg("group_id"), py::arg("store"), py::arg("timeout_ms") = 0,
        py::arg("gloo") = py::none(),
        "Creates the c10d backend of one process group (collective over its members): its host transport over "
        "`gloo` (a gloo backend of the same group) when given, else over MPI.");
  m.def(
      "named_process_group",
      [](c10::intrusive_ptr<c10d::Store> store, int rank, int size) -> c10::intrusive_ptr<c10d::ProcessGroup> {
        return c10::make_intrusive<chimera::torch_ext::NamedProcessGroup>(std::move(store), rank, size);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"),
      "A torch ProcessGroup whose backend name is \"chimera\" (register the backends on it).");
  m.def(
      "mpi_world",
      [] {
        int rank = 0;
        int size = 0;
        chimera::torch_ext::check("mpi_world", chimera::torch_ext::mpiWorldOf(rank, size));
        return py::make_tuple(rank, size);
      },
      "(rank, size) of MPI_COMM_WORLD, initialising MPI when nobody has.");
  chimera::torch_ext::bindMeshRuntime(m);
  m.def("mpi_thread_multiple", &chimera::torch_ext::mpiThreadMultiple,
        "Whether MPI runs with MPI_THREAD_MULTIPLE (asynchronous CPU ops then run on a thread per group).");
  m.def("cuda_supported", &chimera::torch_ext::ChimeraProcessGroup::cudaSupported,
        "Whether this build runs CUDA tensors (on chimera's NCCL backend).");
  m.def("finalize_mpi", &chimera::torch_ext::finalizeExtensionMpi,
        "Finalises MPI if chimera initialised it (at interpreter exit).");
}
