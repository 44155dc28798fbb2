"""The meter in batches, on the real store (SQLite and PostgreSQL): each batch is one database transaction
chained on the head the one before it left; a rental that ended is closed (`billing_closed_at`) with its
final charge and not read again; a rental stopped after a charge gets the rest; running the meter twice at
the same instant posts nothing; a run cut short keeps its committed batches and a rerun posts exactly the
rest."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from suanli.app.billing import BillingService
from suanli.app.errors import Conflict
from suanli.app.fleet import FleetCache
from suanli.app.metering import MeterProgress
from suanli.app.records import Caller, Rental, RentalEvent, RentalSpec, Tenant
from suanli.domain.billing.ledger import TxKind, verify
from suanli.domain.billing.money import charge_micros
from suanli.domain.catalog_data import CATALOG
from suanli.store.ledger_repositories import SqlLedger

T0 = datetime(2030, 1, 1, tzinfo=UTC)
RATE = 2_990_000  # micros per hour
ADMIN = Caller(Tenant("ten_admin", "admin", "admin", T0), "key_admin")


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture(params=["sequential", "pipelined"])
def env(store, clock, request):
    """The store and a billing service whose meter writes each batch before reading the next, or (as the
    server on PostgreSQL) while the next is read and computed."""
    engine, factory = store
    with factory() as u:
        u.tenants.add(Tenant("ten_admin", "admin", "admin", T0))
        u.tenants.add(Tenant("ten_a", "a", "tenant", T0))
        u.commit()
    pipelined = request.param == "pipelined"
    billing = BillingService(
        factory, clock, CATALOG, FleetCache(CATALOG), commission_bp=1500, pipeline_meter=pipelined
    )
    return engine, factory, billing


def _placed(factory, rental_id: str, *, rate: int = RATE) -> None:
    with factory() as u:
        u.rentals.add(Rental(rental_id, "ten_a", "pending", RentalSpec(gpu_model="H100", gpus=1), T0))
        assert u.rentals.mark_placed(rental_id, T0, rate)
        u.commit()


def _stop(factory, rental_id: str, after_s: int) -> None:
    with factory() as u:
        assert u.rentals.set_state(rental_id, "stopped", expect=("placed",), reason=None)
        u.rentals.add_event(rental_id, RentalEvent(at(after_s), "stopped"))
        u.commit()


def _charges(factory) -> dict[str, list[tuple[str, int]]]:
    """Per rental: (key, micros charged) of each charge transaction, in chain order."""
    with factory() as u:
        transactions = u.ledger.transactions(None)
    found: dict[str, list[tuple[str, int]]] = {}
    for tx in transactions:
        if tx.kind is TxKind.CHARGE:
            found.setdefault(tx.ref, []).append(
                (tx.key, sum(-p.amount_micros for p in tx.postings if p.amount_micros < 0))
            )
    return found


def _closed(engine) -> set[str]:
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id FROM rentals WHERE billing_closed_at IS NOT NULL"))
        return {row[0] for row in rows}


def _verified(factory) -> int:
    with factory() as u:
        transactions = u.ledger.transactions(None)
        stored = u.ledger.balances(None)
    result = verify(transactions, expected_balances=stored)
    assert result.ok, result.problems
    assert sum(stored.values()) == 0
    return len(transactions)


def test_an_ended_rental_gets_its_final_charge_then_is_not_read_again(env) -> None:
    engine, factory, billing = env
    _placed(factory, "rnt_end")
    _stop(factory, "rnt_end", 90)
    assert billing.meter(now=at(30)) == 1  # before its end: charged to date (the 60-s minimum), still open
    assert _closed(engine) == set()
    assert billing.meter(now=at(100)) == 1  # past its end: the rest, and closed with it
    assert _closed(engine) == {"rnt_end"}
    with factory() as u:
        assert u.rentals.meter_page(None, 100) == []
        assert [b.rental.id for b in u.rentals.billable()] == ["rnt_end"]  # the invoice still reads it
    with engine.begin() as connection:  # a changed price would show if the meter read it again: it does not
        connection.execute(text("UPDATE rentals SET price_micros_per_hour = 1 WHERE id = 'rnt_end'"))
    assert billing.meter(now=at(10_000)) == 0
    assert _charges(factory) == {
        "rnt_end": [
            ("charge:rnt_end:1", charge_micros(RATE, 60)),
            ("charge:rnt_end:2", charge_micros(RATE, 90) - charge_micros(RATE, 60)),
        ]
    }
    _verified(factory)


def test_a_meter_page_runs_without_jit_on_postgresql_for_its_batch_only(env) -> None:
    engine, factory, billing = env
    if engine.dialect.name != "postgresql":
        pytest.skip("JIT compilation is PostgreSQL's")
    _placed(factory, "rnt_a")

    def jit(u) -> str:
        return str(u.session.execute(text("SHOW jit")).scalar_one())

    with factory() as u:
        assert jit(u) == "on"  # the server's default
        assert [item.id for item in u.rentals.meter_page(None, 100)] == ["rnt_a"]
        assert jit(u) == "off"  # compiling the page's plan cost more than running it, on every page
    with factory() as u:
        assert jit(u) == "on"  # SET LOCAL: the pooled connection is left as it was
    assert billing.meter(now=at(60)) == 1
    _verified(factory)


def test_a_rental_stopped_after_a_charge_is_charged_to_its_stop_exactly(env) -> None:
    engine, factory, billing = env
    _placed(factory, "rnt_late")
    assert billing.meter(now=at(100)) == 1
    assert billing.meter(now=at(400)) == 1
    assert _closed(engine) == set()  # live: read again every pass
    _stop(factory, "rnt_late", 500)
    assert billing.meter(now=at(1_000)) == 1
    assert billing.meter(now=at(2_000)) == 0
    charges = _charges(factory)["rnt_late"]
    assert [key for key, _ in charges] == [f"charge:rnt_late:{n}" for n in (1, 2, 3)]
    assert sum(amount for _, amount in charges) == charge_micros(RATE, 500)
    assert _closed(engine) == {"rnt_late"}
    _verified(factory)


def test_a_rental_is_not_closed_before_its_end_has_passed(env) -> None:
    engine, factory, billing = env
    _placed(factory, "rnt_future")
    _stop(factory, "rnt_future", 3_000)  # e.g. a meter run with an earlier `now` than the stop
    assert billing.meter(now=at(1_000)) == 1
    assert _closed(engine) == set()
    assert billing.meter(now=at(3_000)) == 1
    assert _closed(engine) == {"rnt_future"}
    assert sum(amount for _, amount in _charges(factory)["rnt_future"]) == charge_micros(RATE, 3_000)


def test_the_meter_twice_at_the_same_instant_posts_nothing_and_batches_chain_on_each_other(env) -> None:
    engine, factory, billing = env
    billing.credit(ADMIN, "ten_a", 5_000, True, "grant")  # spent by the first charges, across batches
    for number in range(11):
        _placed(factory, f"rnt_{number:02d}", rate=RATE + number)
    for number in range(0, 11, 2):
        _stop(factory, f"rnt_{number:02d}", 120 + number)
    assert billing.meter(now=at(600), batch=3) == 11  # 4 batches
    assert billing.meter(now=at(600), batch=3) == 0
    assert billing.meter(now=at(600), batch=100) == 0
    assert _closed(engine) == {f"rnt_{number:02d}" for number in range(0, 11, 2)}
    assert billing.meter(now=at(660), batch=4) == 5  # only the live ones
    charges = _charges(factory)
    for number in range(11):
        ended = 120 + number if number % 2 == 0 else 660
        assert sum(amount for _, amount in charges[f"rnt_{number:02d}"]) == charge_micros(
            RATE + number, ended
        )
    assert _verified(factory) == 1 + 11 + 5
    assert billing.balance(ADMIN, "ten_a").grants_micros == 0


def test_a_run_cut_short_keeps_its_committed_batches_and_a_rerun_posts_exactly_the_rest(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, factory, billing = env
    for number in range(10):
        _placed(factory, f"rnt_{number:02d}")
        _stop(factory, f"rnt_{number:02d}", 60 + 10 * number)
    appended = SqlLedger.append_many
    calls = []

    def crash_on_the_third(self, txs, created_at):
        calls.append(len(txs))
        if len(calls) == 3:
            raise RuntimeError("the process died here")
        appended(self, txs, created_at)

    monkeypatch.setattr(SqlLedger, "append_many", crash_on_the_third)
    with pytest.raises(RuntimeError):
        billing.meter(now=at(1_000), batch=3)
    assert sum(len(c) for c in _charges(factory).values()) == 6  # two batches of 3 committed
    assert _closed(engine) == {f"rnt_{number:02d}" for number in range(6)}
    monkeypatch.setattr(SqlLedger, "append_many", appended)
    assert billing.meter(now=at(1_000), batch=3) == 4
    charges = _charges(factory)
    assert {rental: [key for key, _ in found] for rental, found in charges.items()} == {
        f"rnt_{number:02d}": [f"charge:rnt_{number:02d}:1"] for number in range(10)
    }
    for number in range(10):
        assert charges[f"rnt_{number:02d}"][0][1] == charge_micros(RATE, 60 + 10 * number)
    assert _verified(factory) == 10


def test_two_meters_at_once_never_fork_the_chain_nor_charge_twice(env) -> None:
    _, factory, billing = env
    for number in range(40):
        _placed(factory, f"rnt_{number:02d}")
        _stop(factory, f"rnt_{number:02d}", 100 + number)
    errors: list[Exception] = []

    def run() -> None:
        try:
            billing.meter(now=at(1_000), batch=4)
        except Conflict as error:  # lost the race more often than it retries: the next run completes it
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    billing.meter(now=at(1_000), batch=4)
    charges = _charges(factory)
    assert {rental: len(found) for rental, found in charges.items()} == {f"rnt_{n:02d}": 1 for n in range(40)}
    for number in range(40):
        assert charges[f"rnt_{number:02d}"][0][1] == charge_micros(RATE, 100 + number)
    assert _verified(factory) == 40


def test_a_batch_that_loses_the_head_is_redone_from_the_last_committed_one(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer appends (a grant) once the first batch has committed. A sequential run reads the new
    head for the second batch; a pipelined one had computed it on the first's head and the grants before, so
    its append conflicts and the run reads again after the first batch (throwing away the third it computed
    meanwhile). Either way every rental is charged once, exactly, and both grants are spent first."""
    engine, factory, billing = env
    billing.credit(ADMIN, "ten_a", 5_000, True, "grant")
    for number in range(10):
        _placed(factory, f"rnt_{number:02d}")
        _stop(factory, f"rnt_{number:02d}", 60 + 10 * number)
    appended, committed = SqlLedger.append_many, MeterProgress.committed
    calls: list[int] = []

    def counted(self, txs, created_at):
        calls.append(len(txs))
        appended(self, txs, created_at)

    def another_writer_after_the_first(self, batch):
        committed(self, batch)
        if self.added == 3:
            billing.credit(ADMIN, "ten_a", 7_000, True, "grant meanwhile")

    monkeypatch.setattr(SqlLedger, "append_many", counted)
    monkeypatch.setattr(MeterProgress, "committed", another_writer_after_the_first)
    assert billing.meter(now=at(1_000), batch=3) == 10
    # the pipelined run wrote the second batch twice
    assert calls == ([3, 3, 3, 3, 1] if billing.pipeline_meter else [3, 3, 3, 1])
    charges = _charges(factory)
    assert {rental: [key for key, _ in found] for rental, found in charges.items()} == {
        f"rnt_{number:02d}": [f"charge:rnt_{number:02d}:1"] for number in range(10)
    }
    for number in range(10):
        assert charges[f"rnt_{number:02d}"][0][1] == charge_micros(RATE, 60 + 10 * number)
    assert _closed(engine) == {f"rnt_{number:02d}" for number in range(10)}
    assert _verified(factory) == 2 + 10
    assert billing.balance(ADMIN, "ten_a").grants_micros == 0
