"""Rendezvous ports chosen by the leader on SQLite and PostgreSQL: rentals that share a node never hold the
same `master_port`, even when their ids point at the same one, so two gangs whose rank 0 shares a host
never both bind it (with ports from ids alone, 1 pair in 9,000 did)."""

from __future__ import annotations

from itertools import count

from conftest import with_example_fleet
from suanli.app.fleet import FleetCache
from suanli.app.records import Rental, RentalSpec
from suanli.app.scheduling import Scheduler
from suanli.domain.catalog_data import CATALOG
from suanli.domain.rendezvous import MASTER_PORTS, hashed_master_port


def _ids_pointing_at_one_port(wanted: int) -> list[str]:
    """`wanted` rental ids whose hashed ports are the same (found by trying ids in turn)."""
    by_port: dict[int, list[str]] = {}
    for i in count():
        rental_id = f"rnt_port{i:05d}"
        same = by_port.setdefault(hashed_master_port(rental_id), [])
        same.append(rental_id)
        if len(same) == wanted:
            return same
    raise AssertionError("unreachable")


def test_rentals_sharing_a_node_get_different_master_ports_even_when_their_ids_collide(store, clock) -> None:
    _, uow = store
    with_example_fleet(uow)
    ids = _ids_pointing_at_one_port(3)
    spec = RentalSpec(gpu_model="H100-SXM-80GB", gpus=2, regions=("cn-north",))
    with uow() as u:
        for rental_id in ids:
            u.rentals.add(Rental(rental_id, "ten_a", "pending", spec, clock.now()))
        u.commit()
    scheduler = Scheduler(uow, clock, CATALOG, FleetCache(CATALOG), "suanli", 0)
    assert scheduler.run_cycle().placed == 3
    with uow() as u:
        nodes = {rental_id: {a.node for a in u.rentals.allocation(rental_id)} for rental_id in ids}
        ports = {rental_id: u.rentals.get(rental_id).master_port for rental_id in ids}
    assert len(set.union(*nodes.values())) == 1, nodes  # packed on one node: their ports must differ
    assert len(set(ports.values())) == 3 and all(port in MASTER_PORTS for port in ports.values())
    assert ports[ids[0]] == hashed_master_port(ids[0])  # the first keeps the port its id points at
