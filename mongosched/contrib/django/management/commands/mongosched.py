"""``python manage.py mongosched VERB ...``: the ``mongosched`` command for this project.

Every argument goes to the ``mongosched`` command line, run against the project's App
(so no app path or URI is given): ``manage.py mongosched worker --workers 8``,
``manage.py mongosched jobs list --status failed``, ``manage.py mongosched stats``.
``manage.py mongosched VERB --help`` shows a verb's options, with this project's
defaults (``worker --workers``: ``MONGOSCHED["WORKERS"]``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser, DjangoHelpFormatter

from mongosched.cli.parser import EXIT_CODES, VERBS
from mongosched.contrib import run_cli
from mongosched.contrib.django.conf import get_app, options


class HelpFormatter(DjangoHelpFormatter, argparse.RawDescriptionHelpFormatter):  # type: ignore[misc]
    """Django's help, with the list of verbs laid out as written."""


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped here
    help = "Run the mongosched command against this project's App."
    prog = "manage.py mongosched"
    """How this command is called (for the help), as ``create_parser`` is told."""
    from_command_line = False
    """Run by ``manage.py`` as its process's program (not by ``call_command``): then a
    ``memory://`` store, the process's own, is refused."""

    def run_from_argv(self, argv: list[str]) -> None:
        self.from_command_line = True
        super().run_from_argv(argv)

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("formatter_class", HelpFormatter)
        parser: CommandParser = super().create_parser(prog_name, subcommand, **kwargs)
        self.prog = f"{prog_name or 'manage.py'} {subcommand}"  # call_command: ""
        width = max(map(len, VERBS))
        verbs = "\n".join(f"  {name:<{width}}  {text}" for name, text in VERBS.items())
        parser.epilog = (
            f"verbs ('{self.prog} VERB --help' shows a verb's options):\n{verbs}\n"
            f"worker --workers defaults to MONGOSCHED['WORKERS'] ({options()['WORKERS']})."
            f"\n\n{EXIT_CODES}"
        )
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "args", nargs=argparse.REMAINDER, metavar="VERB ...", help="mongosched arguments"
        )

    def handle(self, *args: str, **flags: Any) -> None:
        out = getattr(self.stdout, "_out", sys.stdout)  # honour call_command(stdout=...)
        err = getattr(self.stderr, "_out", sys.stderr)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_cli(
                args,
                get_app(),
                prog=self.prog,
                workers=options()["WORKERS"],
                own_process=self.from_command_line,
            )
        if code:
            raise SystemExit(code)
