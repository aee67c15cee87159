"""The CPU as the runtimes we drive see it: its flags, and the choices of ours that follow them.

ONNX Runtime and OpenVINO pick their kernels by instruction set, so a few build choices must too: 7-bit INT8
weights where the int8 kernels would saturate on 8-bit ones, and BF16 in OpenVINO's gate where the CPU computes
in it. Each reads the flags here. ``TRITONGEN_CPU_FLAGS`` (space- or comma-separated ``/proc/cpuinfo`` flags)
replaces this machine's: the tests run every branch on any machine with it, and a build can be made for a node
with fewer flags than the build machine (it can only remove what this CPU has where a library asks the CPU
itself, as OpenVINO does for BF16). ``python -m tritongen.cpu`` prints the CPU and each choice.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["BF16_FLAGS", "CPU_FLAGS_ENV", "VNNI_FLAGS", "cpu_flags", "cpu_model", "describe", "int8_weights_saturate"]

CPU_FLAGS_ENV = "TRITONGEN_CPU_FLAGS"
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")  # int8 dot products with int32 sums
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
_SHOWN = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: no flags known, the conservative branches
        return ""


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's flags: ``TRITONGEN_CPU_FLAGS`` if set, else those ``cpuinfo`` (``/proc/cpuinfo``'s text) lists."""
    override = os.environ.get(CPU_FLAGS_ENV)
    if override is not None and cpuinfo is None:
        return frozenset(override.replace(",", " ").split())
    text = _cpuinfo() if cpuinfo is None else cpuinfo
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, ARM
            return frozenset(value.split())
    return frozenset(text.split()) if ":" not in text else frozenset()


def cpu_model() -> str:
    """The CPU's name as ``/proc/cpuinfo`` gives it (``platform.processor()`` elsewhere)."""
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return platform.processor() or platform.machine()


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def int8_weights_saturate(cpuinfo: str | None = None) -> bool:
    """Whether ONNX Runtime's CPU int8 kernels here saturate on full-range int8 weights.

    On x86 without VNNI, ONNX Runtime multiplies uint8 activations by int8 weights with VPMADDUBSW, whose
    pairwise int16 sums saturate (255 * 127 * 2 > 32767): a MatMulInteger of 64 such pairs gives 1,048,544
    instead of 2,072,640 on AVX2 kernels (``tests/sizing/test_cpu.py`` runs it on an emulated AVX2-only CPU). Weights
    of 7 bits (ONNX Runtime's ``reduce_range``) keep the sums in range (255 * 64 * 2 = 32640) and the result
    exact. With VNNI (int32 sums), on ARM and on GPUs there is no such limit. ``cpuinfo`` is the text of
    ``/proc/cpuinfo`` (None: this machine's flags, or ``TRITONGEN_CPU_FLAGS``; none known counts as no VNNI).
    """
    if not _x86():
        return False
    return not any(flag in cpu_flags(cpuinfo) for flag in VNNI_FLAGS)


def describe() -> list[str]:
    """The CPU, its flags that matter here, and the choice each build makes on it: one line each."""
    flags = cpu_flags()
    source = f" ({CPU_FLAGS_ENV})" if CPU_FLAGS_ENV in os.environ else ""
    shown = " ".join(f"{flag}{'+' if flag in flags else '-'}" for flag in _SHOWN)
    return [
        f"cpu: {cpu_model()}, {os.cpu_count()} logical cores, {platform.machine()}",
        f"flags{source}: {shown}",
        f"int8 weights: {'7-bit (no VNNI: 8-bit ones saturate)' if int8_weights_saturate() else '8-bit'}",
        f"OpenVINO BF16 gate: {'yes' if any(f in flags for f in BF16_FLAGS) else 'no (no BF16)'}",
    ]


if __name__ == "__main__":
    print("\n".join(describe()))
