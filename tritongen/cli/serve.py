"""Serving a repository and talking to the server: ``serve``, ``rollout``, ``rollback``, ``health``, ``infer``.

``gateway`` too: it fronts the server with OpenAI and TEI routes. None of them loads the build machinery: they
work on a machine that only serves.
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

from tritongen.cli.options import add_admin_key_option, add_backends_option, add_repository_option, add_server_options
from tritongen.contract import CANDIDATE_LABELS, CONTEXT, QUESTION, TEXT, TEXT_PAIR
from tritongen.errors import UsageError

__all__ = ["register"]

_SWITCHES = {
    "rollout": "bring a built version of NAME into service under traffic, after a canary (exit 2 if refused)",
    "rollback": "return NAME to the version built before the serving one, the same way",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serve``, ``rollout``, ``rollback``, ``health``, ``infer`` and ``gateway``, in this order."""
    subparsers.add_parser(
        "serve", help="serve a repository with the local Triton server (foreground)", options=_serve_options
    )
    for command, text in _SWITCHES.items():
        subparsers.add_parser(command, help=text, options=partial(_switch_options, command=command))
    subparsers.add_parser(
        "health", help="one real inference per ensemble of a served repository; exit 0 or 1", options=_health_options
    )
    subparsers.add_parser("infer", help="query a served ensemble", options=_infer_options)
    subparsers.add_parser(
        "gateway",
        help="OpenAI /v1/embeddings and TEI /embed, /rerank, /predict, /tokenize in front of Triton (gRPC)",
        options=_gateway_options,
    )


def _log(line: str) -> None:
    print(line, flush=True)


def _serve_options(serve: argparse.ArgumentParser) -> None:
    add_repository_option(serve, "a folder, or s3://bucket/prefix (also s3://http://HOST:PORT/...)", remote=True)
    serve.add_argument("--cache-size", type=int, default=16 * 1024 * 1024, help="response cache bytes (0: off)")
    serve.add_argument("--health-port", type=int, default=8003, help="port of /healthz and /livez (0: off)")
    serve.add_argument(
        "--grace-period",
        type=int,
        default=20,
        help="seconds Triton drains in-flight requests on SIGTERM/SIGINT before everything is killed",
    )
    serve.add_argument(
        "--supervise",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reload a Python step whose stub process dies",
    )
    serve.add_argument(
        "--otlp-endpoint",
        help="an OpenTelemetry collector's OTLP/HTTP address (http://host:4318): Triton traces every request there, "
        "under the W3C traceparent the request carries (default: no traces)",
    )
    add_admin_key_option(serve)
    add_backends_option(serve)
    add_server_options(serve)
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> None:
    from tritongen.serve.foreground import ServeOptions, serve

    serve(
        ServeOptions(
            repository=args.repository,
            host=args.host,
            http_port=args.http_port,
            grpc_port=args.grpc_port,
            metrics_port=args.metrics_port,
            health_port=args.health_port,
            cache_size=args.cache_size,
            grace_period=args.grace_period,
            supervise=args.supervise,
            admin_key_file=args.admin_key_file,
            otlp_endpoint=args.otlp_endpoint,
        ),
        log=_log,
    )


def _switch_options(switch: argparse.ArgumentParser, command: str) -> None:
    from tritongen.buildspec import DEFAULT_NAME

    switch.add_argument("--name", default=DEFAULT_NAME, help="ensemble name")
    if command == "rollout":
        switch.add_argument("--version", type=int, help="version to serve (default: the newest built)")
    add_repository_option(switch)
    add_admin_key_option(switch)
    add_server_options(switch, "http")
    switch.set_defaults(func=_switch, version=None)


def _switch(args: argparse.Namespace) -> None:
    import tritonclient.http as httpclient

    from tritongen.serve.admin import AdminClient, http_headers, read_key
    from tritongen.serve.rollout import rollback, rollout

    key = read_key(args.repository, args.admin_key_file)
    # Loading a large model on a busy machine can take minutes.
    plain = httpclient.InferenceServerClient(
        f"{args.host}:{args.http_port}", connection_timeout=30, network_timeout=900
    )
    client = AdminClient(plain, http_headers(key))
    try:
        if args.command == "rollout":
            done = rollout(client, args.repository, args.name, version=args.version, log=_log)
        else:
            done = rollback(client, args.repository, args.name, log=_log)
    finally:
        plain.close()
    print(f"`{done.name}` now serves version {done.new} (was {done.old})")


def _health_options(health: argparse.ArgumentParser) -> None:
    add_repository_option(health, "the served folder, or its s3:// URL", remote=True)
    health.add_argument("--timeout", type=float, default=10.0, help="seconds per ensemble")
    add_server_options(health, "http")
    health.set_defaults(func=_health)


def _health(args: argparse.Namespace) -> int:
    from tritongen.errors import ServerError
    from tritongen.serve.admin import http_headers, read_key
    from tritongen.serve.health import deep_check, healthy

    try:  # a remote repository's ensembles are listed by the restricted repository API
        headers = http_headers(read_key(args.repository))
    except ServerError:
        headers = None
    probes = deep_check(args.repository, f"{args.host}:{args.http_port}", timeout=args.timeout, headers=headers)
    for probe in probes:
        print(probe.line)
    if not probes:
        print(f"FAIL no ensemble in {args.repository}")
    return 0 if healthy(probes) else 1


def _infer_options(inf: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import DEFAULT_NAME

    inf.add_argument("--name", default=DEFAULT_NAME)
    inf.add_argument("--text", action="append", help="text to send (repeat for a batch)")
    inf.add_argument("--question", action="append", help="question, for question-answering models")
    inf.add_argument("--context", action="append", help="context of each --question")
    inf.add_argument("--text-pair", action="append", help="second segment, for text-pair models")
    inf.add_argument("--candidate-labels", help='zero-shot: a JSON list of labels for every --text: \'["a", "b"]\'')
    inf.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    inf.add_argument("--url", help="host:port (default: --host and the protocol's port)")
    add_server_options(inf, "http", "grpc")
    inf.set_defaults(func=_infer)


def _infer(args: argparse.Namespace) -> None:
    from tritongen.serve.client import infer

    port = args.grpc_port if args.protocol == "grpc" else args.http_port
    url = args.url or f"{args.host}:{port}"
    if args.question:
        if not args.context or len(args.context) != len(args.question):
            raise UsageError("give one --context per --question")
        key, texts, extra = QUESTION, args.question, {CONTEXT: args.context}
    elif args.text:
        key, texts, extra = TEXT, args.text, ({TEXT_PAIR: args.text_pair} if args.text_pair else {})
        if args.candidate_labels:  # zero-shot: one label list for every text
            extra[CANDIDATE_LABELS] = [args.candidate_labels]
    else:
        raise UsageError("nothing to send: give --text (or --question and --context for QA models)")
    rows = infer(texts, name=args.name, url=url, protocol=args.protocol, inputs=extra, text_input=key)
    for text, row in zip(texts, rows, strict=True):
        print(json.dumps({key: text, **row}, ensure_ascii=False))


def _gateway_options(gateway: argparse.ArgumentParser) -> None:
    add_repository_option(
        gateway,
        "the served folder, read for its ensembles, tokenizers and labels (an s3:// URL or a folder not on this "
        "machine: the ensembles are listed with the admin key, token counts 0, no /tokenize)",
        remote=True,
    )
    gateway.add_argument("--port", type=int, default=8080, help="the gateway's HTTP port")
    gateway.add_argument("--listen", default="127.0.0.1", help="the address the gateway listens on")
    gateway.add_argument("--model", help="default ensemble of the routes it can serve (default: the only one able)")
    gateway.add_argument("--triton-url", help="Triton's gRPC host:port (default: --host and --grpc-port)")
    gateway.add_argument(
        "--triton-http-url",
        help="Triton's HTTP host:port, which inference goes to (default: --triton-url's host, else --host, and "
        "--http-port)",
    )
    gateway.add_argument("--timeout", type=float, default=60.0, help="seconds per Triton request")
    gateway.add_argument(
        "--max-triton-calls",
        type=int,
        help="Triton calls of one kind in flight before requests wait to go together in the next (default: per "
        "ensemble, its steps' most instances plus one; 0: every request its own call)",
    )
    gateway.add_argument(
        "--spread-calls",
        type=int,
        help="Triton calls a big request (4096 characters or more) is cut into, its rows sorted by length, so that "
        "it runs on every instance of the model step (default: per ensemble, its steps' most instances; 1: never)",
    )
    gateway.add_argument(
        "--through-ensemble",
        action="store_true",
        help="send every call through the ensemble; by default, for an embedder whose steps it can run, the gateway "
        "tokenises and normalises itself and calls the model step alone (the same embeddings, two Python hops fewer)",
    )
    gateway.add_argument(
        "--api-key-file",
        type=Path,
        help="file holding the API key clients must send (default: $TRITONGEN_GATEWAY_KEY; none: open)",
    )
    add_admin_key_option(
        gateway, "serve's admin key, to list the served ensembles where --repository is no folder here"
    )
    tei = gateway.add_argument_group("Text Embeddings Inference's router settings (its 1.9 defaults)")
    tei.add_argument(
        "--auto-truncate",
        choices=["true", "false"],
        default="true",
        help="cut a text longer than the model to its first tokens when a request does not say `truncate` (TEI "
        "1.9's default); false: such a request is refused, as with `truncate: false`",
    )
    tei.add_argument("--max-client-batch-size", type=int, default=32, help="inputs per request on TEI's routes")
    tei.add_argument("--payload-limit", type=int, default=2_000_000, help="bytes of a request body")
    tei.add_argument(
        "--max-concurrent-requests", type=int, default=512, help="inference requests in flight; more get 429"
    )
    tei.add_argument("--served-model-name", help="what the default model (--model) is called in answers, and asked as")
    tei.add_argument("--default-prompt-name", help="the prompt embedding requests get when they name none")
    tei.add_argument(
        "--otlp-endpoint",
        help="an OpenTelemetry collector's OTLP/HTTP address (http://host:4318): a span per request and per "
        "Triton call, whose context Triton gets (default: no traces)",
    )
    tei.add_argument("--otlp-service-name", default="tritongen-gateway", help="the service name the spans carry")
    add_server_options(gateway, "http", "grpc")
    gateway.set_defaults(func=_gateway)


def _gateway(args: argparse.Namespace) -> None:
    from tritongen.gateway import GatewayOptions, read_api_key, run_gateway
    from tritongen.serve.server import REMOTE_SCHEMES

    remote = str(args.repository).startswith(REMOTE_SCHEMES)
    for option, address in (("--triton-url", args.triton_url), ("--triton-http-url", args.triton_http_url)):
        host, _, port = (address or "").rpartition(":")
        if address is not None and not (host and port.isdigit()):
            raise UsageError(f"{option} must be host:port, got {address!r}")
    triton_host = args.triton_url.rpartition(":")[0] if args.triton_url else args.host
    options = GatewayOptions(
        triton_url=args.triton_url or f"{args.host}:{args.grpc_port}",
        triton_http_url=args.triton_http_url or f"{triton_host}:{args.http_port}",
        repository=args.repository if remote else Path(args.repository),
        model=args.model,
        api_key=read_api_key(args.api_key_file),
        timeout_s=args.timeout,
        admin_key_file=args.admin_key_file,
        auto_truncate=args.auto_truncate == "true",
        max_client_batch_size=args.max_client_batch_size,
        payload_limit=args.payload_limit,
        max_concurrent_requests=args.max_concurrent_requests,
        served_model_name=args.served_model_name,
        default_prompt_name=args.default_prompt_name,
        max_triton_calls=args.max_triton_calls,
        spread_calls=args.spread_calls,
        otlp_endpoint=args.otlp_endpoint,
        otlp_service_name=args.otlp_service_name,
        direct=not args.through_ensemble,
    )
    if options.max_triton_calls is not None and options.max_triton_calls < 0:
        raise UsageError("--max-triton-calls must be 0 or more")
    if options.spread_calls is not None and options.spread_calls < 1:
        raise UsageError("--spread-calls must be 1 or more")
    if options.served_model_name and not options.model:
        raise UsageError("--served-model-name names the default model: give it with --model")
    if min(options.max_client_batch_size, options.payload_limit, options.max_concurrent_requests) < 1:
        raise UsageError("--max-client-batch-size, --payload-limit and --max-concurrent-requests must be at least 1")
    run_gateway(options, host=args.listen, port=args.port)
