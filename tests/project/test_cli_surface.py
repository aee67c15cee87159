"""The command line's surface: one default name, the same name options everywhere, and --help listing only what
a command uses."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.project.test_layout import BUILD_MACHINERY, HEAVY_LIBRARIES
from tritongen.buildspec import DEFAULT_NAME, BuildSpec
from tritongen.cli import _parser

MAKEFILE_NAME = re.search(r"^NAME \?= (\S+)$", open("Makefile").read(), re.M)


def _subcommands() -> dict:
    parser = _parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return dict(sub.choices)


def test_every_command_defaults_to_the_one_name_the_makefile_and_the_spec_use():
    assert MAKEFILE_NAME and MAKEFILE_NAME.group(1) == DEFAULT_NAME == BuildSpec(model="m").name
    for command, parser in _subcommands().items():
        if command in ("build", "serve", "health", "gateway"):
            continue  # build takes its name from the spec; the others serve every ensemble of a repository
        assert DEFAULT_NAME in (parser.get_default("name"), parser.get_default("default_name")), command


@pytest.mark.parametrize("command", ["package", "manifests"])
def test_package_and_manifests_take_the_name_as_an_option_and_positionally(command):
    parser = _subcommands()[command]
    extra = ["--to", "s3://b/p"] if command == "manifests" else []
    assert parser.parse_args(["--name", "x", *extra]).name == "x"
    assert parser.parse_args(["x", *extra]).positional_name == "x"


@pytest.mark.parametrize(
    ("command", "hidden"),
    [("health", ["--grpc-port", "--metrics-port"]), ("soak", ["--http-port", "--metrics-port"]),
     ("rollout", ["--grpc-port", "--metrics-port"]), ("infer", ["--metrics-port"])],
)  # fmt: skip
def test_help_lists_only_the_ports_a_command_talks_to(command, hidden):
    parser = _subcommands()[command]
    text = parser.format_help()
    assert all(option not in text for option in hidden), text
    parser.parse_args([*(["--to", "s3://b/p"] if command == "manifests" else []), "--metrics-port", "9"])  # still taken


def test_parser_loads_no_build_machinery_when_help_or_a_serving_command_is_parsed():
    code = (
        "import json, sys\nfrom tritongen.cli import _parser\n"
        "for argv in (['health'], ['serve'], ['gateway']): _parser().parse_args(argv)\n"
        "print(_parser().format_help(), file=sys.stderr)\nprint(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    forbidden = BUILD_MACHINERY + HEAVY_LIBRARIES
    assert [m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden)] == []


@pytest.mark.parametrize(
    ("option", "commands"),
    [("--admin-key-file", {"serve", "rollout", "rollback", "gateway"}), ("--exit-timeout", {"package", "manifests"})],
)
def test_an_option_several_commands_take_has_one_type_default_and_closing_note_in_each(option, commands):
    """The same type and default everywhere, and the same closing parenthesis of its help (its default, or why)."""
    found = {}
    for command, parser in _subcommands().items():
        parser.format_help()  # adds the deferred options
        for action in parser._actions:
            if option in action.option_strings:
                found[command] = (action.type, action.default, re.search(r"\([^()]*\)$", action.help)[0])
    assert set(found) == commands
    assert len(set(found.values())) == 1, found


@pytest.mark.parametrize("option", ["--triton-url", "--triton-http-url"])
def test_the_gateway_refuses_a_triton_address_without_a_port_before_it_starts(option):
    from tritongen.errors import UsageError

    args = _subcommands()["gateway"].parse_args([option, "triton"])
    with pytest.raises(UsageError, match=f"{option} must be host:port, got 'triton'"):
        args.func(args)
