"""Run the gateway under uvicorn in the foreground until SIGTERM or SIGINT (uvicorn then drains and exits)."""

from __future__ import annotations

import socket

from tritongen.errors import ServerError
from tritongen.gateway.app import GatewayOptions, create_app

__all__ = ["run_gateway"]


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ServerError(f"the gateway cannot listen on {host}:{port} ({exc.strerror})") from None


def run_gateway(options: GatewayOptions, *, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve the gateway on ``host:port`` (blocking)."""
    import uvicorn

    _check_port(host, port)
    print(f"gateway: listening on http://{host}:{port}", flush=True)
    config = uvicorn.Config(
        create_app(options),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # nothing reads the client's address or scheme; its middleware costs every request
        lifespan="on",
        timeout_graceful_shutdown=10,
    )
    uvicorn.Server(config).run()
