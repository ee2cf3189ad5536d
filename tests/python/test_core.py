# SPDX-License-Identifier: Apache-2.0
# The package without communication: Mesh, Layout and its DTensor placement mapping,
# TensorSpec, plan(), the exception hierarchy, and the zero-copy checks every call applies to
# a tensor (contiguity, dtype, memory space), on NumPy arrays and torch CPU tensors.
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import chimera


def test_mesh():
    mesh = chimera.Mesh("pp=2,tp=4")
    assert mesh.size == 8 and len(mesh) == 8
    assert mesh.axes == [("pp", 2), ("tp", 4)]
    assert mesh.axis_names == ["pp", "tp"] and mesh.shape == (2, 4)
    assert mesh.coordinates(6) == [1, 2] and mesh.rank_of([1, 2]) == 6
    assert mesh.group_ranks(6, "tp") == [4, 5, 6, 7]
    assert mesh.group_ranks(6, "pp") == [2, 6]
    assert mesh.group_ranks(6, ["pp", "tp"]) == list(range(8))
    assert mesh.group_size(None) == 8
    assert str(mesh.sub_mesh("pp", 1)) == "tp=4" and mesh.sub_mesh("pp", 1).world_ranks == [4, 5, 6, 7]
    assert mesh == chimera.Mesh("pp=2,tp=4") and mesh != chimera.Mesh("tp=4,pp=2")
    assert repr(mesh) == 'chimera.Mesh("pp=2,tp=4")'


@pytest.mark.parametrize("text", ["pp=2,,tp=4", "pp=0", "pp=2,pp=2", "9x=2", ""])
def test_mesh_errors(text):
    with pytest.raises(chimera.InvalidArgument):
        chimera.Mesh(text)


def test_layout_text_and_queries():
    mesh = chimera.Mesh("pp=2,tp=4")
    layout = chimera.Layout("pp=@0,tp=S1", mesh)
    spec = chimera.TensorSpec((8, 16), "bf16")
    assert str(layout) == "pp=@0,tp=S1"
    assert layout.holders() == [0, 1, 2, 3] and layout.holds(2) and not layout.holds(5)
    assert layout.local_shape(spec) == (8, 4)
    assert layout.local_bytes(spec) == 8 * 4 * 2
    assert layout.rank_box(2, spec) == ([0, 8], [8, 4])
    assert layout.after("send:pp", spec) == chimera.Layout("pp=@1,tp=S1", mesh)
    square = chimera.Mesh("dp=2,tp=2")
    assert chimera.Layout("dp+tp=S0", square) == chimera.Layout("dp=S0,tp=S0", square)
    with pytest.raises(chimera.InvalidArgument, match="not divisible"):
        chimera.Layout("tp=S0", mesh).validate(chimera.TensorSpec((10,), "f32"))
    with pytest.raises(chimera.InvalidArgument, match="unknown mesh axis"):
        chimera.Layout("ep=S0", mesh)


def test_layout_without_mesh_needs_init():
    code = ("import chimera\n"
            "try:\n    chimera.Layout('tp=P')\nexcept chimera.InvalidArgument as e:\n    print('needs', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "needs a mesh" in out


# The placement mapping table of docs/python.md, both directions.
PLACEMENTS = [
    ("pp=2,tp=4", "pp=@1,tp=P", [chimera.Stage(1), chimera.Partial("sum")]),
    ("dp=2,tp=4", "dp=S0,tp=S1", [chimera.Shard(0), chimera.Shard(1)]),
    ("dp=2,tp=4", "tp=P(max)", [chimera.Replicate(), chimera.Partial("max")]),
    ("dp=2,tp=4", "dp+tp=S0", [chimera.Shard(0), chimera.Shard(0)]),
    ("dp=2,tp=4", "tp=R", [chimera.Replicate(), chimera.Replicate()]),
    ("dp=2,sp=2,tp=2", "sp=S1,tp=P(avg)", [chimera.Replicate(), chimera.Shard(1), chimera.Partial("avg")]),
]


@pytest.mark.parametrize("mesh,text,placements", PLACEMENTS)
def test_placements_round_trip(mesh, text, placements):
    mesh = chimera.Mesh(mesh)
    layout = chimera.Layout(text, mesh)
    assert layout.to_placements() == placements
    assert chimera.Layout.from_placements(mesh, placements) == layout
    assert chimera.Layout.from_placements(mesh, [str(p) for p in placements]) == layout


def test_placements_from_dtensor_objects():
    torch_tensor = pytest.importorskip("torch.distributed.tensor")
    mesh = chimera.Mesh("dp=2,tp=4")
    layout = chimera.Layout.from_placements(mesh, [torch_tensor.Shard(0), torch_tensor.Partial("max")])
    assert str(layout) == "dp=S0,tp=P(max)"
    assert chimera.Layout.from_placements(mesh, [torch_tensor.Replicate(), torch_tensor.Shard(1)]) == \
        chimera.Layout("tp=S1", mesh)
    assert layout.to_dtensor_placements() == [torch_tensor.Shard(0), torch_tensor.Partial("max")]
    with pytest.raises(ValueError, match="no DTensor placement"):
        chimera.Layout("dp=@0", mesh).to_dtensor_placements()


def test_placement_errors():
    mesh = chimera.Mesh("dp=2,tp=4")
    with pytest.raises(ValueError, match="2 axes"):
        chimera.Layout.from_placements(mesh, [chimera.Shard(0)])
    with pytest.raises(chimera.Unsupported, match="not in mesh order"):
        chimera.Layout("tp+dp=S0", mesh).to_placements()
    with pytest.raises(chimera.InvalidArgument):
        chimera.Layout.from_placements(mesh, [chimera.Partial("sum"), chimera.Partial("max")])


def test_tensor_spec_dtypes():
    import torch

    for dtype, name in [("bf16", "bf16"), ("float32", "f32"), (np.float16, "f16"), (np.dtype("int32"), "i32"),
                        (torch.bfloat16, "bf16"), (torch.float64, "f64"), (torch.int64, "i64"), (torch.uint8, "u8")]:
        assert chimera.TensorSpec((4, 2), dtype).dtype == name
        assert chimera.dtype_name(dtype) == name
    spec = chimera.TensorSpec([8192, 2048], "bf16")
    assert spec.shape == (8192, 2048) and spec.nbytes == 8192 * 2048 * 2 and spec.num_elements == 8192 * 2048
    with pytest.raises(chimera.InvalidArgument):
        chimera.TensorSpec((4,), "complex64")
    with pytest.raises(chimera.InvalidArgument):
        chimera.TensorSpec((0, 4), "f32")


def test_plan_matches_the_tool_json():
    report = chimera.plan("pp=2,tp=4", (8192, 2048), "bf16", "pp=@0,tp=P", "allreduce:tp,send:pp",
                          consume="pp=@1,tp=R", topology="pcie-4080x8")
    assert report["chain"] == "allreduce:tp,send:pp" and report["mesh"] == "pp=2,tp=4"
    assert report["decision"] in ("fused", "baseline")
    assert report["baseline"]["bytes_total"] > 0
    tool = os.environ.get("CHIMERA_PLAN_TOOL")
    if tool:  # the same document as chimera-plan --json, field by field
        out = subprocess.run([tool, "--mesh", "pp=2,tp=4", "--shape", "8192,2048", "--dtype", "bf16", "--from",
                              "pp=@0,tp=P", "--chain", "allreduce:tp,send:pp", "--consume", "pp=@1,tp=R",
                              "--topology", "pcie-4080x8", "--json"], capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == report
    with pytest.raises(chimera.InvalidArgument, match="allgather"):
        chimera.plan("tp=4", (8, 8), "f32", "tp=P", "allgather:tp:0")


def test_exceptions_are_named_after_the_status():
    assert issubclass(chimera.InvalidArgument, chimera.Error) and issubclass(chimera.InvalidArgument, ValueError)
    assert issubclass(chimera.Timeout, TimeoutError) and issubclass(chimera.Unsupported, NotImplementedError)
    for name in ("Mismatch", "BackendError", "Internal"):
        assert issubclass(getattr(chimera, name), chimera.Error)
    assert issubclass(chimera.Error, RuntimeError)


# --- zero-copy views and their errors ------------------------------------------------------

def test_views_are_zero_copy():
    import torch

    t = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    assert chimera._chimera._view(t) == (t.data_ptr(), 24, "bfloat16")
    a = np.zeros((5, 2), dtype=np.int32)
    assert chimera._chimera._view(a) == (a.ctypes.data, 40, "int32")
    # A DLPack round trip shares the memory both ways.
    n = np.from_dlpack(torch.ones(4))
    assert chimera._chimera._view(n)[0] == n.ctypes.data
    back = torch.from_dlpack(a)
    assert chimera._chimera._view(back)[0] == a.ctypes.data
    # A slice that is contiguous (rows of a row-major array) is accepted as is.
    rows = torch.zeros(6, 4)[2:4]
    assert chimera._chimera._view(rows)[0] == rows.data_ptr()
    # Extents of 1 may carry any stride.
    assert chimera._chimera._view(torch.zeros(4, 1).t())[1] == 16


@pytest.mark.parametrize("make,needle", [
    (lambda: np.zeros((4, 4), np.float32).T, "C-contiguous"),
    (lambda: np.zeros(8, np.float32)[::2], "C-contiguous"),
    (lambda: __import__("torch").zeros(4, 4)[:, 1:3], "C-contiguous"),
    (lambda: np.zeros(4, np.int16), "dtype int16"),
    (lambda: np.zeros(4, np.complex64), "dtype complex64"),
    (lambda: __import__("torch").zeros(4, dtype=__import__("torch").bool), "dtype bool8"),
    (lambda: [1.0, 2.0], "must be a writable array exporting DLPack"),
])
def test_bad_tensors_raise_value_error(make, needle):
    with pytest.raises(ValueError, match=needle) as info:
        chimera._chimera._view(make())
    assert "'tensor'" in str(info.value)  # names the argument


def test_read_only_array_raises_value_error():
    a = np.zeros(4, np.float32)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="must be a writable array exporting DLPack"):
        chimera._chimera._view(a)


def test_tensor_requiring_grad_is_viewed_in_place():
    import torch

    t = torch.zeros(4, requires_grad=True)
    assert chimera._chimera._view(t)[0] == t.data_ptr()


def test_wrong_memory_space_raises_value_error():
    import torch

    with pytest.raises(ValueError, match="must be in CUDA device memory for this backend, but it is on cpu"):
        chimera._chimera._view(torch.zeros(4), "device")


def test_import_does_not_load_libtorch():
    code = "import chimera, sys; print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


def _probe(env_value, with_torch=True):
    """(chimera.nccl_library() after import chimera, then import torch; every libnccl mapped)."""
    code = (("import chimera, torch\n" if with_torch else "import chimera\n") +
            "maps = {l.split()[-1] for l in open('/proc/self/maps') if 'libnccl.so' in l}\n"
            "print(chimera.nccl_library()); print(sorted(maps))")
    env = dict(os.environ)
    env.pop("CHIMERA_NCCL_LIBRARY", None)
    if env_value is not None:
        env["CHIMERA_NCCL_LIBRARY"] = env_value
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    loaded, maps = out.stdout.splitlines()
    return loaded, eval(maps)


@pytest.mark.skipif(not chimera.has_cuda, reason="a CPU-only build loads no NCCL")
def test_one_libnccl_shared_with_torch():
    wheel = chimera._nccl._wheel_nccl()
    loaded, maps = _probe(None)
    assert len(maps) == 1 and os.path.realpath(maps[0]) == loaded  # one NCCL serves chimera and torch
    if wheel is not None:
        assert loaded == os.path.realpath(wheel)
    loaded, maps = _probe("system", with_torch=False)
    assert len(maps) == 1 and "nvidia" not in loaded
    with pytest.raises(subprocess.CalledProcessError):
        _probe("/nonexistent/libnccl.so.2")


def test_argument_type_errors():
    backend = chimera._chimera._null_backend(chimera.Mesh("tp=2"), 0)  # moves no data
    with pytest.raises(chimera.InvalidArgument, match="axis names"):
        backend.all_reduce(np.ones(4, np.float32), axes=[1])
    session = chimera.Session(backend)
    t = session.tensor(np.ones(4, np.float32), chimera.Layout("tp=P", backend.mesh))
    with pytest.raises(TypeError, match="wrong type"):
        session.consume(t, offset=-1, nbytes=4)
    with pytest.raises(chimera.InvalidArgument, match="unknown backend"):
        chimera.init("tp=1", backend="gloo")


def test_overhead_bench_runs():
    out = subprocess.run([sys.executable, "-m", "chimera.bench", "--iters", "3", "--calls", "3", "--lib", "numpy"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert "cached Session window, per recorded call" in out and "all_reduce on MPI" in out


def _session_stats_members():
    """The counters SessionStats declares (include/chimera/session.hpp), as snake_case names."""
    header = open(os.path.join(os.path.dirname(__file__), "..", "..", "include", "chimera", "session.hpp")).read()
    body = re.search(r"struct SessionStats \{(.*?)\n\};", header, re.S).group(1)
    members = re.findall(r"std::uint64_t (\w+) = 0;", body)
    return [re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name) for name in members]


def test_every_session_stats_counter_reaches_python():
    members = _session_stats_members()
    assert "rank_bytes_sent" in members and "agreements" in members
    session = chimera.Session(chimera._chimera._null_backend(chimera.Mesh("tp=2"), 0))
    assert list(session.stats()) == members
    assert all(value == 0 for value in session.stats().values())
