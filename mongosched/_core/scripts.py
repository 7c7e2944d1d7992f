"""The names of tasks defined in a script run as ``__main__`` (``python hello.py``),
and what to say when a runner that imports the same file knows them by another name."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["SCRIPT_PREFIX", "script_task_explanation", "script_task_warning"]


SCRIPT_PREFIX = "__main__."
"""How the default name of a task defined in a script run as ``python hello.py`` starts."""


def _name_it(task: str) -> str:
    function = task.removeprefix(SCRIPT_PREFIX)
    return (
        f"give the task a name that does not depend on how its file is run, "
        f"@app.task(name={function!r}), or define it in a module that the script imports"
    )


def script_task_warning(task: str) -> str:
    """What to say when a task without ``name=`` is registered from ``__main__``: a
    runner importing the same file registers it under the file's module name."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    file = getattr(main, "__file__", None)
    if spec is not None and spec.name:
        module = spec.name.removesuffix(".__main__")
    elif file:
        module = Path(file).stem
    else:
        module = "its module"
    known_as = f"{module}.{task.removeprefix(SCRIPT_PREFIX)}"
    return (
        f"task {task!r} is registered from the script run as __main__: a runner that "
        f"imports it knows the task as {known_as!r} and never runs the jobs this process "
        f"schedules; {_name_it(task)}"
    )


def script_task_explanation(task: str, known: Iterable[str]) -> str:
    """What a runner says about due jobs of a ``__main__.*`` task it does not know."""
    suffix = "." + task.removeprefix(SCRIPT_PREFIX)
    alike = sorted(name for name in known if name.endswith(suffix))
    knows = f"this process knows it as {alike[0]!r}" if alike else "this process has no such task"
    return (
        f"due jobs of task {task!r} wait: they were scheduled from a script run as "
        f"__main__ (python file.py), where a task's default name starts with __main__, "
        f"and {knows}; {_name_it(task)}"
    )
