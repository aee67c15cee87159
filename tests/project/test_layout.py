"""The package's structure: no import circles, and light commands that load no build machinery.

The layout is described in docs/architecture.md. An import under ``if TYPE_CHECKING:`` counts as an import here:
a type that needs a module above it is a layer leaking. Imports inside functions do not count; they are how heavy
libraries and optional stages load only when used.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tritongen"

# What operating a built repository needs; none of it may load the build, a task or a heavy library.
LIGHT_MODULES = (
    "tritongen.deploy.package",
    "tritongen.deploy.manifests",
    "tritongen.serve.rollout",
    "tritongen.serve.health",
    "tritongen.bench.tune",
    "tritongen.gateway.app",
    "tritongen.repository.pins",
)
# The spec as data (``tritongen.buildspec``) is light: the runtimes' entries, which the light commands read, type
# their hooks with it. Loading a spec, which needs every task, is the builder's (``tritongen.builder.spec``).
BUILD_MACHINERY = (
    "tritongen.builder",
    "tritongen.gates",
    "tritongen.model",
    "tritongen.precision",
    "tritongen.tasks",
)
HEAVY_LIBRARIES = ("torch", "transformers", "onnx", "onnxruntime", "openvino", "nncf")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _in_process(name: str) -> str:
    """A served step's helper (``_tritongen_step._common``) as the module it is in process; other names as they are."""
    import tritongen.tasks  # noqa: F401  (registers the tasks' helpers)
    from tritongen.steps.helpers import STEP_PACKAGE, served_module

    package, _, rest = name.partition(".")
    helper, _, member = rest.partition(".")
    module = served_module(helper) if package == STEP_PACKAGE and helper else None
    return name if module is None else ".".join(part for part in (module, member) if part)


def _module_level_imports(tree: ast.Module, modules: set[str]) -> set[str]:
    """The package's modules ``tree`` imports outside functions (``if``/``try`` blocks included)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = _in_process(f"{node.module}.{alias.name}")
                    found.add(full if full in modules else _in_process(node.module))
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "finalbody", []))

    visit(tree.body)
    return found & modules


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports at module level."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {m: _module_level_imports(ast.parse(p.read_text(encoding="utf-8")), modules) - {m} for m, p in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_circles_finds_a_loop_when_two_modules_import_each_other():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_package_has_no_import_circle_when_type_checking_imports_count():
    assert circles(import_graph()) == []


def test_light_commands_load_no_build_machinery_when_imported():
    code = (
        f"import importlib, json, sys\nfor m in {list(LIGHT_MODULES)!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert [m for m in loaded if _under(m, BUILD_MACHINERY + HEAVY_LIBRARIES)] == []


def _under(module: str, packages: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one."""
    return any(module == p or module.startswith(p + ".") for p in packages)


MAX_PARAMETERS = 7  # self and cls not counted; *args and **kwargs count one each
MAX_LINES = 80


def test_functions_stay_short_when_written_in_the_package():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg not in ("self", "cls")]
            count = len(names) + bool(args.vararg) + bool(args.kwarg)
            lines = node.end_lineno - node.lineno + 1
            if count > MAX_PARAMETERS or lines > MAX_LINES:
                long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: {count} parameters, {lines} lines")
    assert long == []


def _spelled_outside_the_contract(names: set[str], *folders: Path) -> list[str]:
    """Where any of ``names`` is a whole string literal in ``folders``' modules, the contract's own module apart."""
    import io
    import tokenize

    spelled = {f'"{name}"' for name in names} | {f"'{name}'" for name in names}
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            if path.name == "contract.py" and path.parent == PACKAGE:
                continue
            for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
                if token.type == tokenize.STRING and token.string in spelled:
                    found.append(f"{path.relative_to(folder.parent)}:{token.start[0]} {token.string}")
    return found


def test_public_tensor_names_are_spelled_only_in_the_contract_module():
    """A public tensor's name as a string literal anywhere else is a vocabulary leaking (docstrings may name them)."""
    from tritongen.contract import PUBLIC

    assert _spelled_outside_the_contract(set(PUBLIC), PACKAGE) == []


def test_names_between_steps_are_spelled_only_in_the_contract_module():
    """The tensors the steps pass each other: literals only in the contract."""
    from tritongen import contract

    names = {
        contract.INPUT_IDS, contract.ATTENTION_MASK, contract.TOKEN_TYPE_IDS, *contract.TOKEN_METADATA,
        contract.WINDOW_EXAMPLE, contract.WINDOW_TOKENS, contract.PIXEL_VALUES, contract.LOGITS,
        contract.SENTENCE_EMBEDDING,
    }  # fmt: skip
    assert _spelled_outside_the_contract(names, PACKAGE, PACKAGE.parent / "scripts") == []


def _read_by_key(path: Path, keys: set[str]) -> list[str]:
    """Where ``path`` reads or writes one of ``keys`` as a parameter literal, not through its declaration.

    ``params["k"]``, ``params.get("k", ...)``, ``config.parameter("k")`` (any receiver whose name says param), and
    a dict literal keyed ``"k"`` inside a function named for parameters.
    """
    found = []

    def literal(node: ast.AST) -> str | None:
        return node.value if isinstance(node, ast.Constant) and node.value in keys else None

    def named_param(node: ast.AST) -> bool:
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        return "param" in name.lower()

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        key = None
        if isinstance(node, ast.Subscript) and named_param(node.value):
            key = literal(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("parameter", "int_parameter") or (
                node.func.attr == "get" and named_param(node.func.value)
            ):
                key = literal(node.args[0])
        elif isinstance(node, ast.Dict) and "parameters" in function:
            key = next((k for k in map(literal, filter(None, node.keys)) if k), None)
        if key is not None:
            found.append(f"{path.name}:{node.lineno} {key!r}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_step_parameters_are_read_and_written_only_through_their_declarations():
    """No step, task, builder or bench spells a parameter key of its own: each is a field of one declaration."""
    import tritongen.steps.image  # noqa: F401  (the image step declares its own)
    from tritongen.parameters import DECLARED

    keys = {key for declaration in DECLARED for key in declaration.keys()}
    declarations = {PACKAGE / "parameters.py", PACKAGE / "steps" / "image.py"}
    found = [
        hit
        for folder in (PACKAGE, PACKAGE.parent / "scripts")
        for path in sorted(folder.rglob("*.py"))
        if path not in declarations
        for hit in _read_by_key(path, keys)
    ]
    assert found == []


GATEWAY_KEEPS_OFF = ("tritongen.steps", "tritongen.builder", "tritongen.model")  # the build's side of the house


def test_the_gateway_imports_nothing_of_the_builds_side_anywhere_in_its_modules():
    """Not at module level, nor inside a function: the gateway's process runs none of the build's or the steps' code."""
    found = []
    for path in sorted((PACKAGE / "gateway").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            found += [
                f"{path.relative_to(PACKAGE)}:{node.lineno} {name}" for name in names if _under(name, GATEWAY_KEEPS_OFF)
            ]
    assert found == []
    code = (
        "import json, sys, tritongen.gateway.app\n"
        "print(json.dumps([sorted(sys.modules), [type(f).__name__ for f in sys.meta_path]]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, finders = json.loads(result.stdout)
    assert [m for m in loaded if _under(m, GATEWAY_KEEPS_OFF)] == [] and "HelperFinder" not in finders


def _floors() -> dict[str, int]:
    """The architecture page's floors table: each top-level module or folder (and ``scripts``) -> its floor."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = page.split("## The floors", 1)[1].split("\n\n")[2]
    floors = {}
    for row in table.splitlines()[2:]:
        cells = row.split("|")
        for name in re.findall(r"`([^`]+)`", cells[2]):
            floors[name.removesuffix("/").removesuffix(".py")] = int(cells[1])
    return floors


def test_no_import_runs_up_a_floor_of_the_architecture_page_when_any_module_imports():
    """The page's floors are the code's: a module imports only from its own floor or below, function-level included."""
    floors = _floors()
    mine = {
        p.name.removesuffix(".py")
        for p in PACKAGE.iterdir()
        if not p.name.startswith((".", "_")) or p.name == "__main__.py"
    }
    assert mine - {"py.typed"} <= set(floors), sorted(mine - set(floors))
    up = []
    for folder, prefix in ((PACKAGE, ""), (PACKAGE.parent / "scripts", "scripts")):
        for path in sorted(folder.rglob("*.py")):
            top = prefix or path.relative_to(PACKAGE).parts[0].removesuffix(".py")
            if top not in floors:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                for name in names:
                    parts = name.split(".")
                    target = parts[1] if parts[0] == "tritongen" and len(parts) > 1 else None
                    if target in floors and floors[target] > floors[top]:
                        up.append(
                            f"{path.relative_to(PACKAGE.parent)}: {top} ({floors[top]}) -> {target} ({floors[target]})"
                        )
    assert sorted(set(up)) == []


def test_the_runtime_and_task_interfaces_are_small_parts_of_at_most_six_members():
    """A plug-in's interface is as small as its callers need: each base of the two entries declares six members or
    fewer (class attributes and methods it defines itself), and the entries themselves as few."""
    from tritongen.runtimes.base import Runtime
    from tritongen.tasks._base import Task

    wide = []
    for entry in (Runtime, Task):
        for part in entry.__mro__[:-1]:
            own = {n for n in vars(part) if not n.startswith("__")} | set(vars(part).get("__annotations__", {}))
            if len(own) > 6:
                wide.append(f"{part.__name__}: {sorted(own)}")
    assert wide == []
    assert len(Runtime.__mro__) > 5 and len(Task.__mro__) > 5  # the parts are there
