"""The session's caches: every tiny checkpoint, every build and one shared server, each made once.

A test asks for what it needs and gets what an earlier test already made where it can:

* :class:`Checkpoints` makes a checkpoint once per (maker, arguments): ``checkpoint_cache(make_checkpoint,
  "bert", task="embedding")``. A *derived* checkpoint (a made one with its config patched) is a maker of
  its own, so it is cached too.
* :class:`Builds` builds once per (checkpoint, name, settings): ``builds(path, "cls", buckets=(16, 32))``
  returns a :class:`Built` whose ``repository`` holds that one ensemble. Two tests that ask for the same
  build share it; the build's folders must then stay as they are (a test that adds versions or files
  copies them first with :meth:`Builds.copy`). The container-runtime check is off unless the test asks
  for it (``container_check=True``): it runs where it is under test (tests/gates/test_compat.py,
  tests/builder/test_build.py).
* :class:`SharedServer` is one tritonserver for the read-only end-to-end modules: ``shared_server.serve(
  built, ...)`` links the builds into its repository and loads them through the repository API. Modules
  that change server state (stubs killed, configs reloaded, versions rolled out, a soak's memory rule)
  start their own.

Under pytest-xdist the two caches are shared by the workers: each entry is made by one process under a file
lock and read by the others (a build's result travels as a pickle beside its folder).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import pickle
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

__all__ = ["Builds", "Built", "Checkpoints", "SharedServer", "memoized_exports", "native_backend", "step_alone"]


def native_backend(backend: str = "onnxruntime") -> bool:
    """Whether the servers the tests start serve ``backend``'s model steps natively (``TRITONGEN_BACKENDS``).

    A native step runs inside tritonserver: it has no stub process of its own to kill, watch or weigh.
    """
    from tritongen.serve.backends import served_backends

    return served_backends().of(backend) is not None


def step_alone(model_folder: Path, feeds: dict[str, Any], version: int = 1) -> dict[str, Any]:
    """The outputs of a built model step (``<name>_model``) for one call's ``feeds``, run as the servers here run it.

    Through its native backend where the tests' servers have one (a server of that step alone), else in process
    with the session settings its config gives, as the stand-in runs it.
    """
    from google.protobuf import json_format

    from tritongen.configs.model_config import to_proto
    from tritongen.configs.parser import read_config
    from tritongen.serve.backends import served_backends
    from tritongen.serve.step_server import StepServer, on_cpu

    config = on_cpu(to_proto(read_config(model_folder / "config.pbtxt")))
    backends = served_backends()
    if backends.of(config.backend) is not None:
        with StepServer(backends) as steps:
            return steps.call(steps.load(model_folder / str(version), config))(feeds)
    import onnxruntime as ort

    from tritongen.runtimes.onnxruntime.backend import session_options

    options = session_options(json_format.MessageToDict(config, preserving_proto_field_name=True))
    session = ort.InferenceSession(str(model_folder / str(version) / "model.onnx"), options)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _key(*parts: Any) -> str:
    """A short stable digest of JSON-able parts (paths and tuples as strings and lists)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _once(folder: Path, make: Callable[[Path], Any]) -> Any:
    """``make(folder)`` once across the session's processes; its value is pickled beside the folder for the rest.

    A folder left half-made by a process that died is made again.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    done = folder.with_name(folder.name + ".done")
    with FileLock(str(folder.with_name(folder.name + ".lock"))):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            done.write_bytes(pickle.dumps(make(folder)))
    return pickle.loads(done.read_bytes())


class Checkpoints:
    """Checkpoints made once per session: ``checkpoint_cache(maker, *args, **kwargs)`` -> its folder.

    ``maker(*args, out_dir, **kwargs)`` writes a checkpoint into ``out_dir`` (a fresh folder) and returns
    it, as every ``tests/tiny_*.py`` maker does. Same maker and arguments: the same folder, made once.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: dict[str, Path] = {}

    def __call__(self, maker: Callable[..., Path], *args: Any, **kwargs: Any) -> Path:
        name = f"{maker.__module__}.{maker.__qualname__}"
        bound = inspect.signature(maker).bind(*args, out_dir=None, **kwargs)
        bound.apply_defaults()  # `seed=0` given or not: one checkpoint
        key = _key(name, {k: v for k, v in bound.arguments.items() if k != "out_dir"})
        if key not in self._made:
            slug = "-".join([maker.__name__.strip("_"), *(str(a) for a in args)])[:60]
            self._made[key] = _once(self.root / f"{slug}-{key}", lambda out: Path(maker(*args, out_dir=out, **kwargs)))
        return self._made[key]


@dataclass(frozen=True)
class Built:
    """One ensemble built once: ``repository`` holds its model folders and nothing else."""

    name: str
    repository: Path
    result: Any  # tritongen.builder.pipeline.BuildResult
    key: str
    checked: tuple[str, ...] = ()  # the containers whose runtimes the build's container check ran

    @property
    def folders(self) -> list[Path]:
        """The ensemble's model folders (ensemble, tokenizer, model, postprocess where built)."""
        return sorted(p for p in self.repository.iterdir() if p.is_dir())

    def card(self, version: int = 1) -> str:
        """The model card of ``version``."""
        return (self.repository / self.name / str(version) / "model_card.md").read_text(encoding="utf-8")

    def record(self, version: int = 1) -> dict[str, Any]:
        """``build.json`` of ``version``."""
        return json.loads((self.repository / self.name / str(version) / "build.json").read_text(encoding="utf-8"))


def spec_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Build settings as ``load_spec`` takes them: typed sections (``DynamicBatchingSettings(...)``) as mappings."""
    return {
        key: dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value
        for key, value in settings.items()
    }


class Builds:
    """Builds made once per session, keyed by (checkpoint, name, every setting of the resulting spec)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._built: dict[str, Built] = {}

    def __call__(self, model: Path | str, name: str, *, versions: int = 1, **settings: Any) -> Built:
        """The ensemble ``name`` of ``model`` built with ``settings`` (``versions`` times: versions 1..N).

        A build that ran the container-runtime check also serves a test that does not ask for it, and one
        checked in more containers serves one asking for fewer (its model files are the same; only build.json
        records more), so neither the check nor the containers are part of the key.
        """
        from tritongen.builder.spec import load_spec

        # One model instance of one thread unless a test asks for more: the CPU default's second instance is one
        # more stub process per ensemble on the shared server, and more threads spin (ONNX Runtime's default, as in
        # the container) against the other worker's half of the suite. The default is built by the CLI tests.
        settings = {
            "container_check": False, "model_instances": {"count": 1}, "onnxruntime": {"intra_op_threads": 1},
            **spec_settings(settings),
        }  # fmt: skip
        spec = load_spec(None, model=str(model), name=name, repository=self.root / "unused", **settings)
        ignored = ("repository", "container_check", "containers")
        key = _key({k: v for k, v in spec.to_dict().items() if k not in ignored}, versions)
        asked = spec.containers if spec.container_check else ()
        cached = self._built.get(key)
        if cached is None or not set(asked) <= set(cached.checked):
            suffix = f"-checked-{'-'.join(asked)}" if asked else ""
            repository = self.root / f"{name}-{key}{suffix}"

            def build(folder: Path) -> Any:
                from tritongen.builder.pipeline import build_repository

                result = None
                for _ in range(versions):
                    result = build_repository(spec.replace(repository=folder))
                return result

            self._built[key] = Built(name, repository, _once(repository, build), key, asked)
        return self._built[key]

    def repository(self, *built: Built, into: Path) -> Path:
        """A repository at ``into`` serving ``built``: links to their folders (which stay read-only)."""
        into.mkdir(parents=True, exist_ok=True)
        for one in built:
            for folder in one.folders:
                (into / folder.name).symlink_to(folder, target_is_directory=True)
        return into

    def copy(self, *built: Built, into: Path) -> Path:
        """A repository at ``into`` holding copies of ``built``'s folders, for a test that changes them."""
        into.mkdir(parents=True, exist_ok=True)
        for one in built:
            for folder in one.folders:
                shutil.copytree(folder, into / folder.name)
        return into


class SharedServer:
    """One tritonserver for the session's read-only end-to-end modules (explicit model control).

    It starts at the first :meth:`serve` with no model loaded, and with a response cache, so that
    ensembles built with ``response_cache`` can be served by it too. Each build is linked into its
    repository and loaded once; a name can be served for one build only.
    """

    CACHE_BYTES = 16 * 1024 * 1024

    def __init__(self, root: Path) -> None:
        self.root = root
        self.repository = root / "repository"
        self._server: Any = None
        self._loaded: dict[str, str] = {}  # ensemble name -> build key

    def serve(self, *built: Built) -> Any:
        """The running server (``tritongen.serve.server.TritonServer``) with ``built`` loaded."""
        import tritonclient.http as httpclient

        server = self._started()
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=600.0)
        try:
            for one in built:
                if self._loaded.get(one.name) == one.key:
                    continue
                if one.name in self._loaded:
                    raise RuntimeError(f"the shared server already serves another build named `{one.name}`")
                for folder in one.folders:
                    (self.repository / folder.name).symlink_to(folder, target_is_directory=True)
                client.load_model(one.name)  # the ensemble's steps load with it
                self._loaded[one.name] = one.key
        finally:
            client.close()
        return server

    def _started(self) -> Any:
        from tritongen.serve.server import cache_args, running_server

        if self._server is None:
            self.repository.mkdir(parents=True, exist_ok=True)
            self._context = running_server(self.repository, models=[], extra_args=cache_args(self.CACHE_BYTES))
            self._server = self._context.__enter__()
        elif self._server.process is None or self._server.process.poll() is not None:
            raise RuntimeError(f"the shared tritonserver died; see {self._server.log_file}")
        return self._server

    def stop(self) -> None:
        """Stop the server, stubs included."""
        if self._server is not None:
            self._context.__exit__(None, None, None)
            self._server = None


@contextlib.contextmanager
def memoized_exports(root: Path) -> Iterator[None]:
    """Export each distinct model once per session: builds of one checkpoint with other serving settings reuse it.

    An export is keyed by everything it is made from: the checkpoint, the task bound to it, the row length and
    inputs, the exported module's class, the output name, the dynamic axes and the sample's own bytes. The
    ONNX export itself (and its capability check at a second shape) is proven by every first build of a
    checkpoint, tests/builder/test_build.py's for every architecture.
    """
    import numpy as np

    import tritongen.builder.pipeline

    real_stage, real_export = tritongen.builder.pipeline.export, tritongen.builder.pipeline.export_onnx
    building: dict[str, str] = {}

    def stage(plan: Any, work: Any, console: Any) -> Any:
        building["key"] = _key(
            str(plan.spec.model), plan.bound.task, plan.max_length, list(plan.inputs), plan.spec.trust_remote_code,
            type(plan.module).__qualname__,
        )  # fmt: skip
        try:
            return real_stage(plan, work, console)
        finally:
            building.pop("key", None)

    def export(module: Any, sample: Any, output_name: str, path: Path, *, axes: Any = None) -> None:
        if "key" not in building:
            return real_export(module, sample, output_name, path, axes=axes)
        digest = hashlib.sha1()
        for name, array in sample.items():
            array = np.ascontiguousarray(array)
            digest.update(f"{name}{array.dtype}{array.shape}".encode() + array.tobytes())
        key = _key(building["key"], output_name, axes, digest.hexdigest())

        def make(folder: Path) -> Path:
            folder.mkdir(parents=True)
            real_export(module, sample, output_name, folder / "model.onnx", axes=axes)
            return folder / "model.onnx"

        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_once(root / key, make), path)

    export.real = real_export  # type: ignore[attr-defined]  # for a test that breaks the export itself
    tritongen.builder.pipeline.export, tritongen.builder.pipeline.export_onnx = stage, export
    try:
        yield
    finally:
        tritongen.builder.pipeline.export, tritongen.builder.pipeline.export_onnx = real_stage, real_export
