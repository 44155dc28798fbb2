"""The real server as a child process on PostgreSQL, for end-to-end tests that SIGKILL and restart it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
import psycopg
import pytest

SUANLI = [sys.executable, "-m", "suanli.cli.main"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def new_database(postgres_server: str, prefix: str) -> str:
    """A fresh, empty database on the throw-away server; its URL."""
    name = f"{prefix}{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(postgres_server.replace("+psycopg", "") + "/postgres", autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{name}"')
    return f"{postgres_server}/{name}"


class ServerProcess:
    """`suanli server` on a free port with `SUANLI_*` settings from `env` (and more command-line `args`);
    its output goes to `log`."""

    def __init__(
        self, database_url: str, log: Path, admin_key: str, env: Mapping[str, str], args: tuple[str, ...] = ()
    ) -> None:
        self.database_url, self.log_path, self.port = database_url, log, free_port()
        self.admin_key, self.env, self.args = admin_key, dict(env), args
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30) -> None:
        env = {
            **os.environ,
            "SUANLI_DATABASE_URL": self.database_url,
            "SUANLI_BOOTSTRAP_ADMIN_KEY": self.admin_key,
            "SUANLI_API_RATE": "",  # these load the server from one tenant on purpose (crashes, workers)
            **self.env,
        }
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*SUANLI, "server", "--port", str(self.port), *self.args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        pytest.fail(f"server did not start: {self.log_tail()}")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self) -> str:
        return self.log_path.read_text()[-3000:]

    def kill9(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
