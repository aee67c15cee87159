"""The served steps' helpers: one package, ``_tritongen_step``, beside each ``model.py``; tritongen's own in process.

A repository's step must run the helpers the build copied beside it, never an installed tritongen's (which may be
another release): the package's name is installed by nothing, and a step has no fallback import. In process, the
same names are the package's modules themselves, so that a class has one identity whichever name imported it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tritongen.contract
import tritongen.steps._common
import tritongen.steps.tokenizer
import tritongen.tasks.question_answering.qa
import tritongen.tasks.question_answering.tokenizer as qa_tokenizer  # the tasks register their helpers
from tritongen.sources import module_file
from tritongen.steps.helpers import STEP_PACKAGE, register_helpers, served_module

ROOT = Path(__file__).resolve().parents[2]

QA_ASSETS = Path(__file__).parents[1] / "assets" / "qa"


def test_helper_names_are_tritongens_own_modules_in_process():
    import _tritongen_step._common
    import _tritongen_step.contract
    import _tritongen_step.tokenizer
    from _tritongen_step import qa

    assert _tritongen_step._common is tritongen.steps._common
    assert _tritongen_step.contract is tritongen.contract
    assert _tritongen_step.tokenizer is tritongen.steps.tokenizer
    assert qa is tritongen.tasks.question_answering.qa  # a task's helper, declared by its entry
    assert qa_tokenizer.WindowedTokenizer is tritongen.steps.tokenizer.WindowedTokenizer  # one class, not two
    # Each module keeps its own name and spec, so its source is still found (what the build copies).
    assert _tritongen_step._common.__name__ == "tritongen.steps._common"
    assert module_file("tritongen.steps._common") == Path(tritongen.steps._common.__file__)
    with pytest.raises(ModuleNotFoundError):
        import _tritongen_step.no_such_helper


def test_register_helpers_refuses_a_last_name_another_helper_holds():
    with pytest.raises(ValueError, match=r"as `_tritongen_step\.tokenizer`, which `tritongen\.steps\.tokenizer` is"):
        register_helpers(["plugin.steps.tokenizer"])
    with pytest.raises(ValueError, match=r"which `tritongen\.tasks\.question_answering\.qa` is"):
        register_helpers(["plugin.qa"])
    register_helpers(["tritongen.steps.sparse"])  # a steps module under its own name: nothing to refuse
    assert served_module("sparse") == "tritongen.steps.sparse" and served_module("plugin") is None


def test_step_package_name_is_installed_by_nothing():
    """With tritongen importable, the name answers to nothing until tritongen's steps (and so their finder) are."""
    code = (
        "import importlib.util, tritongen\n"
        f"assert importlib.util.find_spec({STEP_PACKAGE!r}) is None\n"
        "import tritongen.steps\n"
        f"assert importlib.util.find_spec({STEP_PACKAGE!r}) is not None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT)


@pytest.fixture(scope="module")
def built(builds, tiny_factory):
    """A text embedding and a question-answering build (the names other modules build them under)."""
    return {"emb": builds(tiny_factory("bert", "embedding"), "bert_emb"), "qa": builds(QA_ASSETS / "bert", "qa_bert")}


_IMPORT_STEP = r"""
import importlib, sys
version, decoys = sys.argv[1], sys.argv[2]
sys.path.insert(0, decoys)  # installed modules, found first
sys.path.append(version)  # the step's own folder
importlib.import_module("model")
own = {name: module.__file__ for name, module in sys.modules.items() if name.split(".")[0] == "_tritongen_step"}
assert own and all(path.startswith(version) for path in own.values()), own
assert not [name for name in sys.modules if name.split(".")[0] == "tritongen"], "a tritongen module was imported"
print(sorted(own))
"""


@pytest.mark.parametrize("name", ["emb", "qa"])
@pytest.mark.parametrize("step", ["tokenizer", "postprocess"])
def test_built_step_imports_its_helpers_from_its_own_folder_only(built, tmp_path, name, step):
    version = built[name].repository / f"{built[name].name}_{step}" / "1"
    assert [p.name for p in version.glob("*.py")] == ["model.py"]  # every helper is in the package
    assert (version / STEP_PACKAGE / "__init__.py").is_file()  # a regular package: no other folder adds to it
    decoys = tmp_path / "site"  # the helpers' bare names, as another installed distribution could hold them
    decoys.mkdir()
    for stem in ("_common", "contract", "tokenizer", "postprocess", "qa"):
        (decoys / f"{stem}.py").write_text(f"raise RuntimeError('the installed {stem} was imported')\n")
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_STEP, str(version), str(decoys)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "_tritongen_step._common" in result.stdout


@pytest.mark.e2e
def test_server_runs_a_step_with_its_own_package_and_never_an_installed_helper(built, tmp_path):
    """Served alone, the tokenizer step loads and answers; without its copied contract it fails to load."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    from tritongen.serve.server import running_server

    repository = tmp_path / "repository"
    source = built["emb"].repository / "bert_emb_tokenizer"
    for name in ("own_tokenizer", "bare_tokenizer"):
        shutil.copytree(source, repository / name)
        config = repository / name / "config.pbtxt"
        config.write_text(config.read_text().replace('"bert_emb_tokenizer"', json.dumps(name), 1))
    (repository / "bare_tokenizer" / "1" / STEP_PACKAGE / "contract.py").unlink()  # tritongen.contract is installed
    with running_server(repository, models=[]) as server:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=120.0)
        try:
            client.load_model("own_tokenizer")
            text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
            text.set_data_from_numpy(np.array([[b"hello world"]], dtype=np.object_))
            assert client.infer("own_tokenizer", [text]).as_numpy("input_ids").shape[0] == 1
            with pytest.raises(InferenceServerException, match=r"_tritongen_step\.contract"):
                client.load_model("bare_tokenizer")
        finally:
            client.close()


@pytest.mark.parametrize(
    "module", ["tritongen.tasks.token_classification.ner", "tritongen.tasks.question_answering.qa"], ids=["ner", "qa"]
)
def test_task_helper_needs_neither_torch_nor_transformers_nor_tritongen(step_folder, module) -> None:
    last = module.rsplit(".", 1)[-1]
    folder = step_folder(
        module,
        "tritongen.steps._common",
        "tritongen.contract",
        "tritongen.encoding",
        "tritongen.parameters",
        "tritongen.vectors",
    )
    code = (  # imported from the step's folder, as the Python backend does
        f"import sys; sys.path.insert(0, {str(folder)!r}); from _tritongen_step import {last}; "
        f"assert {last}.__file__.startswith({str(folder)!r}), {last}.__file__; "
        "bad = {'torch', 'transformers', 'tritongen'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=60)
