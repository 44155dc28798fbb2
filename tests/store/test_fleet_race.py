"""A fleet change that commits while a scheduling cycle decides (SQLite and PostgreSQL): the cycle's plan,
made on the old fleet, is dropped, not booked on a node the new fleet no longer has; the next cycle places on
the new fleet. Before, the rental ran on the removed node and every later cycle failed on it (KeyError)."""

from __future__ import annotations

from conftest import EXAMPLE_FLEET, T0, with_example_fleet
from suanli.app.fleet import FleetCache, FleetService
from suanli.app.records import Caller, Rental, RentalSpec, Tenant
from suanli.app.scheduling import Scheduler
from suanli.domain.catalog_data import CATALOG

ADMIN = Caller(Tenant("ten_admin", "admin", "admin", T0), "key_admin")
GROUP_A = EXAMPLE_FLEET.index('[[nodes]]\nname = "h100-a-{i}"')
WITHOUT_GROUP_A = EXAMPLE_FLEET[:GROUP_A] + EXAMPLE_FLEET[EXAMPLE_FLEET.index("[[nodes]]", GROUP_A + 1) :]


def test_a_cycle_that_decided_on_a_fleet_changed_meanwhile_books_nothing_and_the_next_places_anew(
    store, clock
) -> None:
    _, uow = store
    with_example_fleet(uow)
    with uow() as u:
        spec = RentalSpec(gpu_model="H100", gpus=1, regions=["cn-north"])
        u.rentals.add(Rental("rnt_race", "ten_a", "pending", spec, T0))
        u.commit()
    scheduler = Scheduler(uow, clock, CATALOG, FleetCache(CATALOG), "suanli", 0)
    fleets = FleetService(uow, clock, FleetCache(CATALOG))
    read = scheduler._read

    def read_while_the_fleet_changes(now):  # an operator's PUT commits between the cycle's read and apply
        found = read(now)
        fleets.put(ADMIN, WITHOUT_GROUP_A)
        return found

    scheduler._read = read_while_the_fleet_changes  # type: ignore[method-assign]
    first = scheduler.run_cycle()
    assert first.dropped and first.placed == 0
    with uow() as u:
        assert u.rentals.get("rnt_race").state == "pending"
    scheduler._read = read  # type: ignore[method-assign]
    assert scheduler.run_cycle().placed == 1
    with uow() as u:
        (allocation,) = u.rentals.allocation("rnt_race")
    assert allocation.node.startswith("h100-b-")  # on the new fleet: group a is gone
