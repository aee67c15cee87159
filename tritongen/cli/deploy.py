"""Taking a built repository to production: ``publish``, ``package``, ``manifests`` and ``plan``.

``publish`` uploads it to S3, ``package`` writes a compose deployment, ``manifests`` Kubernetes and KServe ones,
and ``plan`` sizes the replicas for a target rate from a bench result.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tritongen.cli.options import add_exit_timeout_option, add_name, add_repository_option, ensemble_name
from tritongen.errors import UsageError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``publish``, ``package``, ``manifests`` and ``plan``."""
    subparsers.add_parser(
        "publish", help="upload a deployment's model folders to an S3 model repository", options=_publish_options
    )
    subparsers.add_parser(
        "package", help="deploy folder: Dockerfile, compose with Prometheus and Grafana", options=_package_options
    )
    subparsers.add_parser(
        "manifests",
        help="Kubernetes manifests (and a KServe InferenceService) for NAME",
        options=_manifests_options,
    )
    subparsers.add_parser(
        "plan", help="replicas and GPUs for a target rate and p99, from a bench result", options=_plan_options
    )


def _publish_options(pub: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import DEFAULT_NAME

    pub.add_argument("--name", default=DEFAULT_NAME)
    add_repository_option(pub)
    pub.add_argument("--to", required=True, help="s3://bucket/prefix or s3://http://HOST:PORT/bucket/prefix")
    pub.set_defaults(func=_publish)


def _publish(args: argparse.Namespace) -> None:
    from tritongen.deploy.s3 import parse_s3_url, publish
    from tritongen.repository.contents import served_steps, step_names

    names, steps = step_names(args.name), served_steps(args.repository, args.name)
    if steps is None:
        raise UsageError(f"`{args.name}` is not built in {args.repository}; run `make repo NAME={args.name}` first")
    folders = [names[step] for step in (*steps, "ensemble")]
    keys = publish(args.repository, folders, args.to, progress=lambda line: print(line, flush=True))
    print(f"Published `{args.name}` ({len(keys)} objects) to {parse_s3_url(args.to).url}")


def _package_options(pack: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import DEFAULT_NAME
    from tritongen.containers import container_names

    add_name(pack, DEFAULT_NAME)
    add_repository_option(pack)
    pack.add_argument("--output", type=Path, help="deploy folder (default deploy/NAME)")
    pack.add_argument("--image", help="image tag compose builds (default tritongen-NAME:latest)")
    add_exit_timeout_option(pack)
    pack.add_argument("--force", action="store_true", help="replace an existing deploy folder")
    pack.add_argument("--gateway", action="store_true", help="also the OpenAI/TEI gateway: its image and service")
    pack.add_argument(
        "--container", choices=container_names(), help="Triton release of the image (default: the build's)"
    )
    pack.set_defaults(func=_package)


def _package(args: argparse.Namespace) -> None:
    from tritongen.deploy import PackageOptions, TritonArgs, write_package
    from tritongen.deploy.gateway import GATEWAY_PORT
    from tritongen.deploy.package import Target, model_folders, packaged_version

    name, server = ensemble_name(args), TritonArgs(exit_timeout_secs=args.exit_timeout)
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


def _manifests_options(man: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import DEFAULT_NAME
    from tritongen.containers import container_names

    add_name(man, DEFAULT_NAME)
    man.add_argument("--to", required=True, help="s3://bucket/prefix the pods read the model repository from")
    add_repository_option(man, "local build (probe sizing)")
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
    add_exit_timeout_option(man)
    man.add_argument("--force", action="store_true", help="replace an existing folder")
    man.add_argument(
        "--gateway", action="store_true", help="also the OpenAI/TEI gateway, a sidecar (its image: package --gateway)"
    )
    man.set_defaults(func=_manifests)


def _manifests(args: argparse.Namespace) -> None:
    from tritongen.containers import DEFAULT_CONTAINER
    from tritongen.deploy import ManifestOptions, TritonArgs, startup_seconds, write_manifests
    from tritongen.deploy.package import Target, model_folders

    name = ensemble_name(args)
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


def _plan_options(plan: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import DEFAULT_NAME

    plan.add_argument("--qps", type=float, required=True, help="target requests per second")
    plan.add_argument("--p99-ms", type=float, required=True, help="target p99 latency in ms")
    plan.add_argument("--name", default=DEFAULT_NAME, help="ensemble whose bench result to read")
    plan.add_argument("--results", type=Path, help="results.csv (default perf_analyzer_configs/NAME/results/)")
    plan.add_argument("--headroom", type=float, default=0.3, help="capacity kept free (default 0.3)")
    plan.add_argument("--gpus", type=int, default=1, help="GPUs per replica")
    plan.add_argument(
        "--cores",
        type=int,
        help="CPU cores per replica, for the CPU side's figure (default: what the build was sized for)",
    )
    plan.add_argument(
        "--cpu-side",
        type=Path,
        help="cpu_side.csv of `make bench BENCH_ARGS=--free-model-step` (default perf_analyzer_configs/NAME/cpu_side/; "
        "without one, the reference figures the model card quotes)",
    )
    add_repository_option(plan, "where NAME was built")
    plan.set_defaults(func=_plan)


def _plan(args: argparse.Namespace) -> None:
    from tritongen.deploy import bench_results_path, plan_capacity
    from tritongen.deploy.plan import CpuSideBound, cpu_side_path, read_cpu_side
    from tritongen.repository.contents import built_sizing
    from tritongen.sizing.cpu_side import REFERENCE_CPU_SIDE

    path = args.results or bench_results_path(args.name)
    csv_path = args.cpu_side or cpu_side_path(args.name)
    sized = built_sizing(args.repository, args.name)
    cores = args.cores or (sized.get("cpu_cores") if sized.get("gpu") else None)  # on a CPU node the bench is all
    side = None
    if cores:
        figures = read_cpu_side(csv_path) if args.cpu_side or csv_path.is_file() else REFERENCE_CPU_SIDE
        side = CpuSideBound(figures, cores, sized.get("tokenizer_instances", 1))
    plan = plan_capacity(
        path, qps=args.qps, p99_ms=args.p99_ms, headroom=args.headroom, gpus_per_replica=args.gpus, cpu_side=side
    )
    print(plan.to_text())
