"""Packaging and set-up: what ``make demo`` installs; the sdist and the wheel build
without a warning, pass ``twine check``, and the wheel, installed in a fresh venv,
serves the dashboard with its assets and carries the Django templates."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


# The built package --------------------------------------------------------------------------
SERVE = r"""
import io, sys, sysconfig
from importlib import resources
from pathlib import Path

import mongosched
from mongosched import App
from mongosched.dashboard import StandaloneDashboard

assert Path(mongosched.__file__).is_relative_to(sysconfig.get_paths()["purelib"]), mongosched.__file__
template = resources.files("mongosched.contrib.django").joinpath(
    "templates", "mongosched", "admin", "index.html"
)
assert "{% extends" in template.read_text(), "the Django template"
app = App("memory://")
app.task(name="packaged.hello")(lambda: "hi")
app.schedule("packaged.hello")
wsgi = StandaloneDashboard(app, "t" * 32)


def get(path, **headers):
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
               "SERVER_NAME": "localhost", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
               "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr,
               **{"HTTP_" + k.upper(): v for k, v in headers.items()}}
    status = []
    body = b"".join(wsgi(environ, lambda s, h, *_: status.append(s)))
    return status[0], body


for name in ("dashboard.css", "dashboard.js", "favicon.svg"):
    status, body = get("/static/" + name)
    assert status.startswith("200") and body, (name, status)
status, body = get("/jobs", authorization="Bearer " + "t" * 32)
assert status.startswith("200") and b"packaged.hello" in body, (status, body[:300])
print("served")
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The sdist and wheel built from a copy of the source tree (offline: with this
    environment's setuptools, which the dev extra keeps current), and what the build
    printed."""
    pytest.importorskip("build", reason="the dev extra (make test) installs build")
    source = tmp_path_factory.mktemp("source")
    shutil.copytree(
        ROOT,
        source,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "dist", "_build", "*.egg-info", ".*_cache"
        ),
    )
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout + done.stderr


def test_the_build_warns_of_nothing(built: tuple[Path, str]) -> None:
    out, printed = built
    assert sorted(p.suffix for p in out.iterdir()) == [".gz", ".whl"]
    warnings = [
        line
        for line in printed.splitlines()
        if "warn" in line.lower() and "byte-compiling is disabled" not in line
    ]
    assert not warnings, "\n".join(warnings)
    assert "absent from the `packages` configuration" not in printed


def test_the_distributions_pass_twine_check(built: tuple[Path, str]) -> None:
    pytest.importorskip("twine", reason="the dev extra (make test) installs twine")
    out, _ = built
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, out.iterdir())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_wheel_installed_in_a_fresh_venv_serves_the_dashboard(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    """Installed offline from the local build (no index, no dependencies fetched: the
    venv sees this environment's pymongo, croniter and dateutil through a .pth line,
    after its own site-packages), the package serves a dashboard page and its assets
    and carries the Django template."""
    out, _ = built
    [wheel] = out.glob("*.whl")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "--isolated", "install", "--no-index", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert "warn" not in (install.stdout + install.stderr).lower(), install.stderr
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    here = [p for p in sys.path if p.endswith("site-packages")]
    Path(purelib, "zz_dependencies.pth").write_text("\n".join(here) + "\n")
    served = subprocess.run(
        [str(python), "-c", SERVE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert served.returncode == 0 and served.stdout.strip() == "served", served.stderr
    version = subprocess.run(
        [str(venv / "bin" / "mongosched"), "--version"], capture_output=True, text=True, env=env
    )
    assert version.returncode == 0 and "mongosched" in version.stdout, version.stderr
