"""The stand-ins and Triton's native backends give one verdict on every config: one table holds both to it.

Each row is a config for a tiny model (two token inputs, a pooled output of 4 and a per-token output of 4) with
one thing changed: names, counts, types, dims, batching, thread and other parameters. The row says what the
native r24.10 backend does with it (read from its source: ``ValidateInputs``/``ValidateOutputs``, the parameter
parsers, ``ProcessRequests``): refuses it at load, serves every batch, or serves only batches of exactly
``max_batch_size`` rows (the openvino backend, whose ``ENABLE_BATCH_PADDING`` is broken upstream). The test serves
every row through the stand-in and, where ``TRITONGEN_BACKENDS`` has one, through the native backend, each in a
real tritonserver, sends a batch of 2 rows and one of ``max_batch_size`` rows, and holds both to the row; what
they answer must be the right values.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritongen.serve.backends import ServedBackends, served_backends
from tritongen.serve.server import Endpoints, TritonServer

pytestmark = pytest.mark.e2e

WEIGHTS = np.array([[1.0, -2.0, 0.5, 3.0]], dtype=np.float32)  # [1, 4]: each token id times these


def _write_onnx(path: Path, *, batch: int | str = "batch") -> Path:
    """``pooled`` = (sum of ids under the mask) x WEIGHTS, [B, 4]; ``tokens`` = ids x WEIGHTS, [B, S, 4]."""
    from onnx import TensorProto, helper, numpy_helper, save_model

    nodes = [
        helper.make_node("Mul", ["input_ids", "attention_mask"], ["kept"]),
        helper.make_node("Cast", ["kept"], ["kept_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["kept_f", "axis1"], ["summed"], keepdims=1),
        helper.make_node("MatMul", ["summed", "w"], ["pooled"]),
        helper.make_node("Unsqueeze", ["kept_f", "axis2"], ["kept_3d"]),
        helper.make_node("MatMul", ["kept_3d", "w"], ["tokens"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conformance",
        [helper.make_tensor_value_info(n, TensorProto.INT64, [batch, "seq"]) for n in ("input_ids", "attention_mask")],
        [
            helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [batch, 4]),
            helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [batch, "seq", 4]),
        ],
        [
            numpy_helper.from_array(WEIGHTS, "w"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save_model(model, str(path))
    return path


def _write_ir(onnx_path: Path, xml: Path) -> Path:
    import openvino as ov

    ov.save_model(ov.convert_model(str(onnx_path)), str(xml), compress_to_fp16=False)
    return xml


def _tensor(name: str, dtype: str, dims: list[int]) -> dict[str, Any]:
    return {"name": name, "data_type": dtype, "dims": dims}


BASE: dict[str, Any] = {
    "max_batch_size": 8,
    "input": [_tensor("input_ids", "TYPE_INT64", [-1]), _tensor("attention_mask", "TYPE_INT64", [-1])],
    "output": [_tensor("pooled", "TYPE_FP32", [4]), _tensor("tokens", "TYPE_FP32", [-1, 4])],
    "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
}


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit: the field at ``path`` ("input.0.dims") set to ``value``."""

    def edit(config: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = config
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return edit


def _parameters(**values: str) -> Callable[[dict[str, Any]], None]:
    return _set("parameters", {key: {"string_value": value} for key, value in values.items()})


def _edits(*edits: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def edit(config: dict[str, Any]) -> None:
        for one in edits:
            one(config)

    return edit


SERVES, REFUSED, FULL = "serves", "refuses it at load", "serves only full batches"
# The native openvino backend's answer to a batch of fewer than max_batch_size rows (its ProcessRequests).
PARTIAL_BATCH = "expected requests with batch size"


@dataclass(frozen=True)
class Row:
    """One config: what changes, what each native backend does with it, and on which model file."""

    label: str
    edit: Callable[[dict[str, Any]], None]
    onnxruntime: str  # SERVES, REFUSED or FULL
    openvino: str
    model: str = "dynamic"  # or "static": a batch axis fixed at 2


_IDENTITY: Callable[[dict[str, Any]], None] = lambda config: None  # noqa: E731
_UNBATCHED = _edits(
    _set("max_batch_size", 0),
    _set("input", [_tensor(n, "TYPE_INT64", [-1, -1]) for n in ("input_ids", "attention_mask")]),
    _set("output", [_tensor("pooled", "TYPE_FP32", [-1, 4]), _tensor("tokens", "TYPE_FP32", [-1, -1, 4])]),
)

ROWS = (
    Row("as rendered", _IDENTITY, SERVES, FULL),
    Row("an input named wrong", _set("input.0.name", "ids"), REFUSED, REFUSED),
    Row("one input of two", _set("input", [_tensor("input_ids", "TYPE_INT64", [-1])]), REFUSED, REFUSED),
    Row(
        "a third input",
        _set("input", [*BASE["input"], _tensor("token_type_ids", "TYPE_INT64", [-1])]),
        REFUSED,
        REFUSED,
    ),
    # The openvino backend converts to the config's types (OpenVINO's preprocessing); onnxruntime refuses.
    Row("an input of another type", _set("input.0.data_type", "TYPE_INT32"), REFUSED, FULL),
    Row(
        "a fixed input length where the model's is free",
        _edits(_set("input.0.dims", [3]), _set("input.1.dims", [3])),
        SERVES,
        FULL,
    ),
    Row("an input of another rank", _set("input.0.dims", [-1, -1]), REFUSED, REFUSED),
    Row("an output of another size", _set("output.0.dims", [5]), REFUSED, REFUSED),
    Row("a free output axis where the model's is fixed", _set("output.0.dims", [-1]), REFUSED, REFUSED),
    Row("an output named wrong", _set("output.0.name", "pooler_output"), REFUSED, REFUSED),
    Row("an output of another type", _set("output.0.data_type", "TYPE_FP16"), REFUSED, FULL),
    Row("one output of two", _set("output", [_tensor("pooled", "TYPE_FP32", [4])]), SERVES, FULL),
    Row("no batching, the batch axis in the dims", _UNBATCHED, SERVES, SERVES),
    Row("no batching, the batch axis left out", _set("max_batch_size", 0), REFUSED, REFUSED),
    # The openvino backend sets the batch axis to max_batch_size instead of comparing it.
    Row("batching over a model whose batch axis is fixed", _IDENTITY, REFUSED, FULL, model="static"),
    # Parameters: the onnxruntime backend's session parameters, parsed with std::stoi and its boolean words.
    Row("threads set", _parameters(intra_op_thread_count="1", inter_op_thread_count="1"), SERVES, FULL),
    Row("threads not a number", _parameters(intra_op_thread_count="two"), REFUSED, FULL),
    Row("threads a number and more", _parameters(intra_op_thread_count="1x"), SERVES, FULL),
    Row("an execution mode of 2", _parameters(execution_mode="2"), REFUSED, FULL),
    Row("the memory arena on", _parameters(enable_mem_arena="on"), SERVES, FULL),
    Row("the memory arena maybe", _parameters(enable_mem_arena="maybe"), REFUSED, FULL),
    Row("spinning off, which no backend reads", _parameters(**{"session.intra_op.allow_spinning": "0"}), SERVES, FULL),
    Row("a parameter nobody reads", _parameters(colour="blue"), SERVES, FULL),
    # The openvino backend's CPU parameters; it reads no other key.
    Row("OpenVINO's threads and streams", _parameters(INFERENCE_NUM_THREADS="1", NUM_STREAMS="auto"), SERVES, FULL),
    Row("OpenVINO's threads not all digits", _parameters(INFERENCE_NUM_THREADS="-1"), SERVES, REFUSED),
    Row("OpenVINO's streams a word", _parameters(NUM_STREAMS="many"), SERVES, REFUSED),
    Row("OpenVINO's hint in lower case", _parameters(PERFORMANCE_HINT="latency"), SERVES, FULL),
    Row("OpenVINO's hint unknown", _parameters(PERFORMANCE_HINT="fast"), SERVES, REFUSED),
    Row("OpenVINO's BF16 hint NO", _parameters(HINT_BF16="NO"), SERVES, REFUSED),
    Row("OpenVINO's precision hint, which it does not read", _parameters(INFERENCE_PRECISION_HINT="f32"), SERVES, FULL),
    Row("OpenVINO's threads, unbatched", _edits(_UNBATCHED, _parameters(INFERENCE_NUM_THREADS="1")), SERVES, SERVES),
    Row("the graph level beyond the scale", _set("optimization", {"graph": {"level": 7}}), SERVES, FULL),
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """The tiny model's files: (backend, "dynamic" or "static") -> the file."""
    folder = tmp_path_factory.mktemp("conformance_models")
    files = {}
    for kind, batch in (("dynamic", "batch"), ("static", 2)):
        onnx_path = _write_onnx(folder / f"{kind}.onnx", batch=batch)
        files["onnxruntime", kind] = onnx_path
        files["openvino", kind] = _write_ir(onnx_path, folder / f"{kind}.xml")
    return files


def _repository(root: Path, backend: str, models: dict[tuple[str, str], Path]) -> Path:
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2 as mc

    filename = "model.onnx" if backend == "onnxruntime" else "model.xml"
    for index, row in enumerate(ROWS):
        config = copy.deepcopy(BASE)
        row.edit(config)
        name = f"row{index}"
        config.update(name=name, backend=backend, default_model_filename=filename)
        folder = root / name / "1"
        folder.mkdir(parents=True)
        source = models[backend, row.model]
        (folder / filename).symlink_to(source)
        if backend == "openvino":
            (folder / "model.bin").symlink_to(source.with_suffix(".bin"))
        message = json_format.ParseDict(config, mc.ModelConfig())
        (root / name / "config.pbtxt").write_text(text_format.MessageToString(message))
    return root


def _answer(client: Any, name: str, config: dict[str, Any], rows: int) -> np.ndarray:
    """Send ``rows`` rows of token ids to ``name``; its ``pooled`` output, checked against the model's maths."""
    import tritonclient.http as httpclient

    ids = np.resize(np.array([[5, 7, 0], [2, 0, 0]], dtype=np.int64), (rows, 3))
    mask = (ids != 0).astype(np.int64)
    inputs = []
    for tensor in config["input"]:
        value = {"input_ids": ids, "attention_mask": mask}[tensor["name"]]
        value = value.astype(np.int32) if tensor["data_type"] == "TYPE_INT32" else value
        inputs.append(httpclient.InferInput(tensor["name"], list(value.shape), tensor["data_type"][len("TYPE_") :]))
        inputs[-1].set_data_from_numpy(value)
    pooled = client.infer(name, inputs).as_numpy("pooled").astype(np.float32)
    expected = (ids * mask).sum(axis=1, keepdims=True).astype(np.float32) @ WEIGHTS
    np.testing.assert_allclose(pooled, expected, rtol=1e-2, err_msg=name)
    return pooled


def _verdict(url: str, index: int) -> str:
    """Row ``index``'s model loaded and sent a full batch and one of 2 rows: what happened."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    name = f"row{index}"
    client = httpclient.InferenceServerClient(url, network_timeout=120.0)
    try:
        try:
            client.load_model(name)
        except InferenceServerException as exc:
            return f"{REFUSED}: {str(exc)[:300]}"
        config = client.get_model_config(name)
        _answer(client, name, config, max(config.get("max_batch_size", 0), 2))  # a full batch: always answered
        try:
            _answer(client, name, config, 2)
        except InferenceServerException as exc:
            assert PARTIAL_BATCH in str(exc), f"{name} failed a batch of 2 rows for another reason: {exc}"
            return FULL
        return SERVES
    finally:
        client.close()


def _verdicts(repository: Path, backends: ServedBackends, log: Path) -> dict[int, str]:
    """Every row's verdict, the rows loaded four at a time (a stand-in's load starts a stub process)."""
    from concurrent.futures import ThreadPoolExecutor

    with TritonServer(repository, Endpoints.free(), models=[], log_file=log, backends=backends) as server:
        with ThreadPoolExecutor(4) as pool:
            return dict(enumerate(pool.map(lambda i: _verdict(server.http_url, i), range(len(ROWS)))))


def _check(verdicts: dict[int, str], backend: str, who: str) -> None:
    wrong = [
        f"{row.label}: {verdicts[i]}; the native backend {getattr(row, backend)}"
        for i, row in enumerate(ROWS)
        if not verdicts[i].startswith(getattr(row, backend))
    ]
    assert not wrong, f"{who} disagrees with the native {backend} backend on:\n" + "\n".join(wrong)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_stand_in_loads_and_refuses_every_config_as_the_native_backend_does(backend, models, tmp_path):
    verdicts = _verdicts(_repository(tmp_path / "repo", backend, models), ServedBackends(()), tmp_path / "log")
    _check(verdicts, backend, "the stand-in")


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_native_backend_loads_and_refuses_every_config_as_the_table_says(backend, models, tmp_path):
    backends = served_backends()
    if backends.of(backend) is None:
        pytest.skip(f"no native {backend} backend here (TRITONGEN_BACKENDS: a folder of Triton's native backends)")
    verdicts = _verdicts(_repository(tmp_path / "repo", backend, models), backends, tmp_path / "log")
    _check(verdicts, backend, backends.describe(backend))
