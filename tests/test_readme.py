"""The README's quick start runs as written, in seconds, and does what it says."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.rst"


def quick_start() -> str:
    section = README.read_text().split("Quick start\n-----------")[1]
    block = section.split(".. code-block:: python")[1].split("Operating jobs:")[0]
    return "\n".join(line[4:] for line in block.splitlines())


def test_the_quick_start_runs_and_prints_its_result(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="mongosched"):
        exec(compile(quick_start(), str(README), "exec"), {"__name__": "quickstart"})
    assert capsys.readouterr().out.strip() == "sent reset to 42"
    assert any("(emails.send) completed in" in r.getMessage() for r in caplog.records)
