"""Every Python code block of the README and the docs runs as written.

The rules the docs follow (docs/contributing.rst, "Code in the docs"):

* each ``.. code-block:: python`` block of a page runs, in the page's order and in one
  namespace: a later block may use what an earlier one defined, as a reader following
  the page does;
* a block whose first line is ``# NAME.py`` is that file: it also runs as module
  ``NAME``, which later blocks import (``from myapp import create_app``);
* the ``test_*`` functions a block defines are called (their parameters are the
  fixtures of that name the page defined, in the block or a ``# conftest.py`` block):
  a test recipe must pass; a block that is a file pytest collects no tests from
  (``# conftest.py``, ``# myapp.py``: only ``test_*.py`` and ``*_test.py`` are) must
  define none, since copied as written it would pass without running them;
* a block preceded by the comment ``.. not-runnable: REASON`` is left out (kept few:
  a fragment of a Django project, a server's configuration).

Pages run in a temporary working directory, one at a time. The README's quick start is
also checked for what it prints and logs.
"""

from __future__ import annotations

import inspect
import logging
import re
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.rst"
PAGES = [README, *sorted((ROOT / "docs").glob("*.rst"))]
NOT_RUNNABLE = ".. not-runnable:"
MODULE = re.compile(r"#\s*(\w+)\.py\b")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str
    not_runnable: str | None

    @property
    def module(self) -> str | None:
        """The module this block is the file of (``# myapp.py`` on its first line)."""
        match = MODULE.match(self.code)
        return match[1] if match else None


def python_blocks(page: Path) -> list[Block]:
    """The page's ``.. code-block:: python`` blocks, in order."""
    lines = page.read_text().splitlines()
    blocks = []
    for number, line in enumerate(lines):
        if line.strip() != ".. code-block:: python":
            continue
        indent = len(line) - len(line.lstrip())
        body, end = [], number + 1
        while end < len(lines) and (
            not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent
        ):
            body.append(lines[end])
            end += 1
        code = textwrap.dedent("\n".join(b for b in body if not b.strip().startswith(":")))
        before = [text.strip() for text in lines[:number] if text.strip()]
        reason = None
        if before and before[-1].startswith(NOT_RUNNABLE):
            reason = before[-1].removeprefix(NOT_RUNNABLE).strip()
            assert reason, f"{page.name}:{number + 1}: say why the block is not runnable"
        blocks.append(Block(page, number + 1, code.strip() + "\n", reason))
    return blocks


def _call_tests(
    namespace: dict[str, Any], called: set[str], fixtures: dict[str, Any] | None = None
) -> None:
    """Call the ``test_*`` functions defined so far and not yet called, each parameter
    given by the page's fixture of that name (in ``namespace``, else in ``fixtures``:
    a ``# conftest.py`` block's)."""

    def value(name: str, test: str) -> Any:
        fixture = namespace.get(name, (fixtures or {}).get(name))
        assert fixture is not None, f"{test}: no fixture {name!r} on the page"
        function: Callable[..., Any] = getattr(fixture, "__wrapped__", fixture)
        return function(*(value(p, test) for p in inspect.signature(function).parameters))

    for name, test in list(namespace.items()):
        if name.startswith("test_") and callable(test) and name not in called:
            called.add(name)
            test(*(value(p, name) for p in inspect.signature(test).parameters))


@pytest.fixture(autouse=True)
def logging_as_it_was() -> Iterator[None]:
    """Blocks set up logging as a program does (``basicConfig``, levels): undo it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    names = ("mongosched", "mongosched.runner", "mongosched.store")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


def run_page(page: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run the page's runnable blocks (see the module); returns the page's namespace."""
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    called: set[str] = set()
    conftest: dict[str, Any] = {}
    for block in python_blocks(page):
        if block.not_runnable:
            continue
        code = compile(block.code, f"{page.name}:{block.line}", "exec")
        if block.module:
            module = types.ModuleType(block.module)
            monkeypatch.setitem(sys.modules, block.module, module)
            exec(code, module.__dict__)
            uncollected = never_collected(block.module, module.__dict__)
            assert not uncollected, (
                f"{page.name}:{block.line}: pytest collects no tests from "
                f"{block.module}.py, so {', '.join(uncollected)} would never run: "
                "put tests in a test_*.py block"
            )
            if block.module == "conftest":
                conftest.update(module.__dict__)
            _call_tests(module.__dict__, called, conftest)
        else:
            exec(code, namespace)
        _call_tests(namespace, called, conftest)
    return namespace


def never_collected(module: str, defined: dict[str, Any]) -> list[str]:
    """The test functions a docs block defines in a file that pytest, as configured by
    default, collects no tests from (only ``test_*.py`` and ``*_test.py``)."""
    if module.startswith("test_") or module.endswith("_test"):
        return []
    return sorted(n for n, v in defined.items() if n.startswith("test_") and callable(v))


def test_tests_in_a_file_pytest_never_collects_fail_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``# conftest.py`` block defining a test (a test copied there passes as "1
    passed" without running) fails; the same test in a ``# test_*.py`` block runs, with
    the conftest's fixtures."""
    ran: list[int] = []
    monkeypatch.setitem(sys.modules, "docs_ran", types.SimpleNamespace(ran=ran))
    page = tmp_path / "page.rst"
    fixture = "import pytest\n\n    @pytest.fixture\n    def n():\n        return 7\n"
    test = "from docs_ran import ran\n\n    def test_n(n):\n        ran.append(n)\n"
    page.write_text(f".. code-block:: python\n\n    # conftest.py\n    {fixture}\n    {test}\n")
    with pytest.raises(AssertionError, match=r"no tests from conftest.py, so test_n would"):
        run_page(page, monkeypatch)
    page.write_text(
        f".. code-block:: python\n\n    # conftest.py\n    {fixture}\n"
        f".. code-block:: python\n\n    # test_page.py\n    {test}\n"
    )
    run_page(page, monkeypatch)
    assert ran == [7]


@pytest.mark.parametrize(
    "page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_the_python_blocks_of_each_page_run_as_written(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_page(page, monkeypatch)


def test_few_blocks_are_left_out() -> None:
    blocks = [b for page in PAGES for b in python_blocks(page)]
    left_out = [f"{b.page.name}:{b.line} ({b.not_runnable})" for b in blocks if b.not_runnable]
    assert len(left_out) <= len(blocks) // 4, left_out


def test_python_examples_are_code_blocks_not_literal_blocks() -> None:
    """A Python example in a literal block (``::``) would not be run: give it
    ``.. code-block:: python``."""
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            if not line.rstrip().endswith("::") or line.lstrip().startswith(".."):
                continue
            body = textwrap.dedent(
                "\n".join(
                    next_line
                    for next_line in lines[number + 1 : number + 12]
                    if not next_line or next_line.startswith(" ")
                )
            )
            first = body.strip().splitlines()[0] if body.strip() else ""
            if re.match(
                r"(from \w|import \w|@\w|def \w|\w+ = |app\.|\w+\.(schedule|configure))", first
            ):
                found.append(f"{page.name}:{number + 1}: {first}")
    assert not found, found


def test_the_quick_start_runs_and_prints_its_result(
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO, logger="mongosched"):
        run_page(README, monkeypatch)
    assert capsys.readouterr().out.strip() == "sent reset to 42"
    assert any("(emails.send) completed in" in r.getMessage() for r in caplog.records)
