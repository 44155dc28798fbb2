"""Rental names in the store (SQLite and PostgreSQL): the list filtered by name, a tenant's own only, and
migration 0028, which gives the rentals named before it their name column from their spec."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy import Engine, text

from conftest import T0
from suanli.app.ports import UnitOfWorkFactory
from suanli.app.records import Rental, RentalSpec, Tenant
from suanli.store.db import downgrade, make_engine, migrate, unit_of_work_factory


def _named(
    database_url: str, rentals: Sequence[tuple[str, str, str | None]]
) -> tuple[Engine, UnitOfWorkFactory]:
    """A migrated store with tenants ten_a and ten_b and pending rentals (id, tenant, name or None)."""
    engine = make_engine(database_url)
    migrate(engine)
    factory = unit_of_work_factory(engine)
    with factory() as u:
        for tenant in ("ten_a", "ten_b"):
            u.tenants.add(Tenant(tenant, tenant, "tenant", T0))
        spec = RentalSpec(gpu_model="H100", gpus=1)
        for rental_id, tenant, name in rentals:
            u.rentals.add(Rental(rental_id, tenant, "pending", replace(spec, name=name), T0))
        u.commit()
    return engine, factory


def test_the_list_of_a_name_holds_the_tenants_rentals_of_that_name_only(database_url: str) -> None:
    engine, factory = _named(
        database_url,
        (
            ("rnt_1", "ten_a", "sft"),
            ("rnt_2", "ten_a", "eval"),
            ("rnt_3", "ten_b", "sft"),
            ("rnt_4", "ten_a", None),
        ),
    )
    with factory() as u:
        assert [r.id for r in u.rentals.list("ten_a", 100, (), "sft")] == ["rnt_1"]
        assert sorted(r.id for r in u.rentals.list(None, 100, (), "sft")) == ["rnt_1", "rnt_3"]  # an admin's
        assert u.rentals.list("ten_a", 100, ("running",), "sft") == []
        assert len(u.rentals.list("ten_a", 100)) == 3
        # a resize rewrites the spec; the name stays
        resized = u.rentals.get("rnt_1")
        u.rentals.update_spec("rnt_1", replace(resized, spec=replace(resized.spec, gpus=2)))
        u.commit()
    with factory() as u:
        (found,) = u.rentals.list("ten_a", 100, (), "sft")
        assert found.spec.gpus == 2 and found.spec.name == "sft"
    engine.dispose()


def test_a_name_ending_in_a_star_lists_the_names_starting_so(database_url: str) -> None:
    """`sweep_a*`: a prefix, in which `_` is the character itself (not LIKE's any-one-character)."""
    engine, factory = _named(
        database_url,
        (
            ("rnt_1", "ten_a", "sweep_a-1"),
            ("rnt_2", "ten_a", "sweep_a-2"),
            ("rnt_3", "ten_a", "sweepXa-3"),  # `_` as a wildcard would match it
            ("rnt_4", "ten_a", "sweep"),
            ("rnt_5", "ten_b", "sweep_a-1"),
        ),
    )
    with factory() as u:
        assert sorted(r.id for r in u.rentals.list("ten_a", 100, (), "sweep_a*")) == ["rnt_1", "rnt_2"]
        assert sorted(r.id for r in u.rentals.list("ten_a", 100, (), "sweep*")) == [
            "rnt_1",
            "rnt_2",
            "rnt_3",
            "rnt_4",
        ]
        assert u.rentals.list("ten_a", 100, (), "sweep_a") == []  # without the star: exactly
        assert sorted(r.id for r in u.rentals.list(None, 100, (), "sweep_a-1*")) == ["rnt_1", "rnt_5"]
    engine.dispose()


def test_migration_0028_names_the_rentals_named_before_it(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine)
    downgrade(engine, "0027")
    factory = unit_of_work_factory(engine)
    with factory() as u:
        u.tenants.add(Tenant("ten_a", "a", "tenant", T0))
        u.commit()
    insert = text(
        "INSERT INTO rentals (id, tenant_id, state, spec, created_at, fingerprint) "
        "VALUES (:id, 'ten_a', 'stopped', :spec, :at, '')"
    )
    # more than one page of the migration's (1,000 ids), the named ones on both sides of the page's end
    rows = [{"id": f"rnt_{i:05d}", "spec": json.dumps({"gpus": 1}), "at": T0} for i in range(1_200)]
    for i in (3, 999, 1_000, 1_150):
        rows[i]["spec"] = json.dumps({"gpus": 1, "name": f"run-{i}"})
    with engine.begin() as connection:
        connection.execute(insert, rows)
    migrate(engine)
    with factory() as u:
        for i in (3, 999, 1_000, 1_150):
            assert [r.id for r in u.rentals.list("ten_a", 10, (), f"run-{i}")] == [f"rnt_{i:05d}"]
        assert u.rentals.list("ten_a", 10, (), "run-4") == []
    engine.dispose()
