"""``build``: a Triton ensemble repository from a checkpoint (:func:`tritongen.builder.pipeline.build_repository`).

Every option overrides the same key of the YAML spec; the spec, the task registry and the runtimes are loaded
only when this command is used. A task's or runtime's own flags come from its section's declaration.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tritongen.cli.options import add_backends_option, ints

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``build``."""
    subparsers.add_parser("build", help="build a Triton ensemble repository from a checkpoint", options=_build_options)


def _build(args: argparse.Namespace) -> None:
    from tritongen.builder.pipeline import build_repository
    from tritongen.builder.spec import load_spec

    build_repository(load_spec(args.spec, **_spec_overrides(args)))


def _spec_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The spec keys the options give, by name (``None``: not given, the spec's or the default value stands)."""
    from tritongen.builder.spec import flat_names

    return dict(
        model=args.model,
        name=args.name,
        task=args.task,
        repository=args.repository,
        max_batch_size=args.max_batch_size,
        buckets=ints(args.buckets),
        padding=args.padding,
        response_cache=args.response_cache,
        warmup=args.warmup,
        dynamic_batching=_dynamic_batching(args),
        model_instances={"count": args.model_instances, "kind": args.model_kind},
        model_layout={"prefer": args.layout_prefer, "workload": args.workload},
        tokenizer_instances={"count": args.tokenizer_instances},
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
        cpu_cores=args.cpu_cores,
        fold=args.fold,
        trust_remote_code=args.trust_remote_code,
        max_length=args.max_length,
        **{name: getattr(args, name) for name in flat_names()},  # the tasks' and runtimes' own flags
    )


def _dynamic_batching(args: argparse.Namespace) -> dict[str, Any]:
    queue_policy = {
        k: v
        for k, v in (
            ("max_queue_size", args.max_queue_size),
            ("default_timeout_microseconds", args.queue_timeout_us),
        )
        if v is not None
    }
    return {
        "enabled": args.dynamic_batching,
        "max_queue_delay_microseconds": args.max_queue_delay_us,
        "preferred_batch_size": ints(args.preferred_batch_size),
        "preserve_ordering": args.preserve_ordering,
        "queue_policy": queue_policy or None,
    }


def _runtime_choices() -> tuple[str, ...]:
    """The model step's runtimes ``--runtime`` takes: the registry's."""
    from tritongen.runtimes import runtime_names

    return runtime_names()


def _build_options(build: argparse.ArgumentParser) -> None:
    # In this order in --help.
    _add_source_options(build)
    _add_batching_options(build)
    _add_instance_options(build)
    _add_variant_options(build)
    _add_gate_options(build)
    _add_runtime_options(build)
    _add_task_options(build)
    add_backends_option(build)
    build.set_defaults(func=_build)


def _add_source_options(build: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import DEFAULT_NAME
    from tritongen.tasks import TASKS

    build.add_argument("--spec", type=Path, help="YAML build spec; options given here override it")
    build.add_argument("--model", help="checkpoint directory or hub id")
    build.add_argument("--name", help=f"ensemble name (default: {DEFAULT_NAME})")
    build.add_argument(
        "--task",
        help=f"one of {', '.join(sorted(TASKS))} (default: detected from the checkpoint)",
    )
    build.add_argument("--repository", type=Path, help="output repository (default: model_repository)")


def _add_batching_options(build: argparse.ArgumentParser) -> None:
    build.add_argument("--max-batch-size", type=int)
    build.add_argument("--buckets", help="comma-separated token length buckets, e.g. 16,32,64,128")
    build.add_argument(
        "--padding",
        choices=("buckets", "longest"),
        help="pad each request to a bucket (Triton batches equal shapes; GPU default) or to its longest row (CPU)",
    )
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


def _add_instance_options(build: argparse.ArgumentParser) -> None:
    build.add_argument("--model-instances", type=int, help="instance count of the model step")
    build.add_argument("--model-kind", choices=("KIND_CPU", "KIND_GPU"), help="where the model step runs")
    build.add_argument("--tokenizer-instances", type=int, help="instance count of the tokenizer step")


def _add_variant_options(build: argparse.ArgumentParser) -> None:
    from tritongen.containers import container_names

    build.add_argument(
        "--precision",
        choices=("fp32", "fp16", "int8"),
        help="served precision (default fp32; runtime openvino: fp32 or int8 by NNCF)",
    )
    build.add_argument(
        "--optimize",
        action=argparse.BooleanOptionalAction,
        help="offline transformer fusions (at FP32 on CPU, attention too)",
    )
    build.add_argument(
        "--quantization",
        choices=("auto", "static", "dynamic"),
        help="int8 scheme: auto (default) searches every scheme for the fastest that passes the gate",
    )
    build.add_argument(
        "--int8-curve",
        action=argparse.BooleanOptionalAction,
        help="int8: also measure the speed/accuracy trade-off curve for the model card (default: on for models "
        "of up to 200 MB of FP32 weights, off above, where it would cost more than the search itself)",
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
        "--cpu-cores",
        type=int,
        metavar="N",
        help="size the CPU model step for a node of N cores where the spec leaves it open (ONNX Runtime: layouts "
        "of N cores measured on the served model, see --layout); default: this machine's cores",
    )
    build.add_argument(
        "--layout",
        dest="layout_prefer",
        choices=["balanced", "latency", "throughput"],
        help="how a CPU build picks the model step's instances and threads where the spec leaves them open: the "
        "most texts/s within 10%% of the best one-request latency (balanced, the default), the best one-request "
        "latency, or the most texts/s; the card shows every layout measured",
    )
    build.add_argument(
        "--workload",
        choices=["queries", "documents"],
        help="the requests a CPU build times its layouts with: one short text each (queries, the default), or "
        "32 long texts each (documents: a node that indexes a corpus straight through Triton, where one request "
        "should have every core)",
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
        "Python step (default off: slower at concurrency 16 here, see docs/building.md; the card says which path)",
    )


def _add_gate_options(build: argparse.ArgumentParser) -> None:
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


def _add_runtime_options(build: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import RuntimeSettings

    build.add_argument("--runtime", choices=_runtime_choices(), help="model step runtime (default onnx)")
    _add_section_flags(build, RuntimeSettings)  # each runtime's own flags
    build.add_argument("--max-length", type=int, help="tokens per model row (default: the model's own limit)")


def _add_task_options(build: argparse.ArgumentParser) -> None:
    from tritongen.buildspec import TaskSettings

    _add_section_flags(build, TaskSettings)  # each task's own flags (their old flat spec names)


def _add_section_flags(build: argparse.ArgumentParser, kind: type) -> None:
    """The flags the registered plug-ins' sections of ``kind`` declare, in registration order."""
    from tritongen.builder.spec import spec_sections

    for settings in spec_sections().values():
        if issubclass(settings, kind):
            for dest, options in settings.cli_flags.items():
                build.add_argument(f"--{dest.replace('_', '-')}", dest=dest, **options)
