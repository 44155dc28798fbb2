"""Time limits in the store (SQLite and PostgreSQL): the rentals past theirs, stopping them, and migration
0025, which gives the live rentals placed before it theirs from their spec."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import text

from conftest import T0
from suanli.app.records import Rental, RentalSpec, Tenant
from suanli.app.rentals import stop_overdue
from suanli.store.db import downgrade, make_engine, migrate, unit_of_work_factory

RATE = 2_990_000


def _placed(factory, rental_id: str, limit_s: int | None, state: str = "placed") -> None:
    with factory() as u:
        if u.tenants.get("ten_a") is None:
            u.tenants.add(Tenant("ten_a", "a", "tenant", T0))
        spec = RentalSpec(gpu_model="H100", gpus=1, max_duration_s=limit_s)
        u.rentals.add(Rental(rental_id, "ten_a", "pending", spec, T0))
        limit = None if limit_s is None else T0 + timedelta(seconds=limit_s)
        assert u.rentals.mark_placed(rental_id, T0, RATE, time_limit_at=limit)
        if state != "placed":
            assert u.rentals.set_state(rental_id, state, expect=("placed",), reason=None)
        u.commit()


def test_the_rentals_past_their_time_limit_are_found_and_stopped(store) -> None:
    _, factory = store
    _placed(factory, "rnt_run", 60, "running")
    _placed(factory, "rnt_placed", 30)
    _placed(factory, "rnt_later", 3600, "running")
    _placed(factory, "rnt_none", None, "running")
    _placed(factory, "rnt_stopping", 10, "stopping")  # already on its way out
    with factory() as u:
        assert u.rentals.get("rnt_run").time_limit_at == T0 + timedelta(seconds=60)
        assert [r.id for r in u.rentals.overdue(T0 + timedelta(seconds=59))] == ["rnt_placed"]
        assert [r.id for r in u.rentals.overdue(T0 + timedelta(seconds=60))] == ["rnt_placed", "rnt_run"]
        assert stop_overdue(u, T0 + timedelta(seconds=61)) == ["rnt_placed", "rnt_run"]
        u.commit()
    with factory() as u:
        states = {r: u.rentals.get(r).state for r in ("rnt_run", "rnt_placed", "rnt_later", "rnt_none")}
        assert states == {
            "rnt_run": "stopping",  # its agent stops the workload
            "rnt_placed": "stopped",  # never started: stopped and released at once
            "rnt_later": "running",
            "rnt_none": "running",
        }
        assert [(e.kind, e.reason) for e in u.rentals.events("rnt_run")][-1] == ("stopping", "time_limit")
        assert u.rentals.overdue(T0 + timedelta(days=1)) == [u.rentals.get("rnt_later")]


def test_a_rental_under_notice_is_stopped_at_its_time_limit_when_its_deadline_comes_later(store) -> None:
    """`noticed` reaches its 60-s limit 20 s before its notice deadline: its deadline is brought to its limit
    (the next cycle ends it, whole), once; `ending`, whose deadline comes first, is left to its deadline."""
    _, factory = store
    _placed(factory, "rnt_noticed", 60, "running")
    _placed(factory, "rnt_ending", 60, "running")
    with factory() as u:
        for rental_id, deadline_s in (("rnt_noticed", 80), ("rnt_ending", 50)):
            deadline = T0 + timedelta(seconds=deadline_s)
            assert u.rentals.give_notice(rental_id, "rnt_od", deadline, expect=("running",))
        u.commit()
    at_limit = T0 + timedelta(seconds=61)
    with factory() as u:
        assert stop_overdue(u, at_limit) == ["rnt_noticed"]
        u.commit()
    with factory() as u:
        noticed = u.rentals.get("rnt_noticed")
        assert (noticed.state, noticed.notice_deadline) == ("preempting", at_limit)
        assert [(e.kind, e.reason) for e in u.rentals.events("rnt_noticed")][-1] == ("stopping", "time_limit")
        assert u.rentals.get("rnt_ending").notice_deadline == T0 + timedelta(seconds=50)
        assert stop_overdue(u, at_limit + timedelta(seconds=1)) == []  # its deadline has come: not again


def test_migration_0025_gives_live_rentals_placed_before_it_their_time_limit(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine)
    downgrade(engine, "0024")
    factory = unit_of_work_factory(engine)
    with factory() as u:
        u.tenants.add(Tenant("ten_a", "a", "tenant", T0))
        u.commit()
    insert = text(
        "INSERT INTO rentals (id, tenant_id, state, spec, created_at, fingerprint, placed_at) "
        "VALUES (:id, 'ten_a', :state, :spec, :at, '', :placed)"
    )
    rows = [
        ("rnt_live", "running", {"max_duration_s": 600}, T0),
        ("rnt_unlimited", "running", {}, T0),
        ("rnt_ended", "stopped", {"max_duration_s": 600}, T0),
        ("rnt_pending", "pending", {"max_duration_s": 600}, None),
    ]
    with engine.begin() as connection:
        for rental_id, state, spec, placed in rows:
            values = {"id": rental_id, "state": state, "spec": json.dumps(spec), "at": T0, "placed": placed}
            connection.execute(insert, values)
    migrate(engine)
    with factory() as u:
        limits = {r: u.rentals.get(r).time_limit_at for r, *_ in rows}
    assert limits == {
        "rnt_live": T0 + timedelta(seconds=600),
        "rnt_unlimited": None,
        "rnt_ended": None,
        "rnt_pending": None,
    }
    engine.dispose()


def test_migration_0045_goes_down_and_up_again_and_a_new_placement_clears_the_uncapped_limit(
    database_url: str,
) -> None:
    engine = make_engine(database_url)
    migrate(engine)
    downgrade(engine, "0044")
    migrate(engine)
    factory = unit_of_work_factory(engine)
    _placed(factory, "rnt_capped", 600, "running")
    with factory() as u:
        u.rentals.set_time_limit("rnt_capped", T0 + timedelta(seconds=900), T0 + timedelta(seconds=2400))
        u.commit()
    with factory() as u:
        capped = u.rentals.get("rnt_capped")
        assert (capped.time_limit_at, capped.uncapped_limit_at) == (
            T0 + timedelta(seconds=900),
            T0 + timedelta(seconds=2400),
        )
        assert u.rentals.set_state("rnt_capped", "pending", expect=("running",), reason=None)
        assert u.rentals.mark_placed("rnt_capped", T0, RATE, time_limit_at=T0 + timedelta(seconds=600))
        u.commit()
    with factory() as u:
        assert u.rentals.get("rnt_capped").uncapped_limit_at is None
    engine.dispose()
