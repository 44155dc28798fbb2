"""Engines and migrations. SQLite: WAL, foreign keys on, every transaction `BEGIN IMMEDIATE` (one writer, no
deadlocking read-to-write upgrades). PostgreSQL through psycopg 3 (`postgresql+psycopg://`). `migrate` runs
Alembic `upgrade head` and `downgrade` takes the schema back (under an advisory lock on PostgreSQL, so
concurrent starts take turns); on SQLite both run with foreign keys off, as Alembic's batch mode requires,
and check them before they commit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

from suanli.store.repositories import SqlUnitOfWork

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
MIGRATION_LOCK = 0x5A4C_0001


def normalize_url(url: str) -> str:
    """`postgresql://` and `postgres://` mean psycopg 3 here."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(connection: Any) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_size=20, max_overflow=40, pool_pre_ping=True)


class ForeignKeyViolation(RuntimeError):
    """A migration left rows whose foreign keys name nothing: it is rolled back."""


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to the newest revision (or to `revision`)."""
    _run_alembic(engine, lambda config: command.upgrade(config, revision))


def downgrade(engine: Engine, revision: str) -> None:
    """Take the schema back to `revision`, as an operator rolling back a release does."""
    _run_alembic(engine, lambda config: command.downgrade(config, revision))


def _run_alembic(engine: Engine, run: Callable[[Config], None]) -> None:
    """`run` Alembic on one connection in one transaction: under the migration lock on PostgreSQL; on SQLite
    with foreign keys off (a batch rebuild drops and recreates a table that other rows reference, which
    SQLite refuses, or cascades, with them on) and checked before the commit."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.connect() as connection, _sqlite_foreign_keys_off(connection), connection.begin():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        config.attributes["connection"] = connection
        run(config)
        if connection.dialect.name == "sqlite":
            _check_foreign_keys(connection)


@contextmanager
def _sqlite_foreign_keys_off(connection: Connection) -> Iterator[None]:
    """Foreign keys off on this SQLite connection while the block runs (set before its transaction begins:
    inside one, SQLite ignores the pragma), on again after; nothing on other databases."""
    if connection.dialect.name != "sqlite":
        yield
        return
    driver = connection.connection.driver_connection
    driver.execute("PRAGMA foreign_keys=OFF")
    try:
        yield
    finally:
        driver.execute("PRAGMA foreign_keys=ON")


def _check_foreign_keys(connection: Connection) -> None:
    """Raise if any row's foreign key names nothing (`PRAGMA foreign_key_check`), naming the tables."""
    violations = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
    if violations:
        where = sorted({f"{table} -> {parent}" for table, _rowid, parent, _key in violations})
        raise ForeignKeyViolation(f"{len(violations)} rows reference nothing after the migration: {where}")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def unit_of_work_factory(engine: Engine) -> Any:
    sessions = session_factory(engine)
    return lambda: SqlUnitOfWork(sessions)
