"""The error tree: one module, one base, attributes rendered into one-line messages, no bare base raises."""

from __future__ import annotations

import ast
import inspect
import pickle
import re
from pathlib import Path

import pytest

import tritongen
from tritongen import errors
from tritongen.errors import (
    CheckpointError,
    RepositoryError,
    ServerError,
    SpecError,
    StageError,
    TritongenError,
)

PACKAGE = Path(tritongen.__file__).parent


# `QAInputError` lives in the served Python-backend code, which cannot import tritongen (see errors.py).
def _served_code() -> set[Path]:
    """The Python steps and what the build copies beside them: they run in Triton without the package."""
    from tritongen.sources import module_file
    from tritongen.tasks import TASKS

    modules = {m for task in TASKS.values() for m in (task.tokenizer_step, task.postprocess_step, *task.helper_modules)}
    return {PACKAGE / "steps", *(module_file(m) for m in modules)}


SERVED_CODE = _served_code()


def _error_classes() -> dict[str, type[BaseException]]:
    return {
        name: obj
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    }


def _docstring_tree() -> dict[str, str]:
    """``{class: parent}`` as drawn in the module docstring (indentation gives the parent)."""
    tree, stack = {}, []
    for line in errors.__doc__.splitlines():
        match = re.match(r"^    ([│├└─ ]*)([A-Z]\w*Error)\b", line)
        if match:
            depth = len(match.group(1)) // 4  # each level of the drawing is four characters wide
            stack[depth:] = [match.group(2)]
            tree[match.group(2)] = stack[depth - 1] if depth else ""
    return tree


def _modules() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if not any(p.is_relative_to(s) for s in SERVED_CODE)]


def test_errors_tree_matches_docstring_when_read_from_the_module():
    drawn = _docstring_tree()
    actual = {
        name: ("" if cls is TritongenError else cls.__bases__[0].__name__) for name, cls in _error_classes().items()
    }
    assert drawn == actual


def test_errors_all_subclass_the_base_when_defined_in_errors_module():
    classes = _error_classes()
    assert classes["TritongenError"].__bases__ == (Exception,)
    assert all(issubclass(cls, TritongenError) for cls in classes.values())
    assert sorted(errors.__all__) == errors.__all__
    assert set(classes) <= set(errors.__all__)


def test_errors_are_defined_only_in_errors_module_when_package_is_scanned():
    elsewhere = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and re.search(r"(Error|Exception)$", node.name):
                elsewhere.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert sorted(elsewhere) == sorted(f"errors.py:{name}" for name in _error_classes())


def test_errors_base_is_never_raised_when_package_is_scanned():
    bare = []
    for path in [*_modules(), *(PACKAGE.parent / "scripts").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                call = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                name = getattr(call, "id", getattr(call, "attr", ""))
                if name in {"TritongenError", "GeneratorError"}:
                    bare.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert bare == []


def test_error_path_renders_at_marker_when_message_has_one(tmp_path):
    error = CheckpointError("checkpoint {path} has no config.json", path=tmp_path / "ckpt")
    assert str(error) == f"checkpoint `{tmp_path / 'ckpt'}` has no config.json"
    assert error.path == tmp_path / "ckpt"
    assert error.message == "checkpoint {path} has no config.json"


def test_error_path_leads_message_when_message_has_no_marker():
    error = RepositoryError("is a file, not a folder", path="out")
    assert str(error) == "`out`: is a file, not a folder"


def test_error_log_file_is_appended_when_given(tmp_path):
    error = ServerError("tritonserver exited with code 1", log_file=tmp_path / "triton.log")
    assert error.log_file == tmp_path / "triton.log"
    assert str(error) == f"tritonserver exited with code 1 (log: {tmp_path / 'triton.log'})"


def test_error_braces_in_quoted_text_survive_when_path_is_rendered():
    error = SpecError("spec file {path} is not valid YAML: found '{' at line 1", path="deploy.yaml")
    assert str(error) == "spec file `deploy.yaml` is not valid YAML: found '{' at line 1"


def test_stage_error_names_stage_and_cause_when_wrapping_a_library_error():
    cause = RuntimeError("first line\n  second line")
    error = StageError("export", cause)
    assert (error.stage, error.cause) == ("export", cause)
    assert str(error) == "export failed: RuntimeError: first line second line"
    assert "\n" not in str(error)


@pytest.mark.parametrize(
    "error",
    [
        ServerError("not ready", log_file="t.log"),
        CheckpointError("checkpoint {path} is bad", path="x"),
        StageError("export", ValueError("boom")),
    ],
)
def test_error_attributes_survive_when_pickled(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert (copy.path, copy.log_file) == (error.path, error.log_file)


def test_cli_exits_2_with_one_line_when_a_subclass_is_raised(tmp_path, capsys):
    from tritongen.cli import main

    assert main(["serve", "--repository", str(tmp_path / "none")]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"error: model repository `{tmp_path / 'none'}` does not exist; build one first"
    )
