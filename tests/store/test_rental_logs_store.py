"""A rental's output stored in chunks from its nodes (SQLite and PostgreSQL): a read from any offset, of any
length, whole or one node's, is that slice of the output as it came; migration 0024 numbers the chunks
stored before it the same way."""

from __future__ import annotations

import random

from sqlalchemy import select, text

from conftest import T0
from suanli.app.records import Rental, RentalSpec, Tenant
from suanli.store.agent_repositories import SqlAgentUnitOfWork
from suanli.store.db import downgrade, make_engine, migrate, session_factory
from suanli.store.rows import RentalLogRow

NODES = ("gpu-01", "gpu-02")


def _chunks(seed: int) -> list[tuple[str, str]]:
    """(node, text) in the order they arrive: lines and pieces of lines, some not ASCII (the service stores
    no empty chunk)."""
    rng = random.Random(seed)
    words = ["step", "loss=0.25", "ünïcode", "进度", "\n", "x" * 40]
    return [(rng.choice(NODES), "".join(rng.choices(words, k=rng.randint(1, 6)))) for _ in range(30)]


def _add_rental(uow: SqlAgentUnitOfWork, rental_id: str) -> None:
    if uow.tenants.get("ten_logs") is None:
        uow.tenants.add(Tenant("ten_logs", "logs", "tenant", T0))
    uow.rentals.add(Rental(rental_id, "ten_logs", "running", RentalSpec(), T0))


def test_a_read_from_any_offset_is_that_slice_of_the_output(store) -> None:
    engine, _ = store
    sessions = session_factory(engine)
    for seed in range(6):
        rental_id = f"rnt_logs{seed}"
        chunks = _chunks(seed)
        with SqlAgentUnitOfWork(sessions) as uow:
            _add_rental(uow, rental_id)
            sent = dict.fromkeys(NODES, 0)
            for node, data in chunks:
                size = len(data.encode())
                uow.agents.add_log(rental_id, node, sent[node], size, data, T0)
                sent[node] += size
            uow.commit()
        whole = "".join(data for _, data in chunks)
        by_node = {node: "".join(data for n, data in chunks if n == node) for node in NODES}
        rng = random.Random(seed)
        with SqlAgentUnitOfWork(sessions) as uow:
            for node, expected in [(None, whole), *by_node.items()]:
                assert uow.agents.log_page(rental_id, node, 0, 10**6) == (expected, len(expected))
                for _ in range(25):
                    offset, limit = rng.randint(0, len(expected) + 3), rng.randint(1, 60)
                    piece = expected[offset : offset + limit]
                    assert uow.agents.log_page(rental_id, node, offset, limit) == (piece, len(expected))


def test_migration_0024_numbers_the_chunks_stored_before_it(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine)
    downgrade(engine, "0023")
    sessions = session_factory(engine)
    with SqlAgentUnitOfWork(sessions) as uow:
        uow.tenants.add(Tenant("ten_logs", "logs", "tenant", T0))
        uow.commit()
    with engine.begin() as connection:  # the rentals table as it was then (no later columns)
        connection.execute(
            text(
                "INSERT INTO rentals (id, tenant_id, state, spec, created_at, fingerprint) "
                "VALUES ('rnt_old', 'ten_logs', 'running', '{}', :at, '')"
            ),
            {"at": T0},
        )
    chunks = [("gpu-01", "a1\n"), ("gpu-02", "b1\n"), ("gpu-01", "a2 ünï\n")]
    insert = text(
        "INSERT INTO rental_logs (rental_id, node, node_offset, size_bytes, data, at) "
        "VALUES ('rnt_old', :node, :offset, :size, :data, :at)"
    )
    sent = dict.fromkeys(NODES, 0)
    with engine.begin() as connection:
        for node, data in chunks:
            size = len(data.encode())
            connection.execute(
                insert, {"node": node, "offset": sent[node], "size": size, "data": data, "at": T0}
            )
            sent[node] += size
    migrate(engine)
    with SqlAgentUnitOfWork(sessions) as uow:
        assert uow.agents.log_page("rnt_old", None, 0, 100) == ("a1\nb1\na2 ünï\n", 13)
        assert uow.agents.log_page("rnt_old", "gpu-01", 3, 100) == ("a2 ünï\n", 10)
        uow.agents.add_log("rnt_old", "gpu-01", sent["gpu-01"], 3, "a3\n", T0)  # numbered after them
        whole = "a1\nb1\na2 ünï\na3\n"
        assert uow.agents.log_page("rnt_old", None, 8, 100) == (whole[8:], len(whole))
        assert uow.agents.log_page("rnt_old", "gpu-01", 0, 100) == ("a1\na2 ünï\na3\n", 13)
    engine.dispose()


def test_two_nodes_uploading_at_once_never_share_a_start(store) -> None:
    """Each node's agent uploads in its own transactions at the same time: the chunks' starts still tile
    the output, none overlapping (PostgreSQL takes a lock per rental; SQLite has one writer)."""
    import threading

    engine, _ = store
    sessions = session_factory(engine)
    with SqlAgentUnitOfWork(sessions) as uow:
        _add_rental(uow, "rnt_race")
        uow.commit()
    barrier = threading.Barrier(len(NODES))

    def upload(node: str) -> None:
        barrier.wait()
        for i in range(25):
            line = f"{node} line {i}\n"
            with SqlAgentUnitOfWork(sessions) as uow:
                uow.agents.add_log("rnt_race", node, i * len(line), len(line), line, T0)
                uow.commit()

    threads = [threading.Thread(target=upload, args=(node,)) for node in NODES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT char_start, chars FROM rental_logs WHERE rental_id = 'rnt_race' ORDER BY char_start")
        ).all()
    assert len(rows) == 50
    with SqlAgentUnitOfWork(sessions) as uow:  # the chunk's own columns as given
        stored = uow.agents.s.scalars(select(RentalLogRow).where(RentalLogRow.node_offset == 0)).all()
        assert {(r.node, r.at, r.size_bytes, r.node_char_start) for r in stored} == {
            (node, T0, len(f"{node} line 0\n"), 0) for node in NODES
        }
    assert [start for start, _ in rows] == [sum(chars for _, chars in rows[:i]) for i in range(50)]
    with SqlAgentUnitOfWork(sessions) as uow:
        whole, total = uow.agents.log_page("rnt_race", None, 0, 10**6)
    assert total == len(whole) and sorted(whole.splitlines()) == sorted(
        f"{node} line {i}" for node in NODES for i in range(25)
    )
