"""SecantusDB, a MongoDB-compatible server, run as a separate process for the tests.

SecantusDB (WiredTiger storage, transactions, change streams, TTL indexes, fail points)
is GPL-2.0-only. It lives in a virtual environment of its own, ``.venv-server`` (``make
.venv-server``), is started here as a process and is spoken to only with pymongo, as
any MongoDB server would be. Nothing in the library or its tests imports it.

:class:`RealServer` starts ``secantusd-py`` on a free port of 127.0.0.1 with its
storage in a directory of its own and waits until it answers ``hello``. It can be
stopped, or killed with SIGKILL, and started again on the same port and storage (its
WiredTiger journal recovers every acknowledged write). The session fixture
``real_server`` (tests/conftest.py) is one such server for the whole run; each test
works in a database of its own. The API, for tests that inject faults:

* ``server.uri``: ``mongodb://127.0.0.1:PORT/?directConnection=true``;
* ``server.client(**options)``: a new pymongo client of it (close it when done);
* ``server.kill()``, ``server.stop()``, ``server.restart()`` (``start()`` after either);
* :func:`configure_fail_point` ``(client, mode, data)``: its ``failCommand`` fail point,
  as MongoDB's ``configureFailPoint`` (the server runs with ``--enable-test-commands``).

Where the server is: ``MONGOSCHED_TEST_SERVER_BIN`` (the ``secantusd-py`` to run), else
``.venv-server/bin/secantusd-py`` in this repository. Without it the tests that need it
skip, saying to run ``make .venv-server``; in CI (``CI=true`` or
``MONGOSCHED_REQUIRE_SERVER=1``) they fail instead.

Where this server differs from MongoDB, a test in tests/meta/test_realserver.py pins it, and
the test support works around it (never the library):

* its TTL monitor sweeps every 60 s whatever its configuration says: secantusd-py
  0.7.0b3 reads ``[storage] ttl_sweep_seconds`` from its configuration file and does
  not apply it. A test waiting for a TTL deletion calls :func:`sweep_ttl`, which runs
  the monitor's sweep at once (``secantusAdmin.pruneTtl``);
* it acknowledges a ``w: "majority"`` write before the write is in its journal: killed
  at once after the reply, it comes back without the write (MongoDB's majority implies
  the journal). The test servers run with ``--sync-on-commit`` (each commit is in the
  journal before the reply), so a crash loses only what was never acknowledged;
* its query planner chooses a collection scan for the claim's ``findAndModify`` where
  MongoDB's uses the claim index: the query plan tests run on a real MongoDB only. A
  ``hint`` naming the claim index does not help: this server then reads every entry of
  the index (each status, each due time) and decodes its document, slower than its
  scan (docs/performance.rst), so the library sends none;
* it aborts a transaction idle past its lifetime (60 s, as MongoDB's
  ``transactionLifetimeLimitSeconds``) only when a transaction's statement reaches it,
  where MongoDB sweeps them in the background: a killed client's open transaction
  blocks the writes to what it wrote for good if no transaction follows. A test that
  kills a process inside a transaction runs :func:`sweeping_transactions`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pymongo

__all__ = [
    "BIN_ENV",
    "CACHE_SIZE",
    "RealServer",
    "configure_fail_point",
    "missing",
    "required",
    "server_binary",
    "sweep_ttl",
    "sweeping_transactions",
]

ROOT = Path(__file__).resolve().parents[2]
BIN_ENV = "MONGOSCHED_TEST_SERVER_BIN"
MAKE_IT = "make .venv-server"
# WiredTiger's cache, an upper bound (not allocated up front). 256M filled under the
# 100,000-job backlog of the contract suite (WT_CACHE_FULL, every later test failing).
CACHE_SIZE = "1G"
# The TTL monitor's interval, for when the server applies it (see the module docstring).
CONFIG = "[storage]\nttl_sweep_seconds = 1\n"
_PR_SET_PDEATHSIG = 1


def server_binary() -> Path:
    """The ``secantusd-py`` to run: ``$MONGOSCHED_TEST_SERVER_BIN``, else the one in
    this repository's ``.venv-server``."""
    configured = os.environ.get(BIN_ENV)
    return Path(configured) if configured else ROOT / ".venv-server" / "bin" / "secantusd-py"


def missing() -> str | None:
    """Why the server cannot be started here, or None when it can."""
    binary = server_binary()
    if os.access(binary, os.X_OK):
        return None
    if os.environ.get(BIN_ENV):
        return f"{BIN_ENV}={binary} is not an executable file"
    return f"SecantusDB is not installed ({binary} missing): run `{MAKE_IT}`"


def required() -> bool:
    """In CI a missing server fails the tests that need it, never skips them."""
    return (
        os.environ.get("CI", "").lower() == "true"
        or os.environ.get("MONGOSCHED_REQUIRE_SERVER") == "1"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> Any:
    """A ``preexec_fn`` that has the kernel kill the server when the thread that
    started it ends (its process dying, even by SIGKILL), so no server outlives its
    test run. Start servers from a thread that lives as long as they should."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the fixtures' finalizers still stop it
        return None
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class RealServer:
    """One ``secantusd-py`` process, its port and its storage directory."""

    def __init__(
        self,
        storage: Path | None = None,
        *,
        port: int | None = None,
        cache_size: str = CACHE_SIZE,
        log_level: str = "WARNING",
        sync_on_commit: bool = True,
        binary: Path | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self._owns_storage = storage is None
        if storage is None:
            storage = Path(tempfile.mkdtemp(prefix="mongosched-server-"))
        storage.mkdir(parents=True, exist_ok=True)
        self.storage = storage
        """Its directory: the WiredTiger files in ``data``, its log, its configuration."""
        self.port = port or _free_port()
        self.binary = binary or server_binary()
        self.log_path = storage / "server.log"
        self._config = storage / "secantusd.toml"
        self._config.write_text(CONFIG)
        self._args = [
            str(self.binary),
            "--config", str(self._config),  # and no configuration found elsewhere
            "--host", host,  # 0.0.0.0: also reachable from another network namespace
            "--port", str(self.port),
            "--storage-path", str(self.storage / "data"),
            "--cache-size", cache_size,
            "--log-level", log_level,
            "--enable-test-commands",
            *(["--sync-on-commit"] if sync_on_commit else []),
        ]  # fmt: skip
        self._proc: subprocess.Popen[bytes] | None = None

    # Life cycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> RealServer:
        """Start the server (again, after :meth:`stop` or :meth:`kill`: same port, same
        storage) and wait until it answers ``hello``."""
        if self.running:
            raise RuntimeError("the server is already running")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self._args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_die_with_parent(),
            )
        self._wait_until_it_answers(timeout)
        return self

    def _wait_until_it_answers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(
                        f"the server did not listen in {timeout} s{self._tail()}"
                    ) from None
                time.sleep(0.05)
        left = max(1.0, deadline - time.monotonic())
        client = self.client(serverSelectionTimeoutMS=int(left * 1000))
        try:
            client.admin.command("hello")
        finally:
            client.close()

    def _check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            code = self._proc.returncode
            self._proc = None
            raise RuntimeError(f"the server exited with status {code}{self._tail()}")

    def _tail(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return f"; its log ({self.log_path}) ends:\n{text[-3000:]}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    def kill(self) -> None:
        """SIGKILL: the server dies at once, as in a crash; what it acknowledged is in
        its journal. Returns once the process is gone (its storage is free again)."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM: a clean shutdown (SIGKILL if it takes longer than ``timeout``)."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
            self.kill()

    def restart(self, timeout: float = 60.0) -> RealServer:
        """Start it again on its port and storage, stopping it first if it runs."""
        self.stop()
        return self.start(timeout)

    def close(self) -> None:
        """Stop it; remove its storage if this object made the directory (killing it
        then: nothing of it is kept)."""
        if self._owns_storage:
            self.kill()
            shutil.rmtree(self.storage, ignore_errors=True)
        else:
            self.stop()

    def __enter__(self) -> RealServer:
        return self if self.running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Speaking to it -----------------------------------------------------------------------
    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def client(self, **options: Any) -> pymongo.MongoClient[dict[str, Any]]:
        """A new pymongo client of this server (tz-aware; close it when done)."""
        options.setdefault("serverSelectionTimeoutMS", 10_000)
        return pymongo.MongoClient(self.uri, tz_aware=True, **options)


def configure_fail_point(
    client: pymongo.MongoClient[Any],
    mode: str | Mapping[str, int],
    data: Mapping[str, Any] | None = None,
) -> None:
    """Set the server's ``failCommand`` fail point, as MongoDB's ``configureFailPoint``:
    ``mode`` is ``"alwaysOn"``, ``"off"``, ``{"times": n}`` or ``{"skip": n}``;
    ``data`` names ``failCommands`` and what happens to them (``errorCode``,
    ``closeConnection``, ``errorLabels``, ``writeConcernError``, ``blockConnection``
    with ``blockTimeMS``)."""
    command: dict[str, Any] = {"configureFailPoint": "failCommand", "mode": mode}
    if data is not None:
        command["data"] = dict(data)
    client.admin.command(command)


def sweep_ttl(client: pymongo.MongoClient[Any]) -> int:
    """Run the server's TTL sweep now (what its monitor does each interval); the number
    of documents it deleted. See the module docstring for why tests need it."""
    return int(client.admin.command("secantusAdmin.pruneTtl")["pruned"])


def sweep_transactions(client: pymongo.MongoClient[Any]) -> None:
    """Send the server a transaction's statement, so that it aborts the transactions
    idle past their lifetime (see the module docstring)."""
    with client.start_session() as session, session.start_transaction():
        client.get_database("sweep").get_collection("sweep").find_one({}, session=session)


@contextlib.contextmanager
def sweeping_transactions(uri: str, every: float = 2.0) -> Iterator[None]:
    """While the block runs, sweep the server's transactions every ``every`` seconds
    (:func:`sweep_transactions`), as MongoDB's background sweep does."""
    stop = threading.Event()
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)

    def sweep() -> None:
        while not stop.wait(every):
            with contextlib.suppress(pymongo.errors.PyMongoError):
                sweep_transactions(client)

    thread = threading.Thread(target=sweep, name="transaction sweeper", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        client.close()


@contextlib.contextmanager
def session_server(base: Path) -> Iterator[RealServer]:
    """The server of a test session, its storage under ``base``; stopped at the end,
    however the session ends. Skips (fails in CI) where the server is not installed."""
    import pytest

    reason = missing()
    if reason is not None:
        if required():
            pytest.fail(f"{reason} (required in CI)", pytrace=False)
        pytest.skip(reason)
    server = RealServer(base / "server")
    try:
        server.start()
        yield server
    finally:
        server.kill()  # nothing of it is kept but its log
        shutil.rmtree(server.storage / "data", ignore_errors=True)
