"""What a node's CPU side carries per core: the figures a build's card and a capacity plan quote.

The CPU side is Triton's frontend and the Python steps, everything but the model step; on a GPU node it must keep
the GPU fed. ``make bench BENCH_ARGS=--free-model-step`` measures a node's own (``tritongen.deploy.plan`` reads
them); until then :data:`REFERENCE_CPU_SIDE` stands in.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["REFERENCE_CPU_SIDE", "CpuSideFigures"]


@dataclass(frozen=True)
class CpuSideFigures:
    """What the CPU side carries per core, with the model step native (texts/s), and one tokenizer instance's cap.

    ``tokenizer_ms`` is the tokenizer step's CPU per one-text request: one instance (one single-threaded
    process) carries at most 1000 / ``tokenizer_ms`` such requests/s, whatever the cores.
    """

    one_text_per_core: float
    batch_per_core: float  # texts/s per core with 32 texts per request
    tokenizer_ms: float
    source: str

    def capacity(self, cores: int, tokenizer_instances: int) -> tuple[float, float]:
        """(one-text requests/s, texts/s in requests of 32) of a node of ``cores`` cores."""
        one_text = min(cores * self.one_text_per_core, tokenizer_instances * 1000 / self.tokenizer_ms)
        return one_text, cores * self.batch_per_core


# MiniLM's folded GPU build with its model step free and served by Triton's native onnxruntime backend, measured on
# a 2-core AMD EPYC (AVX-512) on 2026-11-27 by `python -m tritongen bench --name minilm_gpu --free-model-step
# --tokenizer-instances 1,2` (docs/benchmarks.md, "The CPU side": 2,245-2,694 one-text requests/s and 7,903-8,429
# texts/s in requests of 32 per core, the tokenizer's stub 0.18-0.20 ms per one-text request), rounded down: the
# reference a build's card quotes until a node's own figures are measured.
REFERENCE_CPU_SIDE = CpuSideFigures(
    one_text_per_core=2000.0,
    batch_per_core=7500.0,
    tokenizer_ms=0.25,
    source="MiniLM's CPU side measured per core, model step native, on a 2-core EPYC, 2026-11-27 (docs/benchmarks.md)",
)
