"""docs/contributing.rst's tables agree with the code: the module table names every
module of the package, and the tests table every folder of tests.

A module added, renamed or moved without a word in the table fails here, so the table a
newcomer reads first stays the map of the package.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mongosched"
GUIDE = (ROOT / "docs" / "contributing.rst").read_text(encoding="utf-8")


def _rows(title: str) -> dict[str, str]:
    """The rows of the simple table whose header's first column is ``title``: the
    first column's name (between double backquotes), and the text of the row."""
    start = re.search(rf"^{re.escape(title)}\s+\S.*$", GUIDE, re.MULTILINE)
    assert start is not None, f"no table headed {title!r} in docs/contributing.rst"
    rows: dict[str, str] = {}
    current = None
    for line in GUIDE[start.end() :].splitlines()[2:]:
        if line.startswith("="):
            break
        head = re.match(r"^``([\w/]+)``\s{2,}(.*)$", line)
        if head:
            current = head.group(1)
            rows[current] = head.group(2)
        elif current is not None:
            rows[current] += " " + line.strip()
    return rows


MODULES = _rows("place")
TESTS = _rows("folder")


def _named(text: str, name: str) -> bool:
    return f"``{name}``" in text


def _unnamed_modules() -> list[str]:
    everything = " ".join(MODULES.values())
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) == 1:  # the root: a concept of its own, or named anywhere
            if path.stem not in MODULES and not _named(everything, path.stem):
                missing.append(str(relative))
            continue
        top = relative.parts[0] + "/"
        row = next(
            (
                key
                for key in sorted(MODULES, key=len, reverse=True)
                if str(relative).startswith(key)
            ),
            top,
        )
        below = Path(str(relative)[len(row) :])
        # a module of the row's package, or of a package one below it (contrib/django):
        # its own name; deeper (a Django management command): its package's
        name = below.stem if len(below.parts) <= 2 else below.parts[1]
        if name == "__init__":
            continue  # a package's own module: its row says what it holds
        text = MODULES.get(row, "")
        if row == "store/memory/":  # "the same module names where the concern is the same"
            text += MODULES.get("store/mongo/", "")
        if not _named(text, name) and not _named(text, name.removesuffix(".py")):
            missing.append(str(relative))
    return missing


def test_the_module_table_names_every_module() -> None:
    assert _unnamed_modules() == [], (
        "docs/contributing.rst's module table does not name these modules: add each to "
        "its package's row, with what it holds"
    )


def test_the_module_table_names_no_module_that_does_not_exist() -> None:
    for row in MODULES:
        place = PACKAGE / row
        assert place.is_dir() or place.with_suffix(".py").exists(), row


def test_the_tests_table_names_every_folder_of_tests_and_no_other() -> None:
    folders = {
        f"tests/{path.name}"
        for path in (ROOT / "tests").iterdir()
        if path.is_dir() and any(path.rglob("test_*.py"))
    }
    named = set(TESTS)
    assert folders - named == set(), "folders of tests the table in docs/contributing.rst omits"
    assert named - folders == set(), "the tests table names folders that do not exist"


def test_the_module_to_tests_table_names_every_test_file_it_covers() -> None:
    start = GUIDE.index("Where a module's tests are")
    table = GUIDE[start : GUIDE.index("\n\n", GUIDE.index("=====\n\n", start) + 1)]
    named = set(re.findall(r"``(?:\w+/)?(test_\w+)``", table))
    files = {
        path.stem
        for folder in ("unit", "contract", "integration", "processes")
        for path in (ROOT / "tests" / folder).glob("test_*.py")
    }
    assert files - named == set(), "test files the module -> tests table does not name"
    assert named - files - {p.stem for p in (ROOT / "tests").rglob("test_*.py")} == set()
