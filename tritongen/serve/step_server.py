"""A model step served alone by a local tritonserver, for what the build records and times the way the node runs it.

Where a native backend serves the build's runtime (:mod:`tritongen.serve.backends`), the build's canary record and
its layout timings come from that backend rather than from our own ONNX Runtime: its release, its reading of the
config (graph level, threads), its batching. A :class:`StepServer` starts a tritonserver on free ports with an
empty repository (explicit model control) at its first :meth:`~StepServer.load`, loads a staged version folder
under a config the build chooses, answers calls over gRPC, and stops with its whole process group when the
build leaves it. A model the backend refuses is a :class:`~tritongen.errors.ServerError` naming its reason.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tritongen.errors import ServerError
from tritongen.serve.backends import ServedBackends
from tritongen.serve.server import Endpoints, TritonServer

__all__ = ["StepCall", "StepServer", "on_cpu"]

StepCall = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]  # one call's inputs -> its outputs by name


def on_cpu(config: Any, instances: int = 1) -> Any:
    """``config`` (a ``ModelConfig`` message) on ``instances`` CPU instances, without a GPU accelerator.

    How a machine without a GPU serves a GPU build's model step.
    """
    from tritonclient.grpc import model_config_pb2 as mc

    served = mc.ModelConfig()
    served.CopyFrom(config)
    del served.instance_group[:]
    served.instance_group.add(count=instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    served.optimization.ClearField("execution_accelerators")
    return served


class StepServer:
    """A tritonserver for one build's model step; use as a context manager. Started at the first load."""

    def __init__(self, backends: ServedBackends, *, log_file: Path | None = None) -> None:
        self.backends = backends
        self.log_file = log_file
        self._root: Path | None = None
        self._server: TritonServer | None = None
        self._names = (f"step{n}" for n in itertools.count(1))
        self._clients: list[Any] = []

    def __enter__(self) -> StepServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the server (and every process of its group) and remove its repository."""
        server, self._server = self._server, None
        for client in self._clients:
            client.close()
        self._clients.clear()
        if server is not None:
            server.stop()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    @property
    def server(self) -> TritonServer:
        """The running server, started on first use."""
        if self._server is None:
            self._root = Path(tempfile.mkdtemp(prefix="tritongen-step-server-"))
            (self._root / "repository").mkdir()
            server = TritonServer(
                self._root / "repository", Endpoints.free(), models=[], log_file=self.log_file,
                exit_timeout=5, backends=self.backends,
            )  # fmt: skip
            self._server = server.start()
        return self._server

    def load(self, version_dir: Path, config: Any) -> str:
        """Serve the model files of ``version_dir`` under ``config`` (a ``ModelConfig`` message); its name here.

        The config is taken as given but for its name and version policy.
        """
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2 as mc
        from tritonclient.utils import InferenceServerException

        server = self.server
        assert self._root is not None
        name = next(self._names)
        served = mc.ModelConfig()
        served.CopyFrom(config)
        served.name = name
        served.ClearField("version_policy")
        folder = self._root / "repository" / name
        folder.mkdir()
        (folder / "1").symlink_to(Path(version_dir).resolve(), target_is_directory=True)
        (folder / "config.pbtxt").write_text(text_format.MessageToString(served), encoding="utf-8")
        try:
            self._client().load_model(name)
        except InferenceServerException as exc:
            reason = str(exc).split("loading failed with error: ", 1)[-1].strip()
            raise ServerError(
                f"{self.backends.describe(config.backend)} refuses the model step `{config.name}`: {reason[:500]}",
                log_file=server.log_file,
            ) from None
        return name

    def unload(self, name: str) -> None:
        """Stop serving ``name`` (its instances' threads and memory go)."""
        if self._server is not None:
            self._client().unload_model(name)

    def call(self, name: str) -> StepCall:
        """One caller of ``name``: a gRPC client of its own, so that callers on several threads run at once."""
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import np_to_triton_dtype

        client = self._client()
        outputs = [o.name for o in client.get_model_config(name).config.output]

        def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            tensors = []
            for key, array in feeds.items():
                tensor = grpcclient.InferInput(key, list(array.shape), np_to_triton_dtype(array.dtype))
                tensor.set_data_from_numpy(np.ascontiguousarray(array))
                tensors.append(tensor)
            result = client.infer(name, tensors, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
            return {o: result.as_numpy(o) for o in outputs}

        return run

    def _client(self) -> Any:
        """A new gRPC client of the server, closed with it."""
        import tritonclient.grpc as grpcclient

        self._clients.append(grpcclient.InferenceServerClient(self.server.grpc_url))
        return self._clients[-1]
