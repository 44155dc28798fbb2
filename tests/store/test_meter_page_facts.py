"""The meter's page read (`RentalRepo.meter_page`) on SQLite and PostgreSQL: each rental's facts, as the
meter charges by them, in every case of allocations, runs, heartbeats and events the charge depends on:
first node even when its allocation was released, runs ended on one node and going on on another,
the heartbeat of open runs' nodes only (else of the booked nodes, also when an open run's node never sent
one), the latest end and stop events, and the `after`/`ids`/`tenants`/`ended_only` filters."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event, insert

from suanli.app.records import Rental, RentalEvent, RentalSpec, Tenant
from suanli.store.rows import AgentNodeRow, AllocationRow, RentalRunRow

T0 = datetime(2030, 1, 1, tzinfo=UTC)
RATE = 2_000_000


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def page(store):
    """Rentals `rnt_1`..`rnt_6` (and `rnt_0`, never placed) with allocations, runs, agents and events."""
    engine, factory = store
    with factory() as u:
        for tenant in ("ten_a", "ten_b"):
            u.tenants.add(Tenant(tenant, tenant, "tenant", T0))
        for number in range(7):
            tenant = "ten_b" if number == 5 else "ten_a"
            u.rentals.add(Rental(f"rnt_{number}", tenant, "pending", RentalSpec(gpu_model="H100"), T0))
            if number:
                assert u.rentals.mark_placed(f"rnt_{number}", T0, RATE)
        u.commit()
    allocations = [  # (rental, node, released), in id order
        ("rnt_1", "n-old", True),  # first booked on n-old, released, then moved to n-new
        ("rnt_1", "n-new", False),
        ("rnt_2", "n-b1", False),  # booked on two nodes, no run yet
        ("rnt_2", "n-b2", False),
        ("rnt_3", "n-silent", False),  # its open run's node never sent a heartbeat
        ("rnt_3", "n-b1", False),
        ("rnt_5", "n-new", False),
        ("rnt_6", "n-b2", True),  # ended: released
    ]
    runs = [  # (rental, node, placement, started, ended)
        ("rnt_1", "n-old", 0, at(10), at(100)),
        ("rnt_1", "n-new", 1, at(200), None),
        ("rnt_1", "n-old", 1, at(150), at(190)),  # a second, earlier-ended run there
        ("rnt_3", "n-silent", 0, at(30), None),
        ("rnt_5", "n-new", 0, None, None),  # reported, not started yet
        ("rnt_6", "n-b2", 0, at(40), at(900)),
    ]
    heartbeats = {"n-old": at(5_000), "n-new": at(600), "n-b1": at(700), "n-b2": at(800), "n-silent": None}
    with engine.begin() as connection:
        for rental, node, released in allocations:
            connection.execute(
                insert(AllocationRow.__table__).values(
                    rental_id=rental, ordinal=0, node=node, cpu_milli=1, memory_mib=1, released=released
                )
            )
        for rental, node, placement, started, ended in runs:
            connection.execute(
                insert(RentalRunRow.__table__).values(
                    rental_id=rental,
                    node=node,
                    placement=placement,
                    state="running" if ended is None else "stopped",
                    started_at=started,
                    ended_at=ended,
                )
            )
        for number, (node, heartbeat) in enumerate(heartbeats.items()):
            connection.execute(
                insert(AgentNodeRow.__table__).values(
                    node=node,
                    key_sha256=f"{number:064d}",
                    registered_at=T0,
                    inventory={},
                    last_heartbeat_at=heartbeat,
                )
            )
    with factory() as u:
        assert u.rentals.set_state("rnt_6", "stopped", expect=("placed",), reason=None)
        for rental, seconds, kind in [
            ("rnt_1", 140, "stopping"),  # a stop asked, then asked again
            ("rnt_1", 145, "stopping"),
            ("rnt_1", 160, "running"),  # not an end, not a stop
            ("rnt_6", 880, "stopping"),
            ("rnt_6", 900, "stopped"),
            ("rnt_6", 950, "lost"),  # the latest end event counts, whatever its kind
            ("rnt_6", 920, "failed"),
        ]:
            u.rentals.add_event(rental, RentalEvent(at(seconds), kind))
        u.commit()
    return factory


def facts(item) -> tuple:
    return (
        item.node,
        item.run_started_at,
        item.run_ended_at,
        item.ended_at,
        item.heartbeat_at,
        item.stop_asked_at,
    )


def test_a_meter_page_reads_each_rentals_facts_in_every_case(page) -> None:
    with page() as u:
        items = {item.id: item for item in u.rentals.meter_page(None, 100)}
    assert list(items) == [f"rnt_{n}" for n in range(1, 7)]  # rnt_0 was never placed
    assert facts(items["rnt_1"]) == (
        "n-old",  # its first allocation's node, though released since
        at(10),  # its earliest run start, of all its runs
        at(190),  # its latest run end, while a run goes on elsewhere
        None,
        at(600),  # its open run's node (n-new), not n-old's later heartbeat
        at(145),
    )
    assert facts(items["rnt_2"]) == ("n-b1", None, None, None, at(800), None)  # booked nodes' latest
    assert facts(items["rnt_3"]) == ("n-silent", at(30), None, None, at(700), None)  # falls to booked
    assert facts(items["rnt_4"]) == ("", None, None, None, None, None)  # placed, nothing held or run
    assert facts(items["rnt_5"]) == ("n-new", None, None, None, at(600), None)
    assert facts(items["rnt_6"]) == ("n-b2", at(40), at(900), at(950), None, at(880))
    assert (items["rnt_1"].tenant_id, items["rnt_1"].state, items["rnt_1"].price_micros_per_hour) == (
        "ten_a",
        "placed",
        RATE,
    )
    assert items["rnt_6"].state == "stopped"
    assert all(item.placed_at == T0 for item in items.values())


def test_a_meter_pages_filters_and_keyset_keep_the_facts(page) -> None:
    with page() as u:
        whole = {item.id: item for item in u.rentals.meter_page(None, 100)}
        first = u.rentals.meter_page(None, 2)
        rest = u.rentals.meter_page(first[-1].id, 100)
        assert [item.id for item in first] == ["rnt_1", "rnt_2"]
        assert first + rest == list(whole.values())
        assert u.rentals.meter_page(None, 100, ["rnt_3", "rnt_6", "rnt_0"]) == [
            whole["rnt_3"],
            whole["rnt_6"],
        ]
        assert u.rentals.meter_page(None, 100, tenants=["ten_b"]) == [whole["rnt_5"]]
        assert u.rentals.meter_page(None, 100, ended_only=True) == [whole["rnt_6"]]
        assert u.rentals.meter_page("rnt_5", 100, ended_only=True) == [whole["rnt_6"]]
        assert u.rentals.meter_page("rnt_6", 100) == []


def test_a_meter_page_reads_each_fact_table_once_per_rental_on_postgresql(store, page) -> None:
    """The facts cost one probe of allocations, runs and events per rental (three LATERAL subqueries),
    where seven correlated subqueries per rental took about half of a page's database time."""
    engine, _ = store
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite has no LATERAL: it keeps the correlated subqueries")
    statements: list[tuple[str, object]] = []

    def seen(connection, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", seen)
    try:
        with page() as u:
            items = u.rentals.meter_page(None, 100)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert len(items) == 6 and len(statements) == 1
    statement, parameters = statements[0]
    with engine.connect() as connection:
        plan = connection.exec_driver_sql(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters
        ).scalar_one()
    probes: dict[str, int] = {}

    def walk(node: dict) -> None:
        if node.get("Relation Name") in {"allocations", "rental_runs", "rental_events"}:
            name = node["Relation Name"]
            probes[name] = probes.get(name, 0) + node["Actual Loops"]
        for child in node.get("Plans", []):
            walk(child)

    walk((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
    assert probes == {"allocations": 6, "rental_runs": 6, "rental_events": 6}
