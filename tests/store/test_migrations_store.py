"""Schema migrations on a database in use (SQLite and PostgreSQL): a downgrade, and the upgrade after it, keep
the rentals and the rows that reference them; on SQLite both run with foreign keys off and checked after."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from conftest import T0, with_example_fleet
from suanli.app.fleet import FleetCache
from suanli.app.records import Rental, RentalSpec
from suanli.app.scheduling import Scheduler
from suanli.domain.catalog_data import CATALOG
from suanli.domain.queue_order import GREEDY_QUEUE
from suanli.store.db import (
    MIGRATIONS,
    ForeignKeyViolation,
    downgrade,
    make_engine,
    migrate,
    unit_of_work_factory,
)

FIRST_REVISION = "0001"
# the tables of the first revision, which every downgrade keeps, and the rows a placed rental has in them
KEPT_TABLES = ("tenants", "rentals", "allocations", "slices", "rental_events", "bookings")


class FixedClock:
    def now(self):
        return T0


def previous_revision() -> str:
    """The revision just before the newest one: one release rolled back."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    scripts = ScriptDirectory.from_config(config)
    return str(scripts.get_revision(scripts.get_current_head()).down_revision)


def in_use(database_url: str) -> Engine:
    """A migrated database with the example fleet and two rentals the scheduler placed (allocations, slices,
    events), one of them running."""
    engine = make_engine(database_url)
    migrate(engine)
    factory = unit_of_work_factory(engine)
    with_example_fleet(factory)
    with factory() as u:
        for rental_id, model in (("rnt_h100", "H100-SXM-80GB"), ("rnt_l40s", "L40S")):
            u.rentals.add(Rental(rental_id, "ten_a", "pending", RentalSpec(gpu_model=model, gpus=1), T0))
        u.commit()
    scheduler = Scheduler(
        factory, FixedClock(), CATALOG, FleetCache(CATALOG), "suanli", 0, queue=GREEDY_QUEUE
    )
    assert scheduler.run_cycle().placed == 2
    with factory() as u:
        assert u.rentals.set_state("rnt_h100", "running", expect=("placed",), reason=None)
        u.commit()
    return engine


def row_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {
            table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar() for table in KEPT_TABLES
        }


@pytest.mark.parametrize("down_to", ["previous", FIRST_REVISION], ids=["one_step", "all_the_way"])
def test_a_database_holding_rentals_goes_down_and_up_again_with_its_rows(
    database_url: str, down_to: str
) -> None:
    """On SQLite a downgrade rebuilt `rentals` with foreign keys on, and `DROP TABLE rentals` failed with the
    rows of `allocations` and `rental_events` referencing it."""
    engine = in_use(database_url)
    before = row_counts(engine)
    assert all(before.values()), before
    downgrade(engine, previous_revision() if down_to == "previous" else down_to)
    migrate(engine)
    assert row_counts(engine) == before
    with unit_of_work_factory(engine)() as u:
        assert u.rentals.get("rnt_h100").state == "running"
        assert [a.node for a in u.rentals.allocation("rnt_l40s")]
        assert [e.kind for e in u.rentals.events("rnt_h100")] == ["placed"]
    if engine.dialect.name == "sqlite":  # the pool's connections enforce foreign keys again
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_a_migration_that_leaves_rows_referencing_nothing_is_rolled_back(tmp_path: Path) -> None:
    """SQLite checks no foreign key while a migration runs: `PRAGMA foreign_key_check` does it before the
    commit, and a violation rolls the migration back."""
    database = tmp_path / "db.sqlite"
    engine = in_use(f"sqlite:///{database}")
    previous = previous_revision()
    downgrade(engine, previous)
    engine.dispose()
    with sqlite3.connect(database) as raw:  # foreign keys are off on a plain connection
        raw.execute("UPDATE rental_events SET rental_id = 'rnt_gone' WHERE rental_id = 'rnt_l40s'")
    with pytest.raises(ForeignKeyViolation, match="rental_events -> rentals"):
        migrate(engine)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == previous
    engine.dispose()


def test_rentals_already_there_count_as_changed_when_updated_at_came(database_url: str) -> None:
    """0054 added `rentals.updated_at` unfilled: a rental created before it and unchanged since was missing
    from `updated_after=` any moment, though it had changed (been created) after that moment."""
    engine = in_use(database_url)
    downgrade(engine, "0053")
    before_migration = datetime.now(UTC) - timedelta(seconds=1)
    migrate(engine)
    after_migration = datetime.now(UTC) + timedelta(seconds=1)
    with unit_of_work_factory(engine)() as u:
        changed = {r.id for r in u.rentals.list(None, 100, updated_after=before_migration)}
        tenants_changed = {r.id for r in u.rentals.list("ten_a", 100, updated_after=before_migration)}
        later = u.rentals.list(None, 100, updated_after=after_migration)
    assert changed == tenants_changed == {"rnt_h100", "rnt_l40s"}
    assert later == []
    engine.dispose()
