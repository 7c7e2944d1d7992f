"""``python -m mongosched``: the ``mongosched`` command."""

from __future__ import annotations

import sys

from mongosched.cli import main

if __name__ == "__main__":
    sys.exit(main())
