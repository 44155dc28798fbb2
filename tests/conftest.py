"""Database fixtures: every store and API test runs on SQLite and on PostgreSQL.

PostgreSQL: a throw-away server (initdb + pg_ctl in a temp dir on a free port, as `postgres` if root);
one fresh database per test. Without the binaries the PostgreSQL cases skip locally and fail in CI
(`CI=true`).
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_SEARCH = ("/usr/lib/postgresql/*/bin",)
_counter = itertools.count()


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    for pattern in PG_SEARCH:
        for directory in sorted(glob.glob(pattern), reverse=True):
            if (Path(directory) / "initdb").exists():
                return Path(directory)
    return None


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """Base URL (without database) of a throw-away PostgreSQL server."""
    pg_bin = _pg_bin()
    if pg_bin is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL binaries (initdb, pg_ctl) are missing in CI")
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not found")
    root = Path(tempfile.mkdtemp(prefix="suanli-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(sockets, "postgres", "postgres")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "check": True}
    subprocess.run(
        _as_postgres([str(pg_bin / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]), **quiet
    )
    options = f"-p {port} -k {sockets} -h 127.0.0.1 -c fsync=off -c max_connections=200"
    log = root / "log"
    subprocess.run(
        _as_postgres([str(pg_bin / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start"]),
        **quiet,
    )
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            _as_postgres([str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'suanli.db'}"
    import psycopg

    base = request.getfixturevalue("postgres_server")
    name = f"t{os.getpid()}_{next(_counter)}"
    with psycopg.connect(base.replace("+psycopg", "") + "/postgres", autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return f"{base}/{name}"
