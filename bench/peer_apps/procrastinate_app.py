"""Procrastinate on PostgreSQL (psycopg 3)."""

from __future__ import annotations

import os

import procrastinate

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_PG_DSN"])
)


@app.task(name="noop")
def noop() -> None:
    return None
