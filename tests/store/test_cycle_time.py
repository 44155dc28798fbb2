"""A cycle's instant on SQLite and PostgreSQL: a rental asked for between the leader's clock read and its
queue read is placed no earlier than it was created, so its timeline reads in order."""

from __future__ import annotations

from datetime import timedelta

from conftest import with_example_fleet
from suanli.app.fleet import FleetCache
from suanli.app.records import Rental, RentalSpec
from suanli.app.scheduling import Scheduler
from suanli.domain.catalog_data import CATALOG


def test_a_rental_created_after_the_cycle_read_its_clock_is_placed_after_its_creation(store, clock) -> None:
    _, uow = store
    with_example_fleet(uow)
    created = clock.now() + timedelta(milliseconds=9)  # committed while the cycle was starting
    far = clock.now() + timedelta(seconds=30)  # a clock far ahead elsewhere moves the cycle by 1 s at most
    with uow() as u:
        u.rentals.add(Rental("rnt_late", "ten_a", "pending", RentalSpec(gpu_model="H100", gpus=1), created))
        u.rentals.add(Rental("rnt_ahead", "ten_b", "pending", RentalSpec(gpu_model="H100", gpus=1), far))
        u.commit()
    scheduler = Scheduler(uow, clock, CATALOG, FleetCache(CATALOG), "suanli", 0)
    assert scheduler.run_cycle().placed == 2
    with uow() as u:
        placed_at = {r: u.rentals.get(r).placed_at for r in ("rnt_late", "rnt_ahead")}
    assert placed_at["rnt_late"] >= created
    assert placed_at["rnt_ahead"] == placed_at["rnt_late"] == clock.now() + timedelta(seconds=1)
