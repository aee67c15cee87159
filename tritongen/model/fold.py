"""Fold the postprocess step into the served ONNX graph, where that is pure tensor math.

An embedding's normalisation, a classifier's softmax or sigmoid, its best score and its best label (a string,
through ``ai.onnx.ml.LabelEncoder``) are a handful of ONNX operators. Appended to the served model they drop
the postprocess step from the ensemble: one Python hop and one IPC round trip fewer per request.

The graph keeps the model's own output (``logits``, ``sentence_embedding``) beside the ensemble's, so the
roll-out canary still compares it. A fold is kept only when it proves itself: the folded graph's outputs
must equal the Python postprocess step's outputs computed from the same run's raw output, on the parity
texts, in our ONNX Runtime and in the 24.10 container's (``tritongen.gates.compat``). Otherwise the build serves
the three-step ensemble and the model card says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tritongen.contract import LABEL, PROBABILITIES, SCORE

if TYPE_CHECKING:
    import onnx


__all__ = [
    "FOLD_TOLERANCE",
    "FoldProof",
    "FoldReport",
    "GraphTail",
    "classification_tail",
    "float_input",
    "fold_graph",
    "fold_served",
    "last_axis",
    "prove",
]

FOLD_TOLERANCE = 1e-5  # float outputs: the same float32 math in two places
MIN_OPSET = 18  # ReduceL2/ReduceMax take their axes as an input; the export's opset (tritongen.model.export)
ML_DOMAIN = "ai.onnx.ml"
ML_OPSET = 2  # LabelEncoder with keys_int64s/values_strings; ONNX Runtime 1.19 and later run it


@dataclass(frozen=True)
class GraphTail:
    """Nodes appended after the model output: what they compute, and the outputs they add."""

    nodes: tuple[Any, ...]  # onnx.NodeProto
    outputs: Mapping[str, tuple[int, int]]  # name -> (onnx elem type, width); each is [batch, width]
    initializers: tuple[Any, ...] = ()
    domains: Mapping[str, int] = field(default_factory=dict)  # extra opset imports


def float_input(source: str) -> tuple[str, list[Any]]:
    """The model output ``source`` cast to float32: its new name, and the node that casts it."""
    from onnx import TensorProto, helper

    name = f"{source}__fp32"
    return name, [helper.make_node("Cast", [source], [name], to=TensorProto.FLOAT, name="fold_cast")]


def last_axis() -> Any:
    """The initializer ``fold_last_axis`` ([-1]), the axes input of a reduction over the last axis."""
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array([-1], dtype=np.int64), "fold_last_axis")


def classification_tail(source: str, labels: Sequence[str], *, function: str) -> GraphTail:
    """``PROBABILITIES``, ``SCORE`` (the best) and ``LABEL`` (its name), as the postprocess step computes them."""
    from onnx import TensorProto, helper

    if function not in ("softmax", "sigmoid"):
        raise ValueError(f"cannot fold activation `{function}`")
    x, nodes = float_input(source)
    activation = (
        helper.make_node("Softmax", [x], [PROBABILITIES], axis=-1, name="fold_softmax")
        if function == "softmax"
        else helper.make_node("Sigmoid", [x], [PROBABILITIES], name="fold_sigmoid")
    )
    nodes += [
        activation,
        helper.make_node("ReduceMax", [PROBABILITIES, "fold_last_axis"], [SCORE], keepdims=1, name="fold_score"),
        helper.make_node("ArgMax", [PROBABILITIES], ["fold_best"], axis=-1, keepdims=1, name="fold_best"),
        helper.make_node(
            "LabelEncoder",
            ["fold_best"],
            [LABEL],
            domain=ML_DOMAIN,
            name="fold_label",
            keys_int64s=list(range(len(labels))),
            values_strings=list(labels),
            default_string="",
        ),
    ]
    return GraphTail(
        tuple(nodes),
        {
            LABEL: (TensorProto.STRING, 1),
            SCORE: (TensorProto.FLOAT, 1),
            PROBABILITIES: (TensorProto.FLOAT, len(labels)),
        },
        (last_axis(),),
        {ML_DOMAIN: ML_OPSET},
    )


def fold_graph(model: onnx.ModelProto, source: str, tail: GraphTail) -> onnx.ModelProto:
    """A copy of ``model`` with ``tail`` after output ``source``; the graph keeps ``source`` as an output."""
    import onnx
    from onnx import helper

    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    graph = folded.graph
    batch = next((o for o in graph.output if o.name == source), None)
    if batch is None:
        raise ValueError(f"the model has no output `{source}`")
    batch_dim = batch.type.tensor_type.shape.dim[0]
    graph.node.extend(tail.nodes)
    graph.initializer.extend(tail.initializers)
    for name, (elem, width) in tail.outputs.items():
        value = helper.make_tensor_value_info(name, elem, [None, width])
        value.type.tensor_type.shape.dim[0].CopyFrom(batch_dim)
        graph.output.append(value)
    opset = max((o.version for o in folded.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < MIN_OPSET:
        raise ValueError(f"the model's opset {opset} is below {MIN_OPSET}, which the tail's Reduce operators need")
    present = {o.domain for o in folded.opset_import}
    for domain, version in tail.domains.items():
        if domain not in present:
            folded.opset_import.append(helper.make_opsetid(domain, version))
    onnx.checker.check_model(folded)
    return folded


@dataclass(frozen=True)
class FoldReport:
    """Whether the served graph carries the postprocess step, and the evidence."""

    folded: bool
    why: str  # why folded, or why not
    max_abs_diff: float = 0.0
    runtimes: tuple[str, ...] = ()  # ONNX Runtime versions the proof ran in

    def card_line(self) -> str:
        """The model card's line on the served path."""
        if self.folded:
            return f"- served path: tokenizer → model (the postprocess step is folded into the graph: {self.why})"
        return f"- served path: tokenizer → model → postprocess ({self.why})"

    def to_dict(self) -> dict[str, Any]:
        """For ``build.json``."""
        return {
            "folded": self.folded,
            "why": self.why,
            "max_abs_diff": self.max_abs_diff,
            "runtimes": list(self.runtimes),
        }


def compare_outputs(expected: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> tuple[str | None, float]:
    """(None, worst float difference) when ``got`` gives ``expected``'s outputs; else (why not, difference)."""
    worst = 0.0
    for name, want in expected.items():
        have = np.asarray(got[name])
        if want.dtype == np.object_:
            decoded = [w.decode() if isinstance(w, bytes) else str(w) for w in want.reshape(-1)]
            served = [h.decode() if isinstance(h, bytes) else str(h) for h in have.reshape(-1)]
            if decoded != served:
                return f"`{name}` differs: {served[:4]} vs the step's {decoded[:4]}", worst
            continue
        if have.shape != want.shape:
            return f"`{name}` has shape {list(have.shape)}, the step gives {list(want.shape)}", worst
        diff = float(np.abs(have.astype(np.float32) - want.astype(np.float32)).max(initial=0.0))
        worst = max(worst, diff) if diff == diff else float("nan")
        if not diff <= FOLD_TOLERANCE:
            return f"`{name}` differs from the step's by {diff:.2e} (tolerance {FOLD_TOLERANCE:.0e})", worst
    return None, worst


def prove(
    run: Any, source: str, outputs: Sequence[str], step: Any, feeds: Sequence[Mapping[str, np.ndarray]]
) -> tuple[str | None, float]:
    """Run the folded graph (``run(names, feed)``) on each feed; its outputs must be the step's on its raw output.

    Near-ties of the best label (two scores within the tolerance) are skipped: either answer is right there.
    """
    worst = 0.0
    for feed in feeds:
        values = run([source, *outputs], dict(feed))
        got = dict(zip([source, *outputs], values, strict=True))
        expected = {k: v for k, v in step.process(np.asarray(got[source])).items() if k in outputs}
        if PROBABILITIES in expected and expected[PROBABILITIES].shape[-1] > 1:
            top = np.sort(expected[PROBABILITIES], axis=-1)[:, -2:]
            if np.any(top[:, 1] - top[:, 0] <= FOLD_TOLERANCE):
                expected.pop(LABEL, None)
        why, diff = compare_outputs(expected, got)
        worst = max(worst, diff)
        if why is not None:
            return why, worst
    return None, worst


@dataclass(frozen=True)
class FoldProof:
    """What a folded graph must give: the Python postprocess step's outputs, computed from its own raw output."""

    source: str  # the model output the tail reads (``logits``, ``sentence_embedding``)
    step: Any  # the Python postprocess step: ``process(raw) -> outputs by name``
    feeds: Sequence[Mapping[str, np.ndarray]]  # the model's inputs for the texts together, then for each alone
    texts: int  # how many texts the feeds hold


def fold_served(
    path: Path, tail: GraphTail, proof: FoldProof, *, container: Callable[[Path], Any] | None = None
) -> FoldReport:
    """Fold ``tail`` into the served graph at ``path`` where it proves itself; the report, folded or not.

    The folded graph runs in our ONNX Runtime and, given ``container``, in the target container's: ``container(path)``
    opens a model there (:class:`~tritongen.gates.compat.ContainerSession`: a context with ``run`` and
    ``version``). In each it must give ``proof``'s step outputs within :data:`FOLD_TOLERANCE` (:func:`prove`).
    Only then does it replace ``path``; a refused fold leaves it as it was.
    """
    import onnx
    import onnxruntime as ort

    path = Path(path)
    outputs = list(tail.outputs)
    folded_path = path.with_name(f"{path.stem}.folded{path.suffix}")
    runtimes = [ort.__version__]
    onnx.save_model(fold_graph(onnx.load(str(path)), proof.source, tail), str(folded_path))
    try:
        session = ort.InferenceSession(str(folded_path), providers=["CPUExecutionProvider"])
        failure, worst = prove(session.run, proof.source, outputs, proof.step, proof.feeds)
        if failure is None and container is not None:
            with container(folded_path) as served:
                runtimes.append(served.version)
                failure, diff = prove(served.run, proof.source, outputs, proof.step, proof.feeds)
                worst = max(worst, diff)
        if failure is not None:
            return FoldReport(False, f"the folded graph did not match the Python step: {failure}", worst)
        folded_path.replace(path)
    finally:
        folded_path.unlink(missing_ok=True)
    return FoldReport(
        True,
        f"outputs {', '.join(outputs)} equal the Python step's within {FOLD_TOLERANCE:.0e} "
        f"(worst {worst:.1e}) on {proof.texts} parity texts in ONNX Runtime {' and '.join(runtimes)}",
        worst,
        tuple(runtimes),
    )
