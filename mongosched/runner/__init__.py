"""The runner: what claims and runs jobs in a process. Its threads and what each
owns are listed in :mod:`mongosched.runner.runner`."""
