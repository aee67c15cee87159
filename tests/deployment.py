"""Start and stop ``tritongen serve`` for tests, and find what is left of a deployment afterwards.

:class:`ServeProcess` runs ``python -m tritongen serve`` on free ports in its own session (so a
signal meant for pytest never reaches it) and, whatever the test did, leaves no ``serve``,
tritonserver or stub of its repository behind: SIGTERM first, then SIGKILL of each survivor.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tritongen.errors import PortTakenError, ServerError
from tritongen.serve.ports import free_ports, port_taken, start_on_free_ports
from tritongen.serve.server import server_environment, wait_until_ready
from tritongen.serve.supervisor import STUB_NAME, Stub, stubs_of

__all__ = ["ROOT", "ServeProcess", "deployment_pids", "prometheus", "promql"]

ROOT = Path(__file__).resolve().parent.parent


def deployment_pids(repository: Path, *, group: int | None = None) -> list[int]:
    """Live (not zombie) tritonserver and stub processes whose command line names ``repository``.

    With ``group``, only those of that process group (a tritonserver and its stubs share one).
    """
    needle = str(Path(repository).resolve()).encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        is_ours = cmdline[0].endswith((b"tritonserver", STUB_NAME.encode())) and any(needle in a for a in cmdline)
        if is_ours and stat[0] not in ("Z", "X") and group in (None, int(stat[2])):
            pids.append(int(proc.name))
    return pids


class ServeProcess:
    """``tritongen serve`` of one repository as a context manager; ``.output()`` is what it printed."""

    def __init__(
        self,
        repository: Path,
        log: Path,
        *,
        grace_period: int = 20,
        extra_args: tuple[str, ...] = (),
        program: tuple[str, ...] = (sys.executable, "-m", "tritongen"),
        cwd: Path = ROOT,
        env: dict[str, str] | None = None,
    ):
        self.repository = Path(repository).resolve()
        self.log = log
        self.grace_period = grace_period
        # The source tree's tritongen by default (cwd wins); the wheel test runs an installed script.
        self.program, self.cwd, self.env = program, cwd, env
        self.http_port, self.grpc_port, self.metrics_port, self.health_port = free_ports(4)
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None
        self.group: int | None = None  # tritonserver's process group: its pid (it leads a new session)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def command(self) -> list[str]:
        return [
            *self.program, "serve", "--repository", str(self.repository),
            "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
            "--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port),
            "--grace-period", str(self.grace_period), *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout: float = 300) -> ServeProcess:
        """Start ``serve`` and wait until Triton is ready and the health endpoint answers.

        Where a port was taken since it was picked, ``serve`` starts again on fresh ones, as the bench's servers do.
        """

        def start(attempt: int) -> None:
            if attempt > 1:
                self.http_port, self.grpc_port, self.metrics_port, self.health_port = free_ports(4)
            try:
                self._start(timeout)
            except ServerError:
                if port_taken(self.output()):
                    raise PortTakenError("`tritongen serve`", self.ports, "127.0.0.1", log_file=self.log) from None
                raise

        start_on_free_ports(start, "`tritongen serve`")
        return self

    @property
    def ports(self) -> tuple[int, int, int, int]:
        return self.http_port, self.grpc_port, self.metrics_port, self.health_port

    def _start(self, timeout: float) -> None:
        with open(self.log, "wb") as handle:
            self.process = subprocess.Popen(
                self.command(), cwd=self.cwd, env=self.env or server_environment(), stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            wait_until_ready(
                self.http_url, timeout=timeout, process=self.process, what="`tritongen serve`",
                reason=lambda: self.output()[-3000:],
            )  # fmt: skip
            deadline = time.monotonic() + 60
            while self.health("/livez") != 200:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise ServerError(f"`tritongen serve`'s /livez never answered: {self.output()[-3000:]}")
                time.sleep(0.25)
            self.group = self.triton_pid()
        except BaseException:
            self.stop()
            raise

    def health(self, path: str = "/healthz", timeout: float = 30) -> int | None:
        """The status code of the health endpoint, or None when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=timeout) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def triton_pid(self) -> int:
        """The pid of the tritonserver this ``serve`` runs."""
        assert self.process is not None
        pids = [p for p in deployment_pids(self.repository) if _parent(p) == self.process.pid]
        assert len(pids) == 1, (pids, self.output())
        return pids[0]

    def stubs(self) -> dict[str, Stub]:
        """The live stubs, by instance name."""
        return stubs_of(self.triton_pid())

    def survivors(self) -> list[int]:
        """Processes of this deployment still alive: ``serve`` itself, its tritonserver and stubs."""
        serve = [self.process.pid] if self.process is not None and self.process.poll() is None else []
        return serve + (deployment_pids(self.repository, group=self.group) if self.group is not None else [])

    def wait(self, timeout: float) -> int:
        """Wait for ``serve`` to exit; its exit code."""
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def output(self) -> str:
        """What ``serve`` printed so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM to ``serve``; after its grace period and a margin, SIGKILL to whatever is left."""
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self.grace_period + 60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        for pid in self.survivors():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


@contextlib.contextmanager
def prometheus(tmp: Path, config: dict) -> Iterator[str]:
    """Debian's ``prometheus`` with ``config`` (a parsed prometheus.yml) on a free port; its base URL."""
    import yaml

    from tritongen.bench.process import http_process

    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))

    def command(port: int) -> list[str]:
        return ["prometheus", f"--config.file={path}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip

    with http_process(command, tmp / "prometheus.log", what="prometheus", env=os.environ, timeout=60,
                      ready="/-/ready") as url:  # fmt: skip
        yield f"http://{url}"


def promql(base: str, expr: str) -> list[dict]:
    """The result of the PromQL ``expr`` at Prometheus ``base`` now (empty when it does not answer yet)."""
    import json
    import urllib.parse

    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
    except OSError:
        return []
    assert body["status"] == "success", body
    return body["data"]["result"]
