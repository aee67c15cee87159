"""Command line: ``python -m tritongen <command> ...`` (build, serve, health, infer, bench, ...). Thin by design.

Each command parses its options and calls one library function. Errors a user can cause
(:class:`tritongen.errors.TritongenError`) are printed as one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tritongen.errors import RepositoryError, TritongenError, UsageError, describe

__all__ = ["main"]

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1


def _build(args: argparse.Namespace) -> None:
    from tritongen.build.pipeline import build_repository
    from tritongen.spec import load_spec
    from tritongen.tasks import legacy_settings

    spec = load_spec(
        args.spec,
        model=args.model,
        name=args.name,
        task=args.task,
        repository=args.repository,
        max_batch_size=args.max_batch_size,
        buckets=_ints(args.buckets),
        response_cache=args.response_cache,
        warmup=args.warmup,
        dynamic_batching={
            "enabled": args.dynamic_batching,
            "max_queue_delay_microseconds": args.max_queue_delay_us,
            "preferred_batch_size": _ints(args.preferred_batch_size),
            "preserve_ordering": args.preserve_ordering,
            "queue_policy": {
                k: v
                for k, v in (
                    ("max_queue_size", args.max_queue_size),
                    ("default_timeout_microseconds", args.queue_timeout_us),
                )
                if v is not None
            }
            or None,
        },
        model_instances={"count": args.model_instances, "kind": args.model_kind},
        tokenizer_instances={"count": args.tokenizer_instances},
        onnxruntime={"intra_op_threads": args.intra_op_threads, "inter_op_threads": args.inter_op_threads},
        openvino={
            "performance_hint": args.openvino_hint,
            "num_streams": args.openvino_streams,
            "inference_threads": args.openvino_threads,
        },
        precision=args.precision,
        optimize=args.optimize,
        quantization=args.quantization,
        int8_curve=args.int8_curve,
        calibration=args.calibration,
        validation=args.validation,
        accept_accuracy_loss=args.accept_accuracy_loss,
        runtime=args.runtime,
        container_check=args.container_check,
        containers=args.containers,
        device=args.device,
        fold=args.fold,
        trust_remote_code=args.trust_remote_code,
        max_length=args.max_length,
        **{name: getattr(args, name) for name in legacy_settings()},
    )
    build_repository(spec)


def _ints(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"`{text}` is not a comma-separated list of integers") from None


def _serve(args: argparse.Namespace) -> None:
    from tritongen.serve.foreground import ServeOptions, serve

    def log(line: str) -> None:
        print(line, flush=True)

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
        ),
        log=log,
    )


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


def _switch(args: argparse.Namespace) -> None:
    import tritonclient.http as httpclient

    from tritongen.serve.admin import AdminClient, http_headers, read_key
    from tritongen.serve.rollout import rollback, rollout

    def log(line: str) -> None:
        print(line, flush=True)

    key = read_key(args.repository, args.admin_key_file)
    # Loading a large model on a busy machine can take minutes.
    plain = httpclient.InferenceServerClient(
        f"{args.host}:{args.http_port}", connection_timeout=30, network_timeout=900
    )
    client = AdminClient(plain, http_headers(key))
    try:
        if args.command == "rollout":
            done = rollout(client, args.repository, args.name, version=args.version, log=log)
        else:
            done = rollback(client, args.repository, args.name, log=log)
    finally:
        plain.close()
    print(f"`{done.name}` now serves version {done.new} (was {done.old})")


def _infer(args: argparse.Namespace) -> None:
    from tritongen.serve.client import infer

    port = args.grpc_port if args.protocol == "grpc" else args.http_port
    url = args.url or f"{args.host}:{port}"
    if args.question:
        if not args.context or len(args.context) != len(args.question):
            raise UsageError("give one --context per --question")
        key, texts, extra = "QUESTION", args.question, {"CONTEXT": args.context}
    elif args.text:
        key, texts, extra = "TEXT", args.text, ({"TEXT_PAIR": args.text_pair} if args.text_pair else {})
        if args.candidate_labels:  # zero-shot: one label list for every text
            extra["CANDIDATE_LABELS"] = [args.candidate_labels]
    else:
        raise UsageError("nothing to send: give --text (or --question and --context for QA models)")
    rows = infer(texts, name=args.name, url=url, protocol=args.protocol, inputs=extra, text_input=key)
    for text, row in zip(texts, rows):
        print(json.dumps({key: text, **row}, ensure_ascii=False))


def _gateway(args: argparse.Namespace) -> None:
    from tritongen.gateway import GatewayOptions, read_api_key, run_gateway
    from tritongen.serve.server import REMOTE_SCHEMES

    remote = str(args.repository).startswith(REMOTE_SCHEMES)
    options = GatewayOptions(
        triton_url=args.triton_url or f"{args.host}:{args.grpc_port}",
        repository=args.repository if remote else Path(args.repository),
        model=args.model,
        api_key=read_api_key(args.api_key_file),
        timeout_s=args.timeout,
        admin_key_file=args.admin_key_file,
    )
    run_gateway(options, host=args.listen, port=args.port)


def _engine(args: argparse.Namespace) -> None:
    from tritongen.configs.steps import step_names
    from tritongen.repository.staging import existing_versions
    from tritongen.runtimes.tensorrt import build_engine

    model_dir = args.repository / step_names(args.name)["model"]
    versions = existing_versions(model_dir)
    if not versions or not (model_dir / str(versions[-1]) / "engine.json").is_file():
        raise RepositoryError("{path} has no TensorRT build plan; build it with runtime tensorrt first", path=model_dir)
    print(f"Wrote {build_engine(model_dir / str(versions[-1]))}")


def _bench(args: argparse.Namespace) -> None:
    from tritongen.bench import BenchOptions, Sweep, run_bench
    from tritongen.bench.tune import TuneGrid

    sweep = Sweep(
        concurrency=_ints(args.concurrency) or Sweep().concurrency,
        request_count=args.request_count,
        fixed_requests=args.fixed_requests,
    )
    baselines = tuple(b for b in args.baselines.split(",") if b) if args.baselines is not None else None
    options = BenchOptions(
        name=args.name,
        repository=args.repository,
        output=args.output,
        sweep=sweep,
        texts=args.texts,
        compare=tuple(n for n in (args.compare or "").split(",") if n),
        tune=TuneGrid(
            tokenizer=tuple(_ints(args.tokenizer_instances) or ()),
            model=tuple(_ints(args.model_instances) or ()),
            threads=tuple(_ints(args.threads) or ()),
        ),
        **({"baselines": baselines} if baselines is not None else {}),
    )
    run_bench(options)


def _soak(args: argparse.Namespace) -> None:
    from tritongen.bench.soak import SoakSettings, run_soak, write_report
    from tritongen.errors import BenchError

    def show(interval: Any) -> None:
        errors = sum(interval.errors.values())
        memory = ", ".join(f"{k} {v:.0f}" for k, v in sorted(interval.memory_mib.items()))
        p50 = "-" if interval.p50_ms is None else f"{interval.p50_ms:.0f}"
        p99 = "-" if interval.p99_ms is None else f"{interval.p99_ms:.0f}"
        print(
            f"[{interval.index}] {interval.requests} requests, {errors} errors, p50 {p50} ms, p99 {p99} ms; "
            f"MiB: {memory or 'server not found on this machine'}",
            flush=True,
        )

    settings = SoakSettings(minutes=args.minutes, concurrency=args.concurrency, interval_s=args.interval)
    report = run_soak(args.name, grpc_port=args.grpc_port, host=args.host, settings=settings, on_interval=show)
    path = write_report(report, args.output / args.name)
    print(report.to_markdown().splitlines()[-2])
    print(report.to_markdown().splitlines()[-1])
    print(f"report: {path}")
    if report.errors or report.leaks:
        raise BenchError(
            f"soak of `{args.name}` saw {sum(report.errors.values())} errors and {len(report.leaks)} leaks; see {path}"
        )


def _publish(args: argparse.Namespace) -> None:
    from tritongen.configs.steps import served_steps, step_names
    from tritongen.deploy.s3 import parse_s3_url, publish

    names, steps = step_names(args.name), served_steps(args.repository, args.name)
    if steps is None:
        raise UsageError(f"`{args.name}` is not built in {args.repository}; run `make repo NAME={args.name}` first")
    folders = [names[step] for step in (*steps, "ensemble")]
    keys = publish(args.repository, folders, args.to, progress=lambda line: print(line, flush=True))
    print(f"Published `{args.name}` ({len(keys)} objects) to {parse_s3_url(args.to).url}")


def add_name(parser: argparse.ArgumentParser, default: str) -> None:
    """``--name NAME``, with the older positional ``NAME`` still taken (resolved by :func:`_name`)."""
    parser.add_argument("positional_name", nargs="?", metavar="NAME", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=f"ensemble name (default: {default})")
    parser.set_defaults(default_name=default)


def _name(args: argparse.Namespace) -> str:
    if args.name and args.positional_name and args.name != args.positional_name:
        raise UsageError(f"two names, `{args.positional_name}` and --name `{args.name}`; give one")
    return args.name or args.positional_name or args.default_name


def _package(args: argparse.Namespace) -> None:
    from tritongen.deploy import PackageOptions, TritonArgs, write_package
    from tritongen.deploy.gateway import GATEWAY_PORT
    from tritongen.deploy.package import Target, model_folders, packaged_version

    name, server = _name(args), TritonArgs(exit_timeout_secs=args.exit_timeout)
    target = Target.of(model_folders(args.repository, name), args.container)
    options = PackageOptions(args=server, image=args.image, gateway=args.gateway, target=target)
    out = write_package(name, args.repository, args.output, force=args.force, options=options)
    version = packaged_version(args.repository, name)
    device = "one GPU" if target.gpu else "no GPU (every instance runs on the CPU)"
    print(f"Packaged version {version} of `{name}` (the version the configs in {args.repository} serve)")
    print(f"for {target.container.describe()}; compose reserves {device}")
    gateway = f", the gateway on :{GATEWAY_PORT} (key: TRITONGEN_GATEWAY_KEY)" if args.gateway else ""
    print(
        f"Wrote {out}: docker compose -f {out}/compose.yaml up --build (Grafana on :3000, Prometheus on :9090{gateway})"
    )


def _manifests(args: argparse.Namespace) -> None:
    from tritongen.containers import DEFAULT_CONTAINER
    from tritongen.deploy import ManifestOptions, TritonArgs, startup_seconds, write_manifests
    from tritongen.deploy.package import Target, model_folders

    name = _name(args)
    built = (args.repository / name).is_dir()
    if not built and (args.startup_seconds is None or args.gpus is None):
        raise UsageError(
            f"`{name}` is not built in {args.repository}; build it, or size the pods with --startup-seconds and --gpus"
        )
    target = Target.of(model_folders(args.repository, name), args.container) if built else None
    options = ManifestOptions(
        name=name,
        repository_url=args.to,
        image=args.image or "",
        namespace=args.namespace,
        gpus=args.gpus if args.gpus is not None else int(bool(target and target.gpu)),
        cpus=args.cpus,
        container=target.container.release if target else (args.container or DEFAULT_CONTAINER),
        image_pull_policy=args.image_pull_policy,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        queue_target_ms=args.queue_target_ms,
        startup_seconds=args.startup_seconds or startup_seconds(args.repository, name),
        gateway=args.gateway,
    )
    out = write_manifests(options, args.output, args=TritonArgs(exit_timeout_secs=args.exit_timeout), force=args.force)
    device = f"{options.gpus} GPU(s)" if options.gpus else f"{options.cpus} CPUs and no GPU"
    print(f"Pods of `{name}` request {device}; image {options.image or 'tritongen-' + name + ':latest'}")
    print(f"Wrote {out}: kubectl apply -f {out} (or kubectl apply -f {out}/kserve for KServe)")
    if args.gateway:
        print(f"The gateway's API key: the Secret {options.gateway_secret_name}, key api-key (empty for none)")


def _plan(args: argparse.Namespace) -> None:
    from tritongen.deploy import bench_results_path, plan_capacity

    path = args.results or bench_results_path(args.name)
    print(
        plan_capacity(
            path, qps=args.qps, p99_ms=args.p99_ms, headroom=args.headroom, gpus_per_replica=args.gpus
        ).to_text()
    )


def _parser() -> argparse.ArgumentParser:
    from tritongen.containers import container_names
    from tritongen.spec import DEFAULT_NAME, RUNTIMES
    from tritongen.tasks import TASKS, settings_sections

    parser = argparse.ArgumentParser(prog="python -m tritongen", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="build a Triton ensemble repository from a checkpoint")
    build.add_argument("--spec", type=Path, help="YAML build spec; options given here override it")
    build.add_argument("--model", help="checkpoint directory or hub id")
    build.add_argument("--name", help=f"ensemble name (default: {DEFAULT_NAME})")
    build.add_argument(
        "--task",
        help=f"one of {', '.join(sorted(TASKS))} (default: detected from the checkpoint)",
    )
    build.add_argument("--repository", type=Path, help="output repository (default: model_repository)")
    build.add_argument("--max-batch-size", type=int)
    build.add_argument("--buckets", help="comma-separated token length buckets, e.g. 16,32,64,128")
    build.add_argument("--response-cache", action=argparse.BooleanOptionalAction, help="ensemble response cache")
    build.add_argument("--warmup", action=argparse.BooleanOptionalAction, help="model_warmup per length bucket")
    build.add_argument("--dynamic-batching", action=argparse.BooleanOptionalAction, help="dynamic batching")
    build.add_argument(
        "--max-queue-delay-us",
        type=int,
        help="the model step's dynamic batching delay (default: 0 on KIND_CPU instances, 2000 on KIND_GPU)",
    )
    build.add_argument("--preferred-batch-size", help="comma-separated preferred batch sizes")
    build.add_argument("--preserve-ordering", action=argparse.BooleanOptionalAction)
    build.add_argument(
        "--max-queue-size", type=int, help="model step queue limit in requests (default 8 batches; 0: unbounded)"
    )
    build.add_argument(
        "--queue-timeout-us", type=int, help="model step: shed a request queued longer than this (default: never)"
    )
    build.add_argument("--model-instances", type=int, help="instance count of the model step")
    build.add_argument("--model-kind", choices=("KIND_CPU", "KIND_GPU"), help="where the model step runs")
    build.add_argument("--tokenizer-instances", type=int, help="instance count of the tokenizer step")
    build.add_argument("--intra-op-threads", type=int, help="ONNX Runtime intra-op threads (0: default)")
    build.add_argument("--inter-op-threads", type=int, help="ONNX Runtime inter-op threads (0: default)")
    build.add_argument(
        "--precision",
        choices=("fp32", "fp16", "int8"),
        help="served precision (default fp32; runtime openvino: fp32 or int8 by NNCF)",
    )
    build.add_argument("--optimize", action=argparse.BooleanOptionalAction, help="offline transformer fusions")
    build.add_argument(
        "--quantization",
        choices=("auto", "static", "dynamic"),
        help="int8 scheme: auto (default) searches every scheme for the fastest that passes the gate",
    )
    build.add_argument(
        "--int8-curve",
        action=argparse.BooleanOptionalAction,
        help="int8: also measure the speed/accuracy trade-off curve for the model card (default on)",
    )
    build.add_argument(
        "--container-check",
        action=argparse.BooleanOptionalAction,
        help="also check the served model in the runtimes of each --container (default on where "
        "`make compat-venv` made their venvs)",
    )
    build.add_argument(
        "--device",
        choices=["cpu", "gpu"],
        help="the node it serves on: gpu builds KIND_GPU instances with ONNX Runtime's TensorRT accelerator at FP16 "
        "(FP16 gated here); default cpu, or as the spec's model_instances say",
    )
    build.add_argument(
        "--container",
        dest="containers",
        help=f"Triton releases to build for, comma-separated, the first one packaged ({', '.join(container_names())}; "
        "default: the newest)",
    )
    build.add_argument(
        "--fold",
        action=argparse.BooleanOptionalAction,
        help="fold the postprocess step into the ONNX graph where it is tensor math and proves equal to the "
        "Python step (default off: slower at concurrency 16 here, see README; the card says which path)",
    )
    build.add_argument(
        "--trust-remote-code",
        action="store_true",
        default=None,
        help="run the code a checkpoint ships (config.json auto_map) to load it; refused without (the card records it)",
    )
    build.add_argument("--calibration", type=Path, help="calibration texts, one per line (default: built-in)")
    build.add_argument("--validation", type=Path, help="accuracy-gate texts, one per line (default: built-in)")
    build.add_argument(
        "--accept-accuracy-loss",
        action="store_true",
        default=None,
        help="publish even if the accuracy gate fails (the figures go into the model card)",
    )
    build.add_argument("--runtime", choices=RUNTIMES, help="model step runtime (default onnx)")
    build.add_argument("--openvino-hint", choices=("LATENCY", "THROUGHPUT"), help="openvino PERFORMANCE_HINT")
    build.add_argument("--openvino-streams", type=int, help="openvino NUM_STREAMS per instance (0: AUTO; default 1)")
    build.add_argument("--openvino-threads", type=int, help="openvino INFERENCE_NUM_THREADS (0: default)")
    build.add_argument("--max-length", type=int, help="tokens per model row (default: the model's own limit)")
    for settings in settings_sections().values():  # each task's own flags (their old flat spec names)
        for dest, options in settings.cli_flags.items():
            build.add_argument(f"--{dest.replace('_', '-')}", dest=dest, **options)
    build.set_defaults(func=_build)

    def add_server_options(p: argparse.ArgumentParser, *ports: str) -> None:
        """``--host`` and the ``ports`` (http, grpc, metrics; default all) the command talks to.

        The others are still accepted, so that one set of port options (the Makefile's) works for every
        command, but --help lists only what the command uses.
        """
        p.add_argument("--host", default="127.0.0.1")
        defaults = {"http": 8000, "grpc": 8001, "metrics": 8002}
        for port, default in defaults.items():
            shown = not ports or port in ports
            p.add_argument(f"--{port}-port", type=int, default=default, help=None if shown else argparse.SUPPRESS)

    serve = sub.add_parser("serve", help="serve a repository with the local Triton server (foreground)")
    serve.add_argument(
        "--repository",
        default="model_repository",
        help="a folder, or s3://bucket/prefix (also s3://http://HOST:PORT/...)",
    )
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
    key_help = (
        "file holding the admin key (default: $TRITONGEN_ADMIN_KEY, else the file serve writes beside the repository)"
    )
    serve.add_argument("--admin-key-file", type=Path, help=key_help)
    add_server_options(serve)
    serve.set_defaults(func=_serve)

    for command, text in (
        ("rollout", "bring a built version of NAME into service under traffic, after a canary (exit 2 if refused)"),
        ("rollback", "return NAME to the version built before the serving one, the same way"),
    ):
        switch = sub.add_parser(command, help=text)
        switch.add_argument("--name", default=DEFAULT_NAME, help="ensemble name")
        if command == "rollout":
            switch.add_argument("--version", type=int, help="version to serve (default: the newest built)")
        switch.add_argument("--repository", type=Path, default=Path("model_repository"))
        switch.add_argument("--admin-key-file", type=Path, help=key_help)
        add_server_options(switch, "http")
        switch.set_defaults(func=_switch, version=None)

    health = sub.add_parser("health", help="one real inference per ensemble of a served repository; exit 0 or 1")
    health.add_argument(
        "--repository",
        default="model_repository",
        help="the served folder, or its s3:// URL",
    )
    health.add_argument("--timeout", type=float, default=10.0, help="seconds per ensemble")
    add_server_options(health, "http")
    health.set_defaults(func=_health)

    inf = sub.add_parser("infer", help="query a served ensemble")
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
    gateway = sub.add_parser(
        "gateway", help="OpenAI /v1/embeddings and TEI /embed, /rerank, /predict, /tokenize in front of Triton (gRPC)"
    )
    gateway.add_argument(
        "--repository",
        default="model_repository",
        help="the served folder, read for its ensembles, tokenizers and labels (an s3:// URL or a folder not on "
        "this machine: the ensembles are listed with the admin key, token counts 0, no /tokenize)",
    )
    gateway.add_argument("--port", type=int, default=8080, help="the gateway's HTTP port")
    gateway.add_argument("--listen", default="127.0.0.1", help="the address the gateway listens on")
    gateway.add_argument("--model", help="default ensemble of the routes it can serve (default: the only one able)")
    gateway.add_argument("--triton-url", help="Triton's gRPC host:port (default: --host and --grpc-port)")
    gateway.add_argument("--timeout", type=float, default=60.0, help="seconds per Triton request")
    gateway.add_argument(
        "--api-key-file",
        type=Path,
        help="file holding the API key clients must send (default: $TRITONGEN_GATEWAY_KEY; none: open)",
    )
    gateway.add_argument(
        "--admin-key-file",
        type=Path,
        help="serve's admin key, to list the served ensembles where --repository is no folder here "
        "(default: $TRITONGEN_ADMIN_KEY, else the file serve writes beside the repository)",
    )
    add_server_options(gateway, "grpc")
    gateway.set_defaults(func=_gateway)

    engine = sub.add_parser("engine", help="build the TensorRT plan of a tensorrt-runtime build (GPU node)")
    engine.add_argument("--name", default=DEFAULT_NAME)
    engine.add_argument("--repository", type=Path, default=Path("model_repository"))
    engine.set_defaults(func=_engine)

    bench = sub.add_parser("bench", help="perf_analyzer sweep of an ensemble against baselines")
    bench.add_argument("--name", default=DEFAULT_NAME)
    bench.add_argument("--repository", type=Path, default=Path("model_repository"))
    bench.add_argument("--output", type=Path, default=Path("perf_analyzer_configs"))
    bench.add_argument("--concurrency", help="comma-separated concurrency levels (default 1,2,4,8,16)")
    bench.add_argument("--request-count", type=int, default=256, help="requests per measurement window")
    bench.add_argument(
        "--fixed-requests",
        type=int,
        default=0,
        help="send exactly N requests per point, no stability criterion (smoke runs; default: until stable)",
    )
    bench.add_argument("--texts", type=int, default=512, help="number of distinct request texts")
    bench.add_argument("--compare", help="comma-separated other ensembles to measure in the same run")
    bench.add_argument(
        "--baselines",
        help="comma-separated subset of pipeline,nobatch,ceiling,infinity,gateway (default: all available but gateway)",
    )
    tuning = bench.add_argument_group(
        "tuning sweep", "measure these settings too, applied to the running server; the report names the best"
    )
    tuning.add_argument("--tokenizer-instances", help="comma-separated tokenizer step instance counts, e.g. 1,2")
    tuning.add_argument("--model-instances", help="comma-separated model step instance counts, e.g. 1,2")
    tuning.add_argument(
        "--threads", help="comma-separated threads per model instance (0: the runtime's default), e.g. 0,1,2"
    )
    bench.set_defaults(func=_bench)

    soak = sub.add_parser("soak", help="mixed traffic at a served ensemble for minutes: errors, latency, memory")
    soak.add_argument("--name", default=DEFAULT_NAME)
    soak.add_argument("--minutes", type=float, default=10.0)
    soak.add_argument("--concurrency", type=int, default=32)
    soak.add_argument("--interval", type=float, default=60.0, help="seconds per reported interval")
    soak.add_argument("--output", type=Path, default=Path("soak_results"), help="report folder (NAME inside)")
    add_server_options(soak, "grpc")
    soak.set_defaults(func=_soak)

    pub = sub.add_parser("publish", help="upload a deployment's model folders to an S3 model repository")
    pub.add_argument("--name", default=DEFAULT_NAME)
    pub.add_argument("--repository", type=Path, default=Path("model_repository"))
    pub.add_argument("--to", required=True, help="s3://bucket/prefix or s3://http://HOST:PORT/bucket/prefix")
    pub.set_defaults(func=_publish)

    pack = sub.add_parser("package", help="deploy folder: Dockerfile, compose with Prometheus and Grafana")
    add_name(pack, DEFAULT_NAME)
    pack.add_argument("--repository", type=Path, default=Path("model_repository"))
    pack.add_argument("--output", type=Path, help="deploy folder (default deploy/NAME)")
    pack.add_argument("--image", help="image tag compose builds (default tritongen-NAME:latest)")
    pack.add_argument("--exit-timeout", type=int, default=30, help="Triton's --exit-timeout-secs (drain on stop)")
    pack.add_argument("--force", action="store_true", help="replace an existing deploy folder")
    pack.add_argument("--gateway", action="store_true", help="also the OpenAI/TEI gateway: its image and service")
    pack.add_argument(
        "--container", choices=container_names(), help="Triton release of the image (default: the build's)"
    )
    pack.set_defaults(func=_package)

    man = sub.add_parser("manifests", help="Kubernetes manifests (and a KServe InferenceService) for NAME")
    add_name(man, DEFAULT_NAME)
    man.add_argument("--to", required=True, help="s3://bucket/prefix the pods read the model repository from")
    man.add_argument("--repository", type=Path, default=Path("model_repository"), help="local build (probe sizing)")
    man.add_argument("--output", type=Path, help="folder (default deploy/NAME-k8s)")
    man.add_argument(
        "--image",
        help="image with its registry, e.g. registry.example.com/tritongen-NAME:1 (default: tritongen-NAME:latest)",
    )
    man.add_argument("--namespace", default="default")
    man.add_argument("--gpus", type=int, help="GPUs per replica (default: 1 for a build on GPU instances, else 0)")
    man.add_argument("--cpus", type=int, default=2, help="CPUs per replica (and the CPU runtimes' threads)")
    man.add_argument("--container", choices=container_names(), help="Triton release (default: the build's)")
    man.add_argument("--image-pull-policy", default="IfNotPresent", choices=["Always", "IfNotPresent", "Never"])
    man.add_argument("--min-replicas", type=int, default=1)
    man.add_argument("--max-replicas", type=int, default=4)
    man.add_argument("--queue-target-ms", type=float, default=50.0, help="HPA target: queue time per request")
    man.add_argument("--startup-seconds", type=int, help="startup probe budget (default: from the model's size)")
    man.add_argument("--exit-timeout", type=int, default=30, help="Triton's --exit-timeout-secs (drain on stop)")
    man.add_argument("--force", action="store_true", help="replace an existing folder")
    man.add_argument(
        "--gateway", action="store_true", help="also the OpenAI/TEI gateway, a sidecar (its image: package --gateway)"
    )
    man.set_defaults(func=_manifests)

    plan = sub.add_parser("plan", help="replicas and GPUs for a target rate and p99, from a bench result")
    plan.add_argument("--qps", type=float, required=True, help="target requests per second")
    plan.add_argument("--p99-ms", type=float, required=True, help="target p99 latency in ms")
    plan.add_argument("--name", default=DEFAULT_NAME, help="ensemble whose bench result to read")
    plan.add_argument("--results", type=Path, help="results.csv (default perf_analyzer_configs/NAME/results/)")
    plan.add_argument("--headroom", type=float, default=0.3, help="capacity kept free (default 0.3)")
    plan.add_argument("--gpus", type=int, default=1, help="GPUs per replica")
    plan.set_defaults(func=_plan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    args = _parser().parse_args(argv)
    try:
        code = args.func(args)
    except TritongenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug of ours: still one line, the traceback only on request
        if os.environ.get("TRITONGEN_TRACEBACK"):
            raise
        print(
            f"internal error in `{args.command}`: {describe(exc)} "
            "(set TRITONGEN_TRACEBACK=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR
    return code or 0
