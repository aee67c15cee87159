"""The Triton containers a deployment targets: what each one runs, in one table.

A build is checked in, and a package is built on, one official ``nvcr.io/nvidia/tritonserver:<release>-py3``
image. What matters to us differs between releases: the Python the steps run in (the image's
``python3``), the platform its wheels must fit (the glibc of its Ubuntu), the runtime release each
native backend links (ONNX Runtime's onnxruntime backend, OpenVINO's openvino backend: the releases the
build's container check reproduces from pip wheels), and whether a dead Python stub makes its model not
ready. The runtime releases are keyed by the runtime's pip package (a runtime entry's ``package``), so a
runtime finds its own release here without this module knowing any runtime.

Sources, read for each row (the server repository's tags, and NVIDIA's release notes and framework
support matrix, https://docs.nvidia.com/deeplearning/frameworks/support-matrix/index.html):

- runtime versions: ``build.py`` at the release's tag of triton-inference-server/server
  (``TRITON_VERSION_MAP`` at v2.51.0; ``DEFAULT_TRITON_VERSION_MAP``'s ``ort_version`` and
  ``standalone_openvino_version`` at v2.64.0 and v2.71.0, and on the ``r26.08`` branch: Triton 2.72.0, ONNX
  Runtime 1.28.0, OpenVINO 2026.3.0, as ``docs/introduction/compatibility.md`` there lists ONNX Runtime 1.28.0
  and Python 3.12.3 for 26.08);
- 26.09 is not in the table: no ``r26.09`` branch was published in the sources read (main's ``build.py``
  still says 2.73.0dev with ONNX Runtime 1.27.0), so its runtimes could not be read (``onnxruntime_backend``
  PR #363 moves it to OpenVINO 2026.3.1; unverified);
- Ubuntu and Python: 24.10 is the last release on Ubuntu 22.04 (Python 3.10); from 24.11 the images
  are Ubuntu 24.04, whose ``python3`` is 3.12 (build.py installs ``python3.12-pip`` at v2.71.0), and
  whose pip refuses system installs unless told (PEP 668);
- stub readiness: from 25.12 (Triton 2.64) a Python model whose stub died reports not ready
  (python_backend and core changes shipped in that release, tested by the server's
  ``qa/L0_backend_python/model_readiness``); no release restarts a dead stub.

The local server (the nvidia-pytriton wheel) is Triton 2.51, the 24.10 build, so 24.10 is the
release whose serving the tests run for real; the default is the newest release whose facts could be
read, the one a user starting today pulls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "CONTAINERS", "DEFAULT_CONTAINER", "LINKED_RUNTIMES", "LOCAL_CONTAINER", "Container", "container",
    "container_names",
]  # fmt: skip

# The runtimes the images' native backends link, by pip package, with their names for people: the table's
# runtime columns, in the order each row gives their releases.
LINKED_RUNTIMES: dict[str, str] = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}


@dataclass(frozen=True)
class Container:
    """One official Triton image and the facts a build and its package depend on."""

    release: str  # the image tag's release, "24.10"
    triton: str  # the server version it ships
    ubuntu: str
    python: str  # the image's python3, which runs the Python steps
    glibc: str  # the oldest manylinux tag its wheels may carry is manylinux_<glibc>
    # The release each native backend links, by the runtime's pip package: {"onnxruntime": "1.19.2", ...}.
    runtimes: Mapping[str, str]
    dead_stub_not_ready: bool  # a model whose Python stub died reports not ready
    # Step packages whose requirements.lock pin has no wheel for this Python: the newest that has one.
    pins: Mapping[str, str] = field(default_factory=dict)

    @property
    def image(self) -> str:
        """The image reference a Dockerfile starts ``FROM``."""
        return f"nvcr.io/nvidia/tritonserver:{self.release}-py3"

    @property
    def platforms(self) -> tuple[str, ...]:
        """Every pip platform tag a wheel may carry to install there (x86_64 nodes), newest first.

        ``pip download --platform`` matches only the tags it is given, so a target is every manylinux
        tag its glibc accepts, as pip computes them on the image itself.
        """
        minor = int(self.glibc.split(".")[1])
        tags = [f"manylinux_2_{m}_x86_64" for m in range(minor, 4, -1)]
        return (*tags, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64")

    def pip_download(self, requirements: list[str], into: str) -> list[str]:
        """The ``pip download`` arguments that resolve ``requirements`` as the image's pip would, wheels only."""
        platforms = [arg for tag in self.platforms for arg in ("--platform", tag)]
        return [
            "download", "--only-binary=:all:", "--python-version", self.python, *platforms,
            "--dest", into, *requirements,
        ]  # fmt: skip

    @property
    def pip_flags(self) -> tuple[str, ...]:
        """What ``pip install`` needs there: Ubuntu 24.04 marks its Python externally managed (PEP 668)."""
        return ("--break-system-packages",) if self.ubuntu >= "24.04" else ()

    def linked(self, package: str) -> str:
        """The release of the runtime ``package`` that a native backend here links ("": none links it)."""
        return self.runtimes.get(package, "")

    def describe(self) -> str:
        """One line for the console, the card and the docs."""
        runtimes = "".join(f", {LINKED_RUNTIMES[p]} {release}" for p, release in self.runtimes.items())
        return f"Triton {self.release} ({self.triton}; Ubuntu {self.ubuntu}, Python {self.python}{runtimes})"


def _linked(*releases: str) -> dict[str, str]:
    """One row's runtime releases, in the order of :data:`LINKED_RUNTIMES`."""
    return dict(zip(LINKED_RUNTIMES, releases, strict=True))


CONTAINERS: dict[str, Container] = {
    c.release: c
    for c in (
        # Pillow 13 dropped Python 3.10; 12.3.0 is the newest release with a cp310 wheel.
        Container(
            "24.10", "2.51.0", "22.04", "3.10", "2.35", _linked("1.19.2", "2024.4.0"), False, {"pillow": "12.3.0"}
        ),
        Container("25.12", "2.64.0", "24.04", "3.12", "2.39", _linked("1.23.2", "2025.4.0"), True),
        Container("26.07", "2.71.0", "24.04", "3.12", "2.39", _linked("1.27.0", "2026.2.0"), True),
        Container("26.08", "2.72.0", "24.04", "3.12", "2.39", _linked("1.28.0", "2026.3.0"), True),
    )
}
DEFAULT_CONTAINER = "26.08"
LOCAL_CONTAINER = "24.10"  # the release of the tritonserver the tests and `make serve` run here


def container_names() -> list[str]:
    """The supported releases, oldest first (CLI choices and error messages)."""
    return list(CONTAINERS)


def container(release: str | None = None) -> Container:
    """The supported container ``release`` (default :data:`DEFAULT_CONTAINER`); a ValueError names the choices."""
    try:
        return CONTAINERS[release or DEFAULT_CONTAINER]
    except KeyError:
        raise ValueError(
            f"no supported Triton container `{release}`; choose one of {', '.join(container_names())}"
        ) from None
