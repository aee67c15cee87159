"""Deep readiness inside the container: one real inference per ensemble, with nothing but Python's stdlib.

The 24.10 image runs plain ``tritonserver``, whose ``/v2/health/ready`` says 200 while a dead Python stub fails
every request. ``tritongen package`` copies this file into the image (``/opt/tritongen/probe.py``) and the
Kubernetes readiness probe runs it::

    python3 /opt/tritongen/probe.py --url http://127.0.0.1:8000 minilm

For each named ensemble it reads the inputs from ``/v2/models/<name>/config``, sends one short text in each it
needs (not in its options, such as ``PROMPT_NAME`` or ``TRUNCATE_LEFT``; in ``IMAGE``, a one-pixel plain-text PPM
image; a different one every call, so that the response cache cannot answer for a broken pipeline) through the
KServe v2 JSON API, and needs a 200 with outputs. One line per ensemble; exit 0 when all answer, else 1.
``tritongen.serve.health`` is the same check for ``tritongen serve``; this copy must run without tritongen, with the
contract's module (``tritongen/contract.py``, stdlib only) copied beside it for the public tensor names.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

try:  # in the image: the contract's module beside this file
    from contract import IMAGE, carried_by_text_requests
except ImportError:  # in this package
    from tritongen.contract import IMAGE, carried_by_text_requests


def _call(url: str, body: dict | None, timeout: float) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _payload(name: str, text: str) -> str:
    """``text``, or for ``IMAGE`` a 1x1 plain-text PPM image coloured by it (as ``tritongen.serve.health`` sends)."""
    if name != IMAGE:
        return text
    seed = sum(text.encode()) * 2654435761
    return f"P3\n1 1\n255\n{seed % 256} {(seed >> 8) % 256} {(seed >> 16) % 256}\n"


def probe(base: str, name: str, timeout: float = 10.0) -> str | None:
    """None when ``name`` answers an inference, else why not (one line)."""
    try:
        config = _call(f"{base}/v2/models/{name}/config", None, timeout)
        text = f"readiness probe {time.time_ns()}"
        inputs = [
            {"name": tensor["name"], "shape": [1, 1], "datatype": "BYTES", "data": [_payload(tensor["name"], text)]}
            for tensor in config.get("input", [])
            if carried_by_text_requests(tensor["name"], bool(tensor.get("optional")))  # its options left out
        ]
        answer = _call(f"{base}/v2/models/{name}/infer", {"inputs": inputs}, timeout)
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:200]
        return f"HTTP {exc.code}: {detail}"
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if answer.get("outputs") else "no outputs in the answer"


def main(argv: list[str] | None = None) -> int:
    """Probe every ensemble named; the exit code is the verdict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="Triton's HTTP endpoint")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("ensembles", nargs="+")
    args = parser.parse_args(argv)
    failed = 0
    for name in args.ensembles:
        why = probe(args.url.rstrip("/"), name, args.timeout)
        print(f"{'OK  ' if why is None else 'FAIL'} {name}" + ("" if why is None else f": {why}"))
        failed += why is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
