"""A throw-away PostgreSQL server for tests and benchmarks: initdb + pg_ctl in a temporary directory.

`throwaway_postgres()` yields the base URL (`postgresql+psycopg://postgres@127.0.0.1:PORT`, no database);
`create_database(base, name)` makes a fresh database and returns its URL. Runs the server as `postgres` when
called as root (PostgreSQL refuses to run as root). Finds the binaries on PATH or under
/usr/lib/postgresql/*/bin (Debian's packages).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

PG_SEARCH = ("/usr/lib/postgresql/*/bin",)


def pg_bin() -> Path | None:
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


@contextmanager
def throwaway_postgres(binaries: Path, *, max_connections: int = 200) -> Iterator[str]:
    """Start a server on a free port (fsync off: its data is thrown away), stop it and delete it after."""
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
    try:
        subprocess.run(
            _as_postgres([str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
            **quiet,
        )
        options = f"-p {port} -k {sockets} -h 127.0.0.1 -c fsync=off -c max_connections={max_connections}"
        log = root / "log"
        subprocess.run(
            _as_postgres(
                [str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start"]
            ),
            **quiet,
        )
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            _as_postgres([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)


def create_database(base_url: str, name: str) -> str:
    """CREATE DATABASE `name` on the server at `base_url`; the new database's URL."""
    with psycopg.connect(base_url.replace("+psycopg", "") + "/postgres", autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return f"{base_url}/{name}"
