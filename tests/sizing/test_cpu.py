"""The choices that follow the CPU's instruction set, each branch run on this machine whatever its CPU.

``TRITONGEN_CPU_FLAGS`` puts a build on the branch of a CPU with fewer flags. Where the premise of a branch
is the runtime's own kernels, an AVX2-only CPU is made two ways, so that ONNX Runtime picks its AVX2 kernels on
any x86 machine: emulated (qemu-user's Haswell model: AVX2 and FMA, no AVX-512, no VNNI), and natively, with
``tools/avx2_only.c`` preloaded (CPUID without AVX-512, VNNI or AMX, where the CPU can fault on CPUID: the
shim ``make test-avx2`` runs the whole suite under).
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tritongen.cpu import CPU_FLAGS_ENV, cpu_flags, describe, int8_weights_saturate

X86 = platform.machine().lower() in ("x86_64", "amd64")
HERE = "VNNI" if not int8_weights_saturate() else "no VNNI"
QEMU = shutil.which("qemu-x86_64")
AVX2_ONLY_CPU = "Haswell-v4"  # qemu's model: AVX2 and FMA, no AVX-512, no VNNI
SHIM_SOURCE = Path(__file__).resolve().parents[2] / "tools" / "avx2_only.c"
CPUINFO = Path("/proc/cpuinfo")
CPUID_FAULTS = CPUINFO.exists() and "cpuid_fault" in cpu_flags(CPUINFO.read_text())  # this CPU's, not the override


@pytest.fixture(scope="module")
def avx2_only(tmp_path_factory) -> list[str]:
    """The environment prefix that runs a program on this CPU with CPUID masked to AVX2 (``tools/avx2_only.c``)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not (X86 and CPUID_FAULTS and compiler):
        pytest.skip("needs x86 Linux whose CPU can fault on CPUID (cpuid_fault) and a C compiler")
    lib = tmp_path_factory.mktemp("shim") / "avx2_only.so"
    out = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(lib), str(SHIM_SOURCE), "-ldl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return ["env", f"LD_PRELOAD={lib}"]


def test_flags_come_from_cpuinfo_or_the_override(monkeypatch):
    x86 = "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx2 fma\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd asimddp\n"
    assert cpu_flags(x86) == {"fpu", "sse2", "avx2", "fma"}
    assert cpu_flags(arm) == {"fp", "asimd", "asimddp"}
    monkeypatch.setenv(CPU_FLAGS_ENV, "avx2,fma avx512f")
    assert cpu_flags() == {"avx2", "fma", "avx512f"}
    assert cpu_flags(x86) == {"fpu", "sse2", "avx2", "fma"}  # given text wins over the override
    lines = describe()
    assert f"({CPU_FLAGS_ENV})" in lines[1] and "avx512f+" in lines[1] and "avx512_vnni-" in lines[1]


@pytest.mark.parametrize(
    ("machine", "flags", "saturates"),
    [
        ("x86_64", "fpu sse2 avx2 fma", True),  # VPMADDUBSW's int16 sums: 7-bit weights
        ("x86_64", "fpu avx2 avx512f avx512bw", True),
        ("x86_64", "fpu avx2 avx512f avx512_vnni", False),
        ("x86_64", "fpu avx2 avx_vnni", False),
        ("x86_64", "fpu avx2 avx512f amx_int8", False),
        ("aarch64", "fp asimd asimddp", False),
    ],
)
def test_int8_weights_saturate_only_when_x86_has_no_vnni(monkeypatch, machine, flags, saturates):
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert int8_weights_saturate(f"processor\t: 0\nflags\t\t: {flags}\n") is saturates
    monkeypatch.setenv(CPU_FLAGS_ENV, flags)
    assert int8_weights_saturate() is saturates


def _matmul_integer(weight: int) -> onnx.ModelProto:
    """uint8 [rows, 64] x int8 [64, 8] weights all equal to ``weight``: 32 VPMADDUBSW pairs per output."""
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "W", "a_zero", "w_zero"], ["Y"])],
        "saturation",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [None, 64])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [None, 8])],
        [
            numpy_helper.from_array(np.full((64, 8), weight, np.int8), "W"),
            numpy_helper.from_array(np.array(0, np.uint8), "a_zero"),
            numpy_helper.from_array(np.array(0, np.int8), "w_zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


_RUN = textwrap.dedent(
    """
    import sys
    import numpy as np
    import onnxruntime as ort
    for path in sys.argv[1:]:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        print(int(session.run(None, {"A": np.full((4, 64), 255, np.uint8)})[0][0, 0]))
    """
)


def _products(tmp_path: Path, prefix: list[str]) -> dict[int, int]:
    """ONNX Runtime's product of 64 x 255 by 64 x w for full-range (127) and 7-bit (63) weights w."""
    paths = []
    for weight in (127, 63):
        paths.append(tmp_path / f"w{weight}.onnx")
        onnx.save(_matmul_integer(weight), paths[-1])
    out = subprocess.run(
        [*prefix, sys.executable, "-c", _RUN, *map(str, paths)], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return dict(zip((127, 63), map(int, out.stdout.split()), strict=True))


@pytest.mark.skipif(not X86, reason="the int8 kernels in question are x86's")
def test_int8_kernels_here_follow_the_branch_this_cpu_takes(tmp_path):
    """On this machine's own kernels: exact with 8-bit weights where VNNI is (the branch taken here), and always
    exact with 7-bit weights."""
    products = _products(tmp_path, [])
    assert products[63] == 64 * 255 * 63
    if not int8_weights_saturate():  # VNNI here: 8-bit weights, and they are exact
        assert products[127] == 64 * 255 * 127, f"branch here: {HERE}"


@pytest.mark.parametrize("cpu", ["qemu Haswell-v4", "CPUID masked"])
def test_int8_kernels_of_an_avx2_only_cpu_saturate_on_8_bit_weights_and_not_on_7_bit(request, tmp_path, cpu):
    """The premise of the 7-bit branch, on ONNX Runtime's AVX2 kernels: on qemu's AVX2-only CPU, and natively on
    this one with CPUID masked to AVX2 (``tools/avx2_only.c``).

    Each int16 pair sum saturates at 32,767: 32 pairs give 1,048,544 instead of 2,072,640. With 7-bit weights
    the pairs stay below it and the product is exact.
    """
    if cpu.startswith("qemu"):
        if not (X86 and QEMU):
            pytest.skip("needs qemu-user (qemu-x86_64) to emulate an AVX2-only CPU")
        prefix = [QEMU, "-cpu", AVX2_ONLY_CPU]
    else:
        prefix = request.getfixturevalue("avx2_only")
    products = _products(tmp_path, prefix)
    assert products[127] == 32 * 32767 != 64 * 255 * 127
    assert products[63] == 64 * 255 * 63


def _tiny_matmul_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"], name="dense")],
        "dense",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 32])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 16])],
        [numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32), "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(("flags", "largest"), [("avx2 fma", 64), ("avx2 avx512f avx512_vnni", 127)])
def test_dynamic_int8_quantises_weights_to_the_bits_of_the_branch(monkeypatch, tmp_path, flags, largest):
    """Each branch of the dynamic quantiser, whatever this CPU: 7-bit weights without VNNI, 8-bit with it."""
    from tritongen.precision.optimize import Int8Recipe, quantize_int8

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setenv(CPU_FLAGS_ENV, flags)
    source = _tiny_matmul_model(tmp_path / "fp32.onnx")
    quantize_int8(source, tmp_path / "int8.onnx", Int8Recipe("dynamic", ["dense"]))
    weights = [
        numpy_helper.to_array(t) for t in onnx.load(tmp_path / "int8.onnx").graph.initializer if t.data_type == 3
    ]  # int8 tensors: the quantised weights
    assert weights and max(int(np.abs(w.astype(np.int32)).max()) for w in weights) == largest


def test_openvino_gates_bf16_only_where_the_flags_have_it(monkeypatch):
    from tritongen.runtimes.openvino.ir import cpu_precisions

    monkeypatch.delenv(CPU_FLAGS_ENV, raising=False)  # what OpenVINO finds here, whatever flags the run was given
    native = cpu_precisions()
    monkeypatch.setenv(CPU_FLAGS_ENV, "avx2 fma avx512f")
    assert cpu_precisions() == ("f32",)
    monkeypatch.setenv(CPU_FLAGS_ENV, "avx2 avx512f avx512_bf16")
    assert cpu_precisions() == native  # a flag cannot add what OpenVINO finds missing here


_SEEN = textwrap.dedent(
    """
    import json
    from numpy._core._multiarray_umath import __cpu_features__ as numpy_sees
    import torch
    from tritongen.runtimes.openvino.ir import cpu_precisions
    print(json.dumps({
        "numpy": {flag: numpy_sees[flag] for flag in ("AVX2", "FMA3", "AVX512F", "AVX512VNNI", "AVX512_SPR")},
        "torch": torch.backends.cpu.get_cpu_capability(),
        "openvino": list(cpu_precisions()),
    }))
    """
)


def test_with_cpuid_masked_every_library_sees_an_avx2_only_cpu(avx2_only, monkeypatch):
    """The shim ``make test-avx2`` runs under: numpy's dispatch, PyTorch's kernels and OpenVINO's own view of the
    CPU all see AVX2 and FMA without AVX-512 or VNNI, here natively, and OpenVINO's gate drops BF16 without
    being told (no ``TRITONGEN_CPU_FLAGS``)."""
    monkeypatch.delenv(CPU_FLAGS_ENV, raising=False)
    out = subprocess.run([*avx2_only, sys.executable, "-c", _SEEN], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["numpy"] == {"AVX2": True, "FMA3": True, "AVX512F": False, "AVX512VNNI": False, "AVX512_SPR": False}
    assert seen["torch"] == "AVX2"
    assert seen["openvino"] == ["f32"]


def test_with_cpuid_masked_a_real_fault_still_reaches_the_programs_handler(avx2_only):
    """The shim answers CPUID faults only: any other SIGSEGV goes to the handler the program installed
    (Python's faulthandler here, installed after the shim), and the program dies of it as it would have."""
    crash = "import faulthandler, ctypes; faulthandler.enable(); ctypes.string_at(0)"
    out = subprocess.run([*avx2_only, sys.executable, "-c", crash], capture_output=True, text=True, timeout=120)
    assert out.returncode == -11
    assert "Fatal Python error: Segmentation fault" in out.stderr
