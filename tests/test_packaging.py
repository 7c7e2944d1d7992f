"""Packaging and set-up: what ``make demo`` installs."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_dry_run(target: str) -> str:
    """The commands ``make TARGET`` runs from scratch (printed, not run)."""
    done = subprocess.run(
        ["make", "--always-make", "--dry-run", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_demo_installs_only_the_package_quietly() -> None:
    commands = make_dry_run("demo")
    installs = [line for line in commands.splitlines() if "pip install" in line]
    assert installs, commands
    for line in installs:
        assert "--quiet" in line, line
        assert "[" not in line, line  # no extra: not the dev toolchain
    assert "examples/demo.py" in commands


def test_make_test_installs_the_dev_extra() -> None:
    assert "-e '.[dev]'" in make_dry_run("lint")
