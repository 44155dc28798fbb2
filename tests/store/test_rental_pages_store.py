"""A tenant's rentals a page at a time (SQLite and PostgreSQL): newest first, past a keyset on (created_at,
id), each rental on exactly one page however many share a created_at, and rentals created while paging do
not shift the pages that follow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import event, text

from conftest import T0
from suanli.app.records import Rental, RentalSpec, Tenant
from suanli.store.db import make_engine, migrate, unit_of_work_factory

SPEC = RentalSpec(gpu_model="H100", gpus=1)


def test_paging_through_2500_rentals_sees_each_once_in_the_lists_order(database_url: str) -> None:
    """2,500 of ten_a's rentals, 25 to a created_at (ids out of creation order), among ten_b's; pages of 333
    past the last id of the page before give each once, in the order of the whole list; 7 rentals created
    after the first page (newer than all) do not come on the pages that follow."""
    engine = make_engine(database_url)
    migrate(engine)
    factory = unit_of_work_factory(engine)
    with factory() as u:
        for tenant in ("ten_a", "ten_b"):
            u.tenants.add(Tenant(tenant, tenant, "tenant", T0))
        for n in range(2500):
            at = T0 + timedelta(seconds=n // 25)  # 25 share each created_at
            rental_id = f"rnt_{(n * 7919) % 2500:05d}"  # ids not in creation order
            u.rentals.add(Rental(rental_id, "ten_a", "pending", SPEC, at))
            if n % 10 == 0:
                u.rentals.add(Rental(f"rnt_b{n:05d}", "ten_b", "pending", SPEC, at))
        u.commit()
    expected = sorted((T0 + timedelta(seconds=n // 25), f"rnt_{(n * 7919) % 2500:05d}") for n in range(2500))
    expected_ids = [rental_id for _, rental_id in sorted(expected, key=lambda e: (-e[0].timestamp(), e[1]))]

    pages: list[list[str]] = []
    after = None
    while True:
        with factory() as u:
            page = [r.id for r in u.rentals.list("ten_a", 333, after=after)]
        if not page:
            break
        pages.append(page)
        after = page[-1]
        if len(pages) == 1:  # newer rentals arrive while the tenant pages
            with factory() as u:
                for n in range(7):
                    u.rentals.add(Rental(f"rnt_new{n}", "ten_a", "pending", SPEC, T0 + timedelta(days=1)))
                u.commit()
    walked = [rental_id for page in pages for rental_id in page]
    assert [len(page) for page in pages] == [333] * 7 + [169]
    assert walked == expected_ids  # each once, none of ten_b's, none of the new ones, in the list's order
    with factory() as u:
        first = [r.id for r in u.rentals.list("ten_a", 10)]
        assert first[:7] == [f"rnt_new{n}" for n in range(7)]  # a fresh first page has them
        assert u.rentals.list("ten_a", 5, ("running",), after=expected_ids[0]) == []  # with the filters
        oldest_of_b = ["rnt_b00000", "rnt_b00010", "rnt_b00020"]  # at T0 too, ids after every rnt_0...
        assert [r.id for r in u.rentals.list(None, 10, after=expected_ids[-2])] == [
            expected_ids[-1],
            *oldest_of_b,
        ]  # an admin's: every tenant's, the same keyset
    engine.dispose()


def test_a_rentals_page_is_an_index_range_in_the_lists_order_not_a_sort(tmp_path) -> None:
    """SQLite's plan for a page, a tenant's (0050's index) and an admin's of every tenant (0053's), past a
    cursor or not: read from an index in the list's order, with no sort of all the rentals (a temp B-tree)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'plan.db'}")
    migrate(engine)
    factory = unit_of_work_factory(engine)
    with factory() as u:
        u.tenants.add(Tenant("ten_a", "ten_a", "tenant", T0))
        u.rentals.add(Rental("rnt_00001", "ten_a", "pending", SPEC, T0))
        u.commit()
    listed: list[tuple[str, object]] = []

    @event.listens_for(engine, "before_cursor_execute")
    def keep(conn, cursor, statement, parameters, context, executemany) -> None:
        if "FROM rentals" in statement and "ORDER BY" in statement:
            listed.append((statement, parameters))

    for tenant, index in (("ten_a", "ix_rentals_tenant_newest"), (None, "ix_rentals_newest")):
        for after in (None, "rnt_00001"):
            listed.clear()
            with factory() as u:
                u.rentals.list(tenant, 50, after=after)
            ((statement, parameters),) = listed
            with engine.connect() as conn:
                rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
                plan = " | ".join(str(row[-1]) for row in rows)
            assert "TEMP B-TREE" not in plan, plan
            assert index in plan, plan


def test_a_page_of_what_changed_reads_the_changed_from_their_index(tmp_path) -> None:
    """`updated_after` (the console's refresh): SQLite's plan reads the rentals changed since from 0054's
    index, a tenant's `(tenant_id, updated_at)` and an admin's `(updated_at)`, and sorts only those; it
    never scans every rental (an admin's page scanned the whole newest-first index until the filter was a
    lookup by id)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'plan.db'}")
    migrate(engine)
    factory = unit_of_work_factory(engine)
    made = datetime.now(UTC) - timedelta(minutes=1)  # updated_at is the server's wall clock
    with factory() as u:
        u.tenants.add(Tenant("ten_a", "ten_a", "tenant", T0))
        u.rentals.add(Rental("rnt_00001", "ten_a", "pending", SPEC, T0))
        u.commit()
    listed: list[tuple[str, object]] = []

    @event.listens_for(engine, "before_cursor_execute")
    def keep(conn, cursor, statement, parameters, context, executemany) -> None:
        if "FROM rentals" in statement and "ORDER BY" in statement:
            listed.append((statement, parameters))

    for tenant, index in (("ten_a", "ix_rentals_tenant_updated"), (None, "ix_rentals_updated")):
        listed.clear()
        with factory() as u:
            assert [r.id for r in u.rentals.list(tenant, 50, updated_after=made)] == ["rnt_00001"]
            assert u.rentals.list(tenant, 50, updated_after=made + timedelta(days=1)) == []
        statement, parameters = listed[0]
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
            plan = " | ".join(str(row[-1]) for row in rows)
        assert f"USING INDEX {index} (" in plan, plan
        stamps = "ix_rental_charge_stamps_tenant" if tenant else "ix_rental_charge_stamps_stamped"
        assert f"USING INDEX {stamps} (" in plan, plan  # and the charges' stamps (0055)
        assert "SCAN" not in plan, plan


def test_a_charge_stamp_finds_the_rental_without_rewriting_its_row(database_url: str) -> None:
    """A charge stamps its rental in `rental_charge_stamps` (0055), not on the rental's row: the rental comes
    in `updated_after` answers (a tenant's and an admin's) while its `updated_at` stays. A rental's first
    stamp is always written, a later one only once the last is `unless_within_s` old."""
    engine = make_engine(database_url)
    migrate(engine)
    factory = unit_of_work_factory(engine)
    with factory() as u:
        u.tenants.add(Tenant("ten_a", "ten_a", "tenant", T0))
        for n in range(3):
            u.rentals.add(Rental(f"rnt_{n}", "ten_a", "running", SPEC, T0))
        u.commit()
    with engine.connect() as conn:
        row_stamps = dict(conn.execute(text("SELECT id, updated_at FROM rentals")).all())
    moment = datetime.now(UTC)

    def changed(since: datetime, tenant: str | None = "ten_a") -> list[str]:
        with factory() as u:
            return sorted(r.id for r in u.rentals.list(tenant, 50, updated_after=since))

    assert changed(moment) == []
    with factory() as u:
        u.rentals.stamp_charged([("rnt_0", "ten_a"), ("rnt_1", "ten_a")], unless_within_s=300)
        u.commit()
    assert changed(moment) == changed(moment, tenant=None) == ["rnt_0", "rnt_1"]
    assert changed(moment, tenant="ten_b") == []
    with engine.connect() as conn:
        assert dict(conn.execute(text("SELECT id, updated_at FROM rentals")).all()) == row_stamps

    later = datetime.now(UTC)
    with engine.begin() as conn:  # rnt_1's stamp is old: restamped; rnt_0's is not
        conn.execute(
            text("UPDATE rental_charge_stamps SET stamped_at = :old WHERE rental_id = 'rnt_1'"),
            {"old": moment - timedelta(minutes=10)},
        )
    with factory() as u:
        u.rentals.stamp_charged(
            [("rnt_0", "ten_a"), ("rnt_1", "ten_a"), ("rnt_2", "ten_a")], unless_within_s=300
        )
        u.commit()
    assert changed(later) == ["rnt_1", "rnt_2"]
    assert changed(moment) == ["rnt_0", "rnt_1", "rnt_2"]
