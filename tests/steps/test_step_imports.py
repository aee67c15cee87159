"""The Python steps run with only what each container's image has: the package's pins, in its Python, nothing of ours.

Each generated step folder (every task's tokenizer and postprocess) is loaded, for every supported Triton container,
in ``.venv-containers/<release>/steps`` (``make compat-venv``: that container's Python, with exactly what the
packaged Dockerfile installs there, resolved for the image's platform) with a stand-in
``triton_python_backend_utils``, initialised from its own config as Triton passes it, and the tokenizer steps encode a
request. So the sources parse and run at the image's Python version, and an import of anything else (tritongen,
transformers, torch) fails here before it fails on a GPU node.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from tritongen.containers import CONTAINERS
from tritongen.contract import carried_by_text_requests
from tritongen.gates.compat import VENVS

QA_ASSETS = Path(__file__).parents[1] / "assets" / "qa"


def _steps_python(release: str) -> Path:
    python = (VENVS / release / "steps" / "bin" / "python").absolute()
    if not python.is_file():
        pytest.skip(
            f"no steps venv for the {release} container (make compat-venv; needs Python {CONTAINERS[release].python})"
        )
    return python


_RUNNER = r"""
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import numpy as np
import model
args = json.loads(open(sys.argv[3]).read())
step = model.TritonPythonModel()
step.initialize(args)
inputs = json.loads(sys.argv[4])
if inputs:
    import io
    import triton_python_backend_utils as pb
    from PIL import Image
    png = io.BytesIO()
    Image.new("RGBA", (40, 30), (255, 0, 0, 128)).save(png, format="PNG")
    samples = {"IMAGE": pb.texts(png.getvalue()), "CANDIDATE_LABELS": pb.texts('["people", "places"]')}
    request = pb.Request({name: samples.get(name, pb.texts("Bob lives in Berlin. Zoë too 🎉")) for name in inputs})
    (response,) = step.execute([request])
    assert response.error is None, response.error.message()
    print(sorted(t.name() for t in response.output_tensors))
print("ok", sorted(k for k in sys.modules if k.split(".")[0] in {"tritongen", "transformers", "torch"}))
"""


@pytest.fixture(scope="module")
def built(tiny_factory, checkpoint_cache, builds):
    """One build of every task, each as the module that serves it builds it (so none is built for this alone)."""
    from tests.tiny_images import make_image_checkpoint
    from tests.tiny_ner import make_token_classifier
    from tests.tiny_rerankers import make_qwen3_reranker
    from tests.tiny_zeroshot import make_nli_checkpoint

    return {
        "cls": builds(tiny_factory("bert", "classification"), "cls"),
        "emb": builds(tiny_factory("roberta", "embedding"), "roberta_emb"),
        "emb_chunk": builds(tiny_factory("bert", "embedding"), "bert_emb_chunk", embedding={"long_text": "chunk"}),
        "ner": builds(checkpoint_cache(make_token_classifier, "bert", seed=1), "ner_bert_simple"),
        "qa": builds(QA_ASSETS / "bert", "qa_bert"),
        "zeroshot": builds(
            checkpoint_cache(make_nli_checkpoint, "bert", seed=3), "zs_bert", task="zero-shot-classification"
        ),
        "rerank": builds(checkpoint_cache(make_qwen3_reranker), "rr_qwen3", task="reranking"),
        "vit": builds(checkpoint_cache(make_image_checkpoint, "vit", seed=3), "vit"),
        "clip": builds(checkpoint_cache(make_image_checkpoint, "clip", seed=3), "clip"),
    }


@pytest.mark.parametrize("release", list(CONTAINERS))
@pytest.mark.parametrize("name", ["cls", "emb", "emb_chunk", "ner", "qa", "zeroshot", "rerank", "vit", "clip"])
@pytest.mark.parametrize("step", ["tokenizer", "postprocess"])
def test_step_initialises_and_runs_with_only_numpy_tokenizers_and_pillow(built, tmp_path, name, step, release):
    python = _steps_python(release)
    folder = built[name].repository / f"{built[name].name}_{step}"
    config = text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    args = {
        "model_config": json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)),
        "model_repository": str(folder), "model_version": "1", "model_name": folder.name,
        "model_instance_kind": "CPU", "model_instance_name": f"{folder.name}_0", "model_instance_device_id": "0",
    }  # fmt: skip
    (tmp_path / "args.json").write_text(json.dumps(args))
    stub = tmp_path / "stub"
    stub.mkdir()
    shutil.copy(Path(__file__).parents[1] / "pb_stub.py", stub / "triton_python_backend_utils.py")
    texts = [t.name for t in config.input if carried_by_text_requests(t.name, t.optional)]  # the texts, not options
    inputs = texts if step == "tokenizer" else []
    command = [str(python), "-c", _RUNNER, str(stub), str(folder / "1"), str(tmp_path / "args.json")]
    result = subprocess.run([*command, json.dumps(inputs)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok []"), result.stdout


@pytest.mark.parametrize("release", list(CONTAINERS))
def test_steps_venv_holds_nothing_else_in_the_container_python(tmp_path, release):
    python = _steps_python(release)
    result = subprocess.run(
        [str(python), "-c", "import importlib.util as u, sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}', "
         "[m for m in ('tritongen', 'transformers', 'torch', 'onnxruntime') if u.find_spec(m)])"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert result.stdout.split() == [CONTAINERS[release].python, "[]"], result.stdout + result.stderr
