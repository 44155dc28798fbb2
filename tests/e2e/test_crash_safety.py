"""Crash safety: the real server on PostgreSQL, 200 rentals from 16 threads, `kill -9` midway, restart.

After the restart: every rental that got a 2xx exists exactly once (by id and by idempotency key), no slice
position is booked twice and every booking belongs to a live rental, retries with the same keys return the
same rentals, and the scheduler goes on placing.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest
from server_process import ServerProcess, new_database

from suanli.client.client import ApiError, Client, ServerUnreachable
from suanli.wire.schemas import RentalCreateRequest

ADMIN_KEY = "sk_crash_admin_key_0123456789"
RENTALS, THREADS, KILL_AFTER = 200, 16, 100
NODES, GPUS_PER_NODE = 50, 8  # 400 GPUs; the 200 rentals ask for 300
LIVE = ("placed", "starting", "running", "stopping")


def _fleet_toml() -> str:
    head = '[regions.cn-north]\njurisdiction = "CN"\ngrid_gco2_per_kwh = 581\npue = 1.3\n'
    group = (
        '\n[[nodes]]\nname = "n{leaf}-{{i}}"\ncount_nodes = 10\ntopology = "cn-north/z1/pod-a/leaf-{leaf}"\n'
        "cpu_milli = 224000\nmemory_mib = 2097152\n"
        'gpus = {{ model = "H100-SXM-80GB", count = {gpus}, mode = "whole" }}\n'
    )
    return head + "".join(group.format(leaf=leaf, gpus=GPUS_PER_NODE) for leaf in range(NODES // 10))


def _spec(number: int) -> RentalCreateRequest:
    return RentalCreateRequest(gpu_model="H100", gpus=1 + number % 2, command=["sleep", "1"])


@pytest.fixture
def server(postgres_server: str, tmp_path: Path):
    process = ServerProcess(
        new_database(postgres_server, "crash"),
        tmp_path / "server.log",
        ADMIN_KEY,
        {"SUANLI_SCHEDULER_INTERVAL_S": "0.2"},
    )
    process.start()
    yield process
    process.stop()


def _psql(database_url: str) -> psycopg.Connection:
    return psycopg.connect(database_url.replace("+psycopg", ""), autocommit=True)


def test_kill_9_midway_loses_nothing_and_books_nothing_twice(server: ServerProcess) -> None:
    with Client(server.url, ADMIN_KEY) as admin:
        admin.put_fleet(_fleet_toml())
        tenant = admin.create_tenant("crashy")
        secret = admin.create_key(tenant.id, "crash").secret
    keys = [f"crash-{number:03d}" for number in range(RENTALS)]

    answered: dict[str, str] = {}  # idempotency key -> rental id, for every 2xx
    failed: dict[str, str] = {}  # idempotency key -> what went wrong
    lock, done = threading.Lock(), [0]
    local = threading.local()

    def submit(number: int) -> None:
        if not hasattr(local, "client"):
            local.client = Client(server.url, secret, retries=1, timeout_s=10)
        key = keys[number]
        try:
            rental = local.client.create_rental(_spec(number), idempotency_key=key)
            outcome = None
        except (ServerUnreachable, ApiError) as error:
            rental, outcome = None, type(error).__name__
        with lock:
            if rental is not None:
                answered[key] = rental.id
            else:
                failed[key] = outcome or "?"
            done[0] += 1
            if done[0] == KILL_AFTER:
                server.kill9()

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(submit, range(RENTALS)))
    assert server.process is not None and server.process.returncode == -signal.SIGKILL
    assert KILL_AFTER <= len(answered) < RENTALS and len(answered) + len(failed) == RENTALS

    print(
        f"before the kill: {len(answered)} answered, {len(failed)} without an answer",
        dict(Counter(failed.values())),
    )
    server.start()  # same database: migrations are a no-op, the snapshot is rebuilt from it
    with _psql(server.database_url) as db:
        stored = db.execute("SELECT count(*) FROM rentals").fetchone()
        print(f"after the restart: {stored[0] if stored else 0} rentals stored")
        rows = db.execute(
            "SELECT id, idempotency_key FROM rentals WHERE tenant_id = %s", (tenant.id,)
        ).fetchall()
        ids = Counter(row[0] for row in rows)
        by_key = Counter(row[1] for row in rows)
        key_of = {row[0]: row[1] for row in rows}
        for key, rental_id in answered.items():
            assert ids[rental_id] == 1, f"{key} answered {rental_id}, stored {ids[rental_id]} times"
            assert key_of[rental_id] == key and by_key[key] == 1
        assert all(count == 1 for count in by_key.values())

    headers = {"Authorization": f"Bearer {secret}"}
    retried: dict[str, str] = {}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        for round_ in (1, 2):
            for number, key in enumerate(keys):
                body = _spec(number).model_dump(mode="json", exclude_none=True)
                response = http.post("/v1/rentals", json=body, headers={"Idempotency-Key": key})
                if key in answered or round_ == 2:
                    assert response.status_code == 200, (key, response.status_code, response.text)
                else:  # no answer before the kill: created before it died (200) or never arrived (201)
                    assert response.status_code in (200, 201), (key, response.status_code, response.text)
                rental_id = response.json()["id"]
                assert rental_id == answered.get(key, rental_id) == retried.setdefault(key, rental_id)

    # the scheduler goes on after the restart: 300 GPUs asked of 400, so everything gets placed
    deadline = time.monotonic() + 30
    with _psql(server.database_url) as db:
        while True:
            states = dict(
                db.execute(
                    "SELECT state, count(*) FROM rentals WHERE tenant_id = %s GROUP BY state", (tenant.id,)
                ).fetchall()
            )
            if states.get("placed") == RENTALS or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert states == {"placed": RENTALS}
        assert len(set(retried.values())) == RENTALS

        doubled = db.execute(
            "SELECT node, gpu_index, slot, count(*) FROM bookings GROUP BY node, gpu_index, slot "
            "HAVING count(*) > 1"
        ).fetchall()
        assert doubled == []
        orphans = db.execute(
            "SELECT b.node, b.gpu_index, b.rental_id, r.state, a.released FROM bookings b "
            "JOIN rentals r ON r.id = b.rental_id JOIN allocations a ON a.id = b.allocation_id "
            "WHERE r.state NOT IN ('placed', 'starting', 'running', 'stopping') OR a.released "
            "OR a.rental_id <> b.rental_id"
        ).fetchall()
        assert orphans == []
        # independent of the bookings table: no GPU appears in two live allocations
        gpu_claims = db.execute(
            "SELECT a.node, s.gpu_index, count(*) FROM slices s JOIN allocations a ON a.id = s.allocation_id "
            "WHERE NOT a.released GROUP BY a.node, s.gpu_index HAVING count(*) > 1"
        ).fetchall()
        assert gpu_claims == []
        booked = db.execute("SELECT count(*) FROM bookings").fetchone()
        gpus = db.execute(
            "SELECT count(*) FROM slices s JOIN allocations a ON a.id = s.allocation_id WHERE NOT a.released"
        ).fetchone()
        assert booked is not None and gpus is not None and booked[0] == gpus[0] == 300
