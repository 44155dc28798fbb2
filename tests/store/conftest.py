"""Store-test fixtures: a migrated database (SQLite and PostgreSQL) and a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from suanli.app.agents import AgentService
from suanli.app.fleet import FleetCache
from suanli.app.records import Tenant
from suanli.domain.catalog_data import CATALOG
from suanli.store.agent_repositories import SqlAgentUnitOfWork
from suanli.store.db import make_engine, migrate, session_factory, unit_of_work_factory

T0 = datetime(2030, 1, 1, tzinfo=UTC)
EXAMPLE_FLEET = (Path(__file__).resolve().parents[2] / "examples" / "fleet.toml").read_text()


class SettableClock:
    """Now is `at` (T0 until a test sets it)."""

    def __init__(self) -> None:
        self.at = T0

    def now(self) -> datetime:
        return self.at


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock()


@pytest.fixture
def store(database_url: str) -> Iterator[tuple[Engine, Any]]:
    """(engine, unit-of-work factory) on a freshly migrated database; disposed afterwards."""
    engine = make_engine(database_url)
    migrate(engine)
    yield engine, unit_of_work_factory(engine)
    engine.dispose()


def with_example_fleet(uow: Any, tenants: tuple[str, ...] = ("ten_a", "ten_b")) -> None:
    """Store the example fleet and these tenants (each named as its id), as of T0: what a leader's cycles
    run against."""
    with uow() as u:
        for tenant in tenants:
            u.tenants.add(Tenant(tenant, tenant, "tenant", T0))
        u.fleet.put(EXAMPLE_FLEET, [], T0)
        u.commit()


def agent_service(engine: Engine, clock: Any) -> AgentService:
    """The agents' service on `engine`: heartbeats 10 s apart, a node down after 3 missed (30 s)."""
    sessions = session_factory(engine)
    return AgentService(
        lambda: SqlAgentUnitOfWork(sessions),
        clock,
        lambda *, ended=False: None,
        FleetCache(CATALOG),
        heartbeat_interval_s=10,
        missed_heartbeats=3,
        token_ttl_s=600,
    )
