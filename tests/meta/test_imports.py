"""The package's import structure, read from its source (nothing is imported to read it).

* No import cycle among ``mongosched`` modules. Every runtime import counts: those at
  module level and those inside functions (they run too, only later); imports under
  ``if TYPE_CHECKING:`` do not (they never run).
* Imports follow one layer order (:data:`LAYERS`), those under ``if TYPE_CHECKING:``
  included.
* Only the stores talk to the driver: no module outside ``mongosched/store/`` imports
  ``pymongo`` or ``bson`` (not even for the type checker, under ``TYPE_CHECKING``),
  except inside the CLI's one connection-check function.
* No module imports another module's private (underscore-prefixed) name, nor a private
  module.
* Each module imports on its own, in a fresh interpreter.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mongosched"
DRIVER = frozenset({"pymongo", "bson", "gridfs", "motor"})
"""Top-level packages of the MongoDB driver."""
STORE_PACKAGE = "mongosched.store"
CLI_PACKAGE = "mongosched.cli"
"""The command line (a module or a package): it may reach the driver in one function,
the connection check (whose name says so)."""


@dataclass(frozen=True)
class Import:
    module: str
    """The importing module."""
    target: str
    """The module imported (absolute)."""
    names: tuple[str, ...]
    """What ``from target import ...`` takes from it (empty for ``import target``)."""
    line: int
    function: str | None
    """The enclosing function, None at module (or class) level."""

    def where(self) -> str:
        inside = f" in {self.function}()" if self.function else ""
        return f"{self.module}:{self.line}{inside}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


MODULES = source_files()


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py" if name in MODULES else False


def resolve(module: str, level: int, target: str | None) -> str:
    """The absolute name ``from <level dots><target>`` means inside ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package(module):
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, source: str, *, typing: bool = False) -> Iterator[Import]:
    """Every import of module ``name`` (whose text is ``source``) that can run, and with
    ``typing`` those under ``if TYPE_CHECKING:`` too."""
    tree = ast.parse(source, filename=name)

    def visit(node: ast.AST, function: str | None) -> Iterator[Import]:
        yield from among(ast.iter_child_nodes(node), function)

    def among(nodes: Iterable[ast.AST], function: str | None) -> Iterator[Import]:
        for child in nodes:
            if isinstance(child, ast.If) and is_type_checking(child.test):
                # The branches' statements themselves (an import among them, too).
                yield from among((child.body if typing else []) + child.orelse, function)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from visit(child, child.name if function is None else function)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(name, alias.name, (), child.lineno, function)
            elif isinstance(child, ast.ImportFrom):
                target = resolve(name, child.level, child.module)
                names = tuple(alias.name for alias in child.names)
                yield Import(name, target, names, child.lineno, function)
            else:
                yield from visit(child, function)

    yield from visit(tree, None)


IMPORTS = [
    imp
    for name, path in MODULES.items()
    for imp in imports_of(name, path.read_text(encoding="utf-8"))
]


def edges(imp: Import) -> set[str]:
    """The mongosched modules an import loads by name: ``from pkg import mod`` loads
    ``pkg.mod`` when that is a module, ``pkg`` for any other name."""
    if imp.target not in MODULES:
        return set()
    if not imp.names:
        return {imp.target}
    out = set()
    for alias in imp.names:
        sub = f"{imp.target}.{alias}"
        out.add(sub if sub in MODULES else imp.target)
    return out


def graph() -> dict[str, dict[str, list[Import]]]:
    """module → imported module → the imports that make that edge."""
    out: dict[str, dict[str, list[Import]]] = {name: {} for name in MODULES}
    for imp in IMPORTS:
        for target in edges(imp):
            if target != imp.module:
                out[imp.module].setdefault(target, []).append(imp)
    return out


def cycles(deps: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in deps[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(deps):
        if node not in index:
            connect(node)
    return found


def describe(component: list[str], deps: dict[str, dict[str, list[Import]]]) -> str:
    members = set(component)
    lines = [" <-> ".join(component)]
    for module in component:
        for target, imports in sorted(deps[module].items()):
            if target in members:
                lines.append(f"    {module} -> {target} ({', '.join(i.where() for i in imports)})")
    return "\n".join(lines)


# The checker checks what it should -----------------------------------------------------------
def test_the_checker_sees_cycles_function_imports_and_private_names() -> None:
    deps: dict[str, dict[str, list[Import]]] = {
        "a": {"b": []},
        "b": {"c": []},
        "c": {"a": []},
        "d": {"a": []},
    }
    assert cycles(deps) == [["a", "b", "c"]]
    assert cycles({"a": {"b": []}, "b": {}}) == []
    assert resolve("mongosched.contrib.django.conf", 1, "taskrun") == (
        "mongosched.contrib.django.taskrun"
    )
    assert resolve("mongosched.contrib.django", 2, None) == "mongosched.contrib"
    assert resolve("mongosched.contrib.flask", 2, "app") == "mongosched.app"
    assert resolve("mongosched.app", 1, "store") == "mongosched.store"

    source = (
        "from typing import TYPE_CHECKING\n"
        "from .x import y\n"
        "if TYPE_CHECKING:\n"
        "    from .never import runs\n"
        "def f():\n"
        "    import pymongo\n"
        "    from . import _private\n"
    )
    found = list(imports_of("mongosched.contrib.fake", source))
    assert [(i.target, i.names, i.function) for i in found] == [
        ("typing", ("TYPE_CHECKING",), None),
        ("mongosched.contrib.x", ("y",), None),
        ("pymongo", (), "f"),
        ("mongosched.contrib", ("_private",), "f"),
    ]
    assert private_names(found[3]) == ["_private"]
    assert private_names(Import("m", "mongosched.app", ("__version__", "App"), 1, None)) == []
    inside = Import("mongosched.app", "mongosched._core.records", ("JobRecord",), 1, None)
    assert private_names(inside) == []
    outside = Import("tests.x", "mongosched._core.records", ("JobRecord",), 1, None)
    assert private_names(outside) == ["_core"]


# The package --------------------------------------------------------------------------------
def test_no_import_cycles() -> None:
    deps = graph()
    found = cycles(deps)
    assert not found, "import cycles among mongosched modules:\n" + "\n".join(
        describe(component, deps) for component in found
    )


def driver_imports() -> list[Import]:
    """Imports of the driver, for the type checker's eyes too: a module that names the
    driver's types outside the store has crossed the wall as well."""
    return [
        imp
        for name, path in MODULES.items()
        for imp in imports_of(name, path.read_text(encoding="utf-8"), typing=True)
        if imp.target.split(".")[0] in DRIVER
    ]


def in_cli(module: str) -> bool:
    return module == CLI_PACKAGE or module.startswith(f"{CLI_PACKAGE}.")


def test_only_the_stores_import_the_driver() -> None:
    store_modules = {name for name in MODULES if name.startswith(STORE_PACKAGE)}
    assert store_modules, "the store package moved: update STORE_PACKAGE"
    outside = [imp for imp in driver_imports() if imp.module not in store_modules]
    cli = [imp for imp in outside if in_cli(imp.module)]
    problems = [imp for imp in outside if not in_cli(imp.module)]
    # The CLI may reach the driver in one connection-check function, nowhere else.
    problems += [imp for imp in cli if imp.function is None]
    functions = sorted({(imp.module, imp.function) for imp in cli if imp.function is not None})
    if len(functions) > 1 or any("connect" not in f for _, f in functions):
        problems += [imp for imp in cli if imp.function is not None]
    assert not problems, (
        "modules outside mongosched/store/ import the MongoDB driver (only the CLI's "
        "connection check may):\n"
        + "\n".join(f"    {imp.where()}: {imp.target}" for imp in problems)
    )


def test_contrib_never_imports_the_driver() -> None:
    contrib = [imp for imp in driver_imports() if imp.module.startswith("mongosched.contrib")]
    assert contrib == []


def private_names(imp: Import) -> list[str]:
    """Private names an import takes from a mongosched module, and private modules or
    packages it reaches from outside the package that holds them (``mongosched._core``
    is private to ``mongosched``: any of its modules may import it, users may not);
    dunders such as ``__version__`` are public."""
    if imp.target.split(".")[0] != "mongosched":
        return []

    def private(part: str) -> bool:
        return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))

    parts = imp.target.split(".")
    outside = [
        part
        for i, part in enumerate(parts)
        if private(part) and not f"{imp.module}.".startswith(".".join(parts[:i]) + ".")
    ]
    return outside + [name for name in imp.names if private(name)]


def test_no_module_imports_private_names() -> None:
    problems = [
        f"    {imp.where()}: {', '.join(private_names(imp))} (from {imp.target} import "
        f"{', '.join(imp.names) or '*module*'})"
        for imp in IMPORTS
        if private_names(imp)
    ]
    assert not problems, "imports of private names:\n" + "\n".join(problems)


# Layers ---------------------------------------------------------------------------------------
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("errors", ("mongosched.errors",)),
    (
        "pure values and rules",
        ("mongosched._core", "mongosched.schedule", "mongosched.retry", "mongosched.limits"),
    ),
    ("store", ("mongosched.store",)),
    (
        "public concepts over the store",
        (
            "mongosched.job",
            "mongosched.events",
            "mongosched.task",
            "mongosched.chains",
            "mongosched.transaction",
            "mongosched.observe",
        ),
    ),
    (
        "runner, the app's operations and its workflows",
        ("mongosched.runner", "mongosched.operations", "mongosched.workflow"),
    ),
    ("app", ("mongosched.app", "mongosched.testing", "mongosched")),
    (
        "front ends",
        ("mongosched.cli", "mongosched.dashboard", "mongosched.contrib", "mongosched.__main__"),
    ),
]
"""The layer order, lowest first: a module may import its own layer and those below it,
never one above. Prefixes match whole dotted names; the longest wins."""


def layer_of(module: str) -> int:
    best, found = -1, -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), rank
    return found


def test_every_module_has_a_layer() -> None:
    assert [name for name in MODULES if layer_of(name) < 0] == []


def test_imports_follow_the_layer_order() -> None:
    problems = [
        f"    {imp.where()}: imports {target} ({LAYERS[layer_of(target)][0]}), above "
        f"{LAYERS[layer_of(imp.module)][0]}"
        for imp in IMPORTS
        for target in edges(imp)
        if layer_of(target) > layer_of(imp.module)
    ]
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


TYPED_IMPORTS = [
    imp
    for name, path in MODULES.items()
    for imp in imports_of(name, path.read_text(encoding="utf-8"), typing=True)
]
"""Every import, those under ``if TYPE_CHECKING:`` included."""


def test_type_only_imports_follow_the_layer_order_too() -> None:
    """A module that names a type of a layer above it depends on that layer as surely
    as one that imports it to run: only the circle is hidden from the interpreter."""
    problems = [
        f"    {imp.where()}: imports {target} ({LAYERS[layer_of(target)][0]}) for the type "
        f"checker, above {LAYERS[layer_of(imp.module)][0]}"
        for imp in TYPED_IMPORTS
        for target in edges(imp)
        if layer_of(target) > layer_of(imp.module)
    ]
    assert not problems, "type-only imports against the layer order:\n" + "\n".join(problems)


RUNNER_ORDER = [
    "host",
    "settings",
    "heartbeats",
    "pool",
    "dependencies",
    "keeper",
    "claim",
    "settler",
    "inflight",
    "parts",
    "gate",
    "pauses",
    "transactional",
    "slots",
    "claimer",
    "reaper",
    "attempt",
    "steps",
    "registration",
    "watcher",
    "dispatcher",
    "at_exit",
    "runner",
    "inprocess",
]
"""The runner's modules, lowest first: each imports only those before it (type-only
imports included), so an attempt's path reads downward: the dispatcher hands claims to
the steps' attempt, which uses the claimer, the slots and the transactional call, and
none of those knows the attempt."""


def test_the_runners_modules_import_downward() -> None:
    runner = "mongosched.runner."
    names = {name.removeprefix(runner) for name in MODULES if name.startswith(runner)}
    assert names == set(RUNNER_ORDER), "a runner module was added or renamed: place it"
    rank = {name: n for n, name in enumerate(RUNNER_ORDER)}
    problems = [
        f"    {imp.where()}: imports {target}"
        for imp in TYPED_IMPORTS
        if imp.module.startswith(runner)
        for target in edges(imp)
        if target.startswith(runner)
        and rank[target.removeprefix(runner)] >= rank[imp.module.removeprefix(runner)]
    ]
    assert not problems, "runner modules importing one above them:\n" + "\n".join(problems)


def test_the_layer_check_sees_an_upward_import() -> None:
    upward = Import("mongosched.store.mongo", "mongosched.runner.claim", ("Claim",), 1, None)
    assert layer_of(upward.target) > layer_of(upward.module)
    assert layer_of("mongosched._core.records") < layer_of("mongosched.store.codec")


def test_subpackages_keep_their_store_families_apart() -> None:
    """The two stores share only the store package's own modules (the protocol, the
    codec, due hints): neither imports the other's modules."""
    problems = [
        f"    {imp.where()}: {target}"
        for imp in IMPORTS
        for target in edges(imp)
        for mine, other in (("memory", "mongo"), ("mongo", "memory"))
        if imp.module.startswith(f"mongosched.store.{mine}")
        and target.startswith(f"mongosched.store.{other}")
    ]
    assert not problems, "one store imports the other:\n" + "\n".join(problems)


def installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def optional_dependency_missing(name: str) -> str | None:
    """The framework a module needs, when it is not installed here."""
    if name == "mongosched.contrib.django.backend" and not (
        installed("django.tasks") or installed("django_tasks")
    ):
        return "Django's tasks framework (Django 6, or the django-tasks package)"
    for prefix, requirement in (
        ("mongosched.contrib.django", "django"),
        ("mongosched.contrib.flask", "flask"),
    ):
        if name.startswith(prefix) and not installed(requirement):
            return requirement
    return None


FRESH_IMPORTS = """
import importlib, json, sys, traceback
results = {}
for name in sys.argv[1:]:
    # Forget every module of the package: this one is then imported first, as in a
    # fresh interpreter (third-party modules stay loaded: they cannot hide a cycle here).
    for loaded in [m for m in sys.modules if m == "mongosched" or m.startswith("mongosched.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
        results[name] = None
    except BaseException:
        results[name] = traceback.format_exc()
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def fresh_imports() -> dict[str, str | None]:
    """Each module imported first, in one interpreter started without settings: the
    traceback of each import that failed (None where it worked)."""
    names = sorted(name for name in MODULES if not optional_dependency_missing(name))
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    children = [  # two interpreters, one per core, each importing every other module
        subprocess.Popen(
            [sys.executable, "-c", FRESH_IMPORTS, *names[half::2]],
            cwd=ROOT,
            env={**env, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for half in (0, 1)
    ]
    results: dict[str, str | None] = {}
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        results.update(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_imports_in_a_fresh_interpreter(
    name: str, fresh_imports: dict[str, str | None]
) -> None:
    """Whichever module is imported first, it imports (no partly initialised module
    is met), and without any settings (importing configures nothing)."""
    missing = optional_dependency_missing(name)
    if missing:
        pytest.skip(f"{missing} is not installed")
    assert fresh_imports[name] is None, f"import {name} failed:\n{fresh_imports[name]}"
