"""Every failure a user can cause: one line naming the problem, exit code 2, nothing written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tritongen.cli import main
from tritongen.repository.staging import staging


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


def _assert_nothing_written(repo: Path) -> None:
    assert not repo.exists() or not any(repo.iterdir()), f"{repo} has {list(repo.iterdir())}"
    leftovers = [p.name for p in repo.parent.iterdir() if ".staging-" in p.name]
    assert not leftovers


@pytest.fixture
def minilm_copy(tmp_path, minilm_path) -> Path:
    target = tmp_path / "ckpt"
    shutil.copytree(minilm_path, target)
    return target


def test_build_exits_2_when_checkpoint_dir_missing(tmp_path, capsys):
    code, message = _run(capsys, "build", "--model", str(tmp_path / "nope"), "--repository", str(tmp_path / "repo"))
    assert code == 2
    assert message == f"error: checkpoint directory `{tmp_path / 'nope'}` does not exist"
    _assert_nothing_written(tmp_path / "repo")


def test_build_exits_2_when_config_json_missing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, message = _run(capsys, "build", "--model", str(tmp_path / "empty"), "--repository", str(tmp_path / "repo"))
    assert code == 2
    assert "has no config.json" in message
    _assert_nothing_written(tmp_path / "repo")


def test_build_exits_2_when_config_json_unreadable(minilm_copy, tmp_path, capsys):
    (minilm_copy / "config.json").write_text("{not json")
    code, message = _run(capsys, "build", "--model", str(minilm_copy), "--repository", str(tmp_path / "repo"))
    assert code == 2
    assert "config.json` is not valid JSON" in message


def _edit_config(checkpoint: Path, **changes) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    config.update(changes)
    (checkpoint / "config.json").write_text(json.dumps(config))


def test_build_exits_2_when_model_type_unknown_to_transformers(minilm_copy, tmp_path, capsys):
    _edit_config(minilm_copy, model_type="not-a-model", architectures=["NotAModel"])
    code, message = _run(capsys, "build", "--model", str(minilm_copy), "--repository", str(tmp_path / "repo"))
    assert code == 2
    assert message.startswith("error: model type check failed: transformers ")
    assert message.endswith("has no native config class for model type `not-a-model`")
    _assert_nothing_written(tmp_path / "repo")


def test_build_exits_2_when_task_head_has_no_transformers_auto_class(minilm_copy, tmp_path, capsys):
    # ViT is a model type transformers knows, but its classifiers are image classifiers.
    _edit_config(minilm_copy, model_type="vit", architectures=["ViTForSequenceClassification"])
    code, message = _run(
        capsys, "build", "--model", str(minilm_copy), "--task", "classification", "--repository", str(tmp_path / "r")
    )
    assert code == 2
    assert message == (
        "error: task head check failed: transformers has no AutoModelForSequenceClassification for model type `vit`"
    )
    _assert_nothing_written(tmp_path / "r")


@pytest.mark.build  # loads the model before refusing
def test_build_exits_2_when_weights_do_not_fill_the_model(minilm_copy, tmp_path, capsys):
    # GPT-2 is known and has a bare model, but a BERT's weights leave every GPT-2 weight at random.
    _edit_config(minilm_copy, model_type="gpt2", architectures=["GPT2Model"])
    code, message = _run(capsys, "build", "--model", str(minilm_copy), "--repository", str(tmp_path / "repo"))
    assert code == 2
    assert message.startswith(f"error: weights check failed: `{minilm_copy}` lacks ")
    assert message.endswith("weights of GPT2Model (e.g. `h.0.attn.c_attn.bias`); they would be random")
    _assert_nothing_written(tmp_path / "repo")


def test_build_exits_2_when_checkpoint_ships_code_and_it_is_not_trusted(minilm_copy, tmp_path, capsys):
    _edit_config(minilm_copy, auto_map={"AutoModel": "modeling_custom.CustomModel"})
    code, message = _run(capsys, "build", "--model", str(minilm_copy), "--repository", str(tmp_path / "repo"))
    assert code == 2
    assert message == (
        f"error: remote code check failed: config.json of `{minilm_copy}` names code shipped with the checkpoint "
        "(auto_map: AutoModel); it is not run unless trust_remote_code is set"
    )
    _assert_nothing_written(tmp_path / "repo")


def test_build_exits_2_when_task_unsupported(minilm_copy, tmp_path, capsys):
    code, message = _run(
        capsys, "build", "--model", str(minilm_copy), "--task", "translation", "--repository", str(tmp_path / "repo")
    )
    assert code == 2
    assert message == (
        "error: task `translation` is not supported; supported: classification, embedding, image-classification, "
        "image-embedding, image-embedding-text, multi-embedding, question-answering, reranking, sparse-embedding, "
        "text-pair-classification, "
        "token-classification, zero-shot-classification"
    )


@pytest.mark.parametrize(
    ("task", "head"),
    [
        ("classification", "ForSequenceClassification"),
        ("token-classification", "ForTokenClassification"),
        ("question-answering", "ForQuestionAnswering"),
    ],
)
def test_build_exits_2_when_task_asked_of_bare_encoder(minilm_copy, tmp_path, capsys, task, head):
    code, message = _run(
        capsys, "build", "--model", str(minilm_copy), "--task", task, "--repository", str(tmp_path / "r")
    )
    assert code == 2
    assert f"needs a *{head} checkpoint" in message
    _assert_nothing_written(tmp_path / "r")


@pytest.mark.build  # loads the model before refusing
def test_build_exits_2_when_qa_window_settings_invalid(tmp_path, capsys):
    qa_bert = Path(__file__).parents[1] / "assets" / "qa" / "bert"
    code, message = _run(
        capsys, "build", "--model", str(qa_bert), "--qa-max-seq-len", "512", "--repository", str(tmp_path / "r")
    )
    assert code == 2
    assert message == "error: qa_max_seq_len 512 is above the model's limit of 128 tokens"
    _assert_nothing_written(tmp_path / "r")


@pytest.mark.build  # loads the model before refusing
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--max-length", "100"], "error: max_length 100 is above the model's limit of 32 tokens"),
        (
            ["--ner-stride", "30"],
            "error: ner_stride 30 must be below the 30 text tokens of a 32-token window; lower it",
        ),
    ],
)
def test_build_exits_2_when_length_settings_exceed_the_model(tmp_path, capsys, options, expected):
    from tests.tiny_ner import make_token_classifier

    checkpoint = make_token_classifier("bert", tmp_path / "ner")
    code, message = _run(capsys, "build", "--model", str(checkpoint), "--repository", str(tmp_path / "r"), *options)
    assert code == 2
    assert message == expected
    _assert_nothing_written(tmp_path / "r")


def test_build_exits_2_when_weights_corrupt(minilm_copy, tmp_path, capsys):
    weights = minilm_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4096])
    code, message = _run(capsys, "build", "--model", str(minilm_copy), "--repository", str(tmp_path / "repo"))
    assert code == 2
    assert "are corrupt or truncated" in message
    _assert_nothing_written(tmp_path / "repo")


def test_build_exits_2_when_weights_missing(minilm_copy, tmp_path, capsys):
    (minilm_copy / "model.safetensors").unlink()
    code, message = _run(capsys, "build", "--model", str(minilm_copy), "--repository", str(tmp_path / "repo"))
    assert code == 2
    assert "has no weights" in message


def test_build_exits_2_when_spec_file_invalid(tmp_path, capsys):
    spec = tmp_path / "deploy.yaml"
    spec.write_text("model: x\nmax_batch_size: 8\ndynamic_batching: {preferred_batch_size: [16]}\n")
    code, message = _run(capsys, "build", "--spec", str(spec), "--repository", str(tmp_path / "repo"))
    assert code == 2
    assert message == "error: preferred batch size 16 must be between 1 and max_batch_size (8)"


def _raise_on_call(number: int, real, error: BaseException):
    """``real``, except that its ``number``-th call raises ``error`` (a failure inside one stage)."""
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == number:
            raise error
        return real(*args, **kwargs)

    return wrapper


def _break_export(monkeypatch):
    import onnx

    monkeypatch.setattr(onnx.checker, "check_model", _raise_on_call(1, None, onnx.checker.ValidationError("bad graph")))


def _break_session_run(number: int):
    def patch(monkeypatch):
        import onnxruntime
        from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

        error = InvalidArgument(
            "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while running Gather node.\n"
            "Status Message: indices element out of data bounds, idx=514 must be within the inclusive range [-514,513]"
        )
        run = onnxruntime.InferenceSession.run
        monkeypatch.setattr(onnxruntime.InferenceSession, "run", _raise_on_call(number, run, error))

    return patch


def _break_fp16_conversion(monkeypatch):
    import onnxruntime.transformers.float16 as float16

    monkeypatch.setattr(float16, "convert_float_to_float16", _raise_on_call(1, None, KeyError("Cast")))


# stage named in the message -> (how to break it, build options). FP16 keeps the optimised builds fast.
STAGE_FAILURES = {
    "ONNX export": (_break_export, []),
    # The export's own run at a second shape (dynamic axes) is the 1st session.run; parity's the 2nd.
    "parity check": (_break_session_run(2), []),  # what an MPNet built past its positions used to do
    "optimisation": (_break_fp16_conversion, ["--precision", "fp16"]),
    "accuracy gate": (_break_session_run(3), ["--precision", "fp16"]),
}


@pytest.mark.parametrize("stage", list(STAGE_FAILURES))
def test_build_exits_2_with_one_line_naming_the_stage_when_it_fails_inside(
    stage, tiny_factory, tmp_path, capsys, monkeypatch
):
    import tritongen.builder.pipeline

    # The session's export cache (tests/builds.py) would hand back an export made earlier and skip the export's
    # own runs that the breakers count: this build exports for real.
    real = getattr(tritongen.builder.pipeline.export_onnx, "real", tritongen.builder.pipeline.export_onnx)
    monkeypatch.setattr(tritongen.builder.pipeline, "export_onnx", real)
    breaker, options = STAGE_FAILURES[stage]
    breaker(monkeypatch)
    repo = tmp_path / "repo"
    code = main(["build", "--model", str(tiny_factory("bert")), "--repository", str(repo), *options])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    message = err.strip().splitlines()[-1]
    assert message.startswith(f"error: {stage} failed: "), message
    assert len(message) < 400
    _assert_nothing_written(repo)


def test_cli_reports_an_internal_error_in_one_line_without_traceback(tmp_path, capsys, monkeypatch):
    import tritongen.builder.spec

    broken = _raise_on_call(1, None, ZeroDivisionError("division by zero"))
    monkeypatch.setattr(tritongen.builder.spec, "load_spec", broken)
    code = main(["build", "--model", str(tmp_path), "--repository", str(tmp_path / "repo")])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        "internal error in `build`: ZeroDivisionError: division by zero "
        "(set TRITONGEN_TRACEBACK=1 for the traceback, and please report it)"
    ]


def test_cli_process_exits_2_with_one_line_when_checkpoint_missing(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritongen",
            "build",
            "--model",
            str(tmp_path / "x"),
            "--repository",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: checkpoint directory `{tmp_path / 'x'}` does not exist"]


def test_staging_leaves_nothing_when_build_fails_midway(tmp_path):
    repo = tmp_path / "repo"
    with pytest.raises(RuntimeError), staging(repo, ["a", "a_model"]) as stage:
        stage.write_config("a", "name: 'a'")
        raise RuntimeError("export blew up")
    _assert_nothing_written(repo)


def test_staging_adds_next_version_and_keeps_previous(tmp_path):
    repo = tmp_path / "repo"
    for expected in (1, 2):
        with staging(repo, ["a", "a_model"]) as stage:
            assert stage.version == expected
            stage.write_config("a", f"version {expected}")
            (stage.version_dir("a_model") / "model.onnx").write_text(str(expected))
            stage.write_config("a_model", f"model {expected}")
            stage.publish()
    assert sorted(p.name for p in (repo / "a_model").iterdir()) == ["1", "2", "config.pbtxt"]
    assert (repo / "a_model" / "1" / "model.onnx").read_text() == "1"
    assert (repo / "a" / "config.pbtxt").read_text() == "version 2"
