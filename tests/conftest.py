"""Database fixtures: every store and API test runs on SQLite and on PostgreSQL.

PostgreSQL: a throw-away server (initdb + pg_ctl in a temp dir on a free port, as `postgres` if root);
one fresh database per test. Without the binaries the PostgreSQL cases skip locally and fail in CI
(`CI=true`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from suanli.store.throwaway_pg import create_database, pg_bin, throwaway_postgres

_counter = itertools.count()


@pytest.fixture(autouse=True)
def _postpaid_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers built by tests (in process or as subprocesses) do not enforce prepaid balances unless a test
    passes `prepaid=True` (tests/api/test_billing_api.py does)."""
    monkeypatch.setenv("SUANLI_PREPAID", "false")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """Base URL (without database) of a throw-away PostgreSQL server."""
    binaries = pg_bin()
    if binaries is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL binaries (initdb, pg_ctl) are missing in CI")
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not found")
    with throwaway_postgres(binaries) as base_url:
        yield base_url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'suanli.db'}"
    base = request.getfixturevalue("postgres_server")
    return create_database(base, f"t{os.getpid()}_{next(_counter)}")
