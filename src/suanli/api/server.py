"""`serve(host, port, workers)`: run the API with uvicorn (the `suanli server` command calls this).

One worker: the app in this process. Several (PostgreSQL only): uvicorn's worker processes, each building the
app from the environment's settings. The schema is migrated and the admin bootstrapped once, here, before
they start; they share the scheduler through the database's leader lock, wake its loops with NOTIFY
(`store/wakeups.py`), and share Prometheus metrics through a directory (`PROMETHEUS_MULTIPROC_DIR`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import uvicorn
from fastapi import FastAPI
from pydantic import ValidationError
from pydantic_settings import SettingsError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from uvicorn.supervisors import Multiprocess

from suanli.api.app import create_app
from suanli.app.ids import SystemClock
from suanli.app.tenants import TenantService
from suanli.config import Settings
from suanli.store.db import make_engine, migrate, normalize_url, unit_of_work_factory
from suanli.wire.schemas import problem_text

# How long uvicorn's supervisor waits for a worker to answer its health check before it kills it and starts
# another. Its default, 5 s, is shorter than a worker's start on a loaded machine: a spawned worker answers
# only once it has imported this module (and with it the whole app), ~2.5 s of CPU, and a worker starved of
# CPU took longer; each was killed as hung and replaced by one that fared no better, and the server never
# came up. A worker that really hangs is replaced this much later.
WORKER_HEALTHCHECK_S = 30
# Allocations between young-generation collections (CPython's default: 700). A server process holds a large
# long-lived heap (the fleet, the leader's snapshot, caches); at the default, requests set off a full
# collection every second or two under load, each 75-114 ms of a held GIL on `python -m suanli.api.bench`
# (1,250 nodes, 3,000 rentals), which every request in flight then waits out.
GC_YOUNG_THRESHOLD = 50_000


class WorkersNeedPostgres(ValueError):
    """More than one worker process on SQLite, which has one server process."""


class BadSettings(ValueError):
    """`SUANLI_*` values the settings refuse: `problems` has one line per variable, naming it."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class DatabaseUnreachable(ConnectionError):
    """The database of SUANLI_DATABASE_URL could not be opened (down, unknown host, refused, no such dir)."""


def settings_from_environment() -> Settings:
    """The settings from `SUANLI_*`, or `BadSettings` naming each variable whose value is refused."""
    try:
        return Settings()
    except ValidationError as error:
        raise BadSettings([_setting_problem(problem) for problem in error.errors()]) from None
    except SettingsError as error:  # a value pydantic-settings could not even decode
        raise BadSettings([str(error)]) from None


def _setting_problem(problem: Mapping[str, Any]) -> str:
    """`SUANLI_NAME: what is wrong`, for one pydantic error of `Settings`."""
    location = problem["loc"]
    prefix = Settings.model_config.get("env_prefix", "")
    variable = f"{prefix}{location[0]}".upper() if location else "settings"
    return f"{variable}: {problem_text(problem)}"


@contextlib.contextmanager
def database_reachable(url: str) -> Iterator[None]:
    """Turn a failure to connect to the database while starting into `DatabaseUnreachable`, in one line."""
    try:
        yield
    except OperationalError as error:
        reason = str(error.orig or error).strip().splitlines()[0]
        where = make_url(url).render_as_string(hide_password=True)
        raise DatabaseUnreachable(
            f"SUANLI_DATABASE_URL: cannot reach the database at {where} ({reason})"
        ) from None


def tune_gc() -> None:
    """Collect garbage less often in a server process (`GC_YOUNG_THRESHOLD`); the older generations keep
    CPython's ratios."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def serve(host: str, port: int, settings: Settings | None = None, workers: int = 1) -> None:
    """Serve the API; `BadSettings`, `WorkersNeedPostgres` or `DatabaseUnreachable` before listening."""
    settings = settings or settings_from_environment()
    # no per-request access log: it costs a large share of a small request's time; errors still log
    if workers == 1:
        tune_gc()
        with database_reachable(settings.database_url):
            app = create_app(settings)
        uvicorn.run(app, host=host, port=port, log_level="info", access_log=False)
        return
    if not normalize_url(settings.database_url).startswith("postgresql"):
        raise WorkersNeedPostgres(
            f"{workers} worker processes need PostgreSQL (SUANLI_DATABASE_URL); SQLite has one server process"
        )
    with database_reachable(settings.database_url):
        prepare(settings)
    with contextlib.ExitStack() as stack:
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # the workers' metrics files, gone at exit
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="suanli-metrics-")
            )
        config = TcpConfig(
            "suanli.api.server:app_from_environment",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
            log_level="info",
            access_log=False,
        )
        Multiprocess(config, sockets=[config.bind_socket()]).run()


class TcpConfig(uvicorn.Config):
    """uvicorn's settings, with a listening socket that says it is TCP.

    uvicorn binds the workers' shared socket with protocol 0; asyncio then leaves Nagle's algorithm on for
    the connections it accepts (it sets TCP_NODELAY only on sockets whose protocol is TCP), and every small
    response waits ~40 ms for the client's delayed ACK. The same socket, labelled TCP, gets TCP_NODELAY.
    """

    def bind_socket(self) -> socket.socket:
        sock = super().bind_socket()
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return sock
        tcp = socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())
        tcp.set_inheritable(True)
        return tcp


def prepare(settings: Settings) -> None:
    """Migrate the schema and make the bootstrap admin once, before worker processes start side by side."""
    engine = make_engine(settings.database_url)
    try:
        migrate(engine)
        TenantService(unit_of_work_factory(engine), SystemClock()).bootstrap(settings.bootstrap_admin_key)
    finally:
        engine.dispose()


def app_from_environment() -> FastAPI:
    """One worker's app (uvicorn's factory): settings from `SUANLI_*` as the parent process had them."""
    tune_gc()
    return create_app(Settings())
