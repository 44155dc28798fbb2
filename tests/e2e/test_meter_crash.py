"""Crash safety of the meter: the real server on PostgreSQL, 10,000 ended rentals, `kill -9` mid-run, restart.

The rentals ended before the server starts (known start, end and rate), so each must end up with exactly one
charge transaction of rate x max(60, end - start) / 3600 micros, rounded half up. The test waits until the
meter has committed some but not all of its batches, kills the server with SIGKILL, checks that the kill
landed mid-run (0 < charged < 10,000 once the process is dead), restarts it and waits for the rest. Then: the
whole ledger verifies (hash chain, balanced transactions, stored balances), every rental's charge is exact,
no idempotency key is there twice, one charge transaction per rental, and all balances sum to 0.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from server_process import ServerProcess, new_database

from suanli.api.meter_bench import seed_rentals, seed_tenants
from suanli.domain.billing.ledger import AccountKind, TxKind, verify
from suanli.domain.billing.money import charge_micros
from suanli.store.db import make_engine, migrate, unit_of_work_factory

RENTALS = 10_000
ADMIN_KEY = "sk_meter_crash_admin_key_0123456789"
RATES = (2_990_000, 1_000_001, 40_000_000, 777_777, 3_600)  # micros per hour


def _charged(db: psycopg.Connection) -> int:
    row = db.execute("SELECT count(*) FROM ledger_transactions WHERE kind = 'charge'").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def database_url(postgres_server: str) -> str:
    return new_database(postgres_server, "metercrash")


def test_kill_9_mid_meter_run_then_restart_charges_every_ended_rental_exactly_once(
    database_url: str, tmp_path: Path
) -> None:
    engine = make_engine(database_url)
    migrate(engine)
    now = datetime.now(UTC).replace(microsecond=0)
    tenants = seed_tenants(engine, 37, now)
    seeded = seed_rentals(
        engine,
        RENTALS,
        tenants=tenants,
        nodes=[f"node-{n}" for n in range(50)],
        started_at=now - timedelta(hours=2),
        ended_at=now - timedelta(hours=2) + timedelta(seconds=40),  # 0..99 s: many under the 60-s minimum
        rates=RATES,
    )
    expected = {
        rental_id: charge_micros(rate, max(60, int((end - start).total_seconds())))
        for rental_id, rate, start, end in seeded
        if end is not None
    }
    assert len(expected) == RENTALS

    server = ServerProcess(
        database_url, tmp_path / "server.log", ADMIN_KEY, {"SUANLI_METER_INTERVAL_S": "0.5"}
    )
    db = psycopg.connect(database_url.replace("+psycopg", ""), autocommit=True)
    try:
        server.start(timeout_s=60)
        try:
            deadline = time.monotonic() + 120
            while _charged(db) == 0:  # the first batch committed: the run is under way
                assert time.monotonic() < deadline, f"the meter never ran: {server.log_tail()}"
                assert server.running(), server.log_tail()
                time.sleep(0.002)
            server.kill9()
        finally:
            server.stop()
        assert server.process is not None and server.process.returncode == -signal.SIGKILL
        at_kill = _charged(db)
        print(f"charged when the server was killed: {at_kill} of {RENTALS}")
        assert 0 < at_kill < RENTALS, "the kill did not land mid-run"

        server.start(timeout_s=60)
        try:
            deadline = time.monotonic() + 180
            while _charged(db) < RENTALS:
                assert time.monotonic() < deadline, f"not all charged: {server.log_tail()}"
                assert server.running(), server.log_tail()
                time.sleep(0.1)
            time.sleep(1.0)  # a further meter run or two: must post nothing
        finally:
            server.stop()
        closed = db.execute("SELECT count(*) FROM rentals WHERE billing_closed_at IS NOT NULL").fetchone()
    finally:
        db.close()
    assert closed is not None and closed[0] == RENTALS

    factory = unit_of_work_factory(engine)
    with factory() as u:
        transactions = u.ledger.transactions(None)
        stored = u.ledger.balances(None)
    engine.dispose()
    result = verify(transactions, expected_balances=stored)
    assert result.ok, result.problems[:5]
    assert sum(stored.values()) == 0
    keys = Counter(tx.key for tx in transactions)
    assert [key for key, count in keys.items() if count > 1] == []
    charges = [tx for tx in transactions if tx.kind is TxKind.CHARGE]
    per_rental = Counter(tx.ref for tx in charges)
    assert set(per_rental) == set(expected)
    assert set(per_rental.values()) == {1}
    charged = frozenset({AccountKind.PROVIDER_PAYABLE, AccountKind.PLATFORM_REVENUE})
    wrong = {
        tx.ref: (tx.amount_to(charged), expected[tx.ref])
        for tx in charges
        if tx.amount_to(charged) != expected[tx.ref]
    }
    assert wrong == {}
    assert {tx.key for tx in charges} == {f"charge:{rental_id}:1" for rental_id in expected}
