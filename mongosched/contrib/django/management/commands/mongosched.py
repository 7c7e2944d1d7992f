"""``python manage.py mongosched VERB ...``: the ``mongosched`` command for this project.

Every argument goes to the ``mongosched`` command line, run against the project's App
(so no app path or URI is given): ``manage.py mongosched worker --workers 8``,
``manage.py mongosched jobs list --status failed``, ``manage.py mongosched stats``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from mongosched.contrib import cli_arguments, run_cli
from mongosched.contrib.django.conf import get_app, options


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped here
    help = (
        "Run the mongosched command against this project's App: worker, jobs "
        "list|show|cancel|retry|purge, schedules, stats. "
        "'manage.py mongosched VERB --help' shows a verb's options."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "args", nargs=argparse.REMAINDER, metavar="VERB ...", help="mongosched arguments"
        )

    def handle(self, *args: str, **flags: Any) -> None:
        argv = cli_arguments(args, workers=options()["WORKERS"])
        out = getattr(self.stdout, "_out", sys.stdout)  # honour call_command(stdout=...)
        err = getattr(self.stderr, "_out", sys.stderr)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_cli(argv, get_app())
        if code:
            raise SystemExit(code)
