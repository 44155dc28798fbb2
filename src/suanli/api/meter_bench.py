"""Meter benchmark: one meter pass over N open rentals on PostgreSQL (goal: 100,000 in under 10 s).

`python -m suanli.api.meter_bench [--database-url URL] [--rentals N] [--tenants T] [--batch B] [--json FILE]`

Without `--database-url` it starts a throw-away PostgreSQL (`suanli.store.throwaway_pg`, the tests' helper),
migrates it and seeds, with bulk Core INSERTs: a fleet of 1,250 nodes from four providers, T tenants (a tenth
of them with a grant), and N rentals `running` since an hour ago at varied rates, each with an allocation on a
node and an agent-reported run. It then times the meter (`BillingService.meter`, the same code the server's
meter loop runs) in process:

- pass 1 at `now`: every rental gets its first charge (N transactions);
- pass 2 at the same `now`: posts nothing (cumulative charges, nothing new to post);
- pass 3 at `now + 60 s`: every rental gets a second charge for the minute;
- then half the rentals are stopped and pass 4 at `now + 120 s` posts their final charges and closes them;
  pass 5 at `now + 180 s` reads only the other half.

Finally it verifies the whole ledger (hash chain, balances against the stored sums) and prints the numbers.
`seed_rentals` is shared with tests/e2e/test_meter_crash.py.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, insert, update

from suanli.api.bench import bench_engine, bench_main, bench_parser, fleet_toml
from suanli.app.billing import BillingService
from suanli.app.fleet import FleetCache
from suanli.app.ids import new_id
from suanli.app.ports import UnitOfWorkFactory
from suanli.domain.billing.ledger import Transaction, TxKind, grant_postings, verify
from suanli.domain.billing.money import to_epoch_s
from suanli.domain.catalog_data import CATALOG
from suanli.domain.fleet_format import parse_fleet
from suanli.store.db import unit_of_work_factory
from suanli.store.rows import AllocationRow, RentalEventRow, RentalRow, RentalRunRow, TenantRow

GOAL_S = 10.0
NODES = 1250
PROVIDERS = ("prov-a", "prov-b", "prov-c", "platform")
RATES = (2_500_000, 3_000_000, 750_000, 1_234_567, 40_000_000)  # micros per hour
CHUNK = 10_000  # rows per bulk INSERT statement


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self.at = now

    def now(self) -> datetime:
        return self.at


def provider_fleet_toml(nodes: int = NODES) -> str:
    """The API bench's fleet, each block of nodes owned by one of `PROVIDERS` in turn."""
    blocks = fleet_toml(nodes).split("[[nodes]]\n")
    return blocks[0] + "".join(
        f'[[nodes]]\nprovider = "{PROVIDERS[number % len(PROVIDERS)]}"\n{block}'
        for number, block in enumerate(blocks[1:])
    )


def put_fleet(uow: UnitOfWorkFactory, toml: str, now: datetime) -> list[str]:
    """Store the fleet; its node names."""
    fleet = parse_fleet(toml, source="meter bench", catalog=CATALOG)
    names = [node.name for node in fleet.nodes]
    with uow() as work:
        work.fleet.put(toml, names, now)
        work.commit()
    return names


def _insert(engine: Engine, table: Any, rows: Sequence[dict[str, Any]]) -> None:
    with engine.begin() as connection:
        for start in range(0, len(rows), CHUNK):
            connection.execute(insert(table), rows[start : start + CHUNK])


def seed_tenants(engine: Engine, count: int, now: datetime) -> list[str]:
    ids = [new_id("ten") for _ in range(count)]
    rows = [{"id": i, "name": f"meter-{n}", "role": "tenant", "created_at": now} for n, i in enumerate(ids)]
    _insert(engine, TenantRow.__table__, rows)
    return ids


def seed_rentals(
    engine: Engine,
    count: int,
    *,
    tenants: Sequence[str],
    nodes: Sequence[str],
    started_at: datetime,
    rates: Sequence[int] = RATES,
    ended_at: datetime | None = None,
    seed: int = 7,
) -> list[tuple[str, int, datetime, datetime | None]]:
    """`count` placed rentals, round robin over tenants, nodes and rates, with bulk INSERTs.

    Each has an allocation on its node and an agent-reported run starting `started_at` plus 0..59 s. With
    `ended_at` they are `stopped` with a stop event there (plus 0..59 s, not before the start), else
    `running`. Returns (id, rate, billed start, billed end or None) per rental.
    """
    draw = random.Random(seed)
    rentals, allocations, runs, events, result = [], [], [], [], []
    for number in range(count):
        rental_id = new_id("rnt")
        rate = rates[number % len(rates)]
        start = started_at + timedelta(seconds=draw.randrange(60))
        end = None if ended_at is None else max(start, ended_at + timedelta(seconds=draw.randrange(60)))
        tenant, node = tenants[number % len(tenants)], nodes[number % len(nodes)]
        rentals.append(
            {
                "id": rental_id,
                "tenant_id": tenant,
                "state": "running" if end is None else "stopped",
                "spec": {"gpu_model": "H100", "gpus": 1, "command": ["sleep", "infinity"]},
                "created_at": started_at - timedelta(seconds=5),
                "price_micros_per_hour": rate,
                "fingerprint": "",
                "placed_at": started_at - timedelta(seconds=1),
            }
        )
        allocations.append(
            {
                "rental_id": rental_id,
                "ordinal": 0,
                "node": node,
                "cpu_milli": 1000,
                "memory_mib": 1024,
                "booked_at": started_at - timedelta(seconds=1),  # at its placement
            }
        )
        runs.append(
            {
                "rental_id": rental_id,
                "node": node,
                "state": "running" if end is None else "stopped",
                "started_at": start,
                "ended_at": end,
                "last_heartbeat_at": start if end is None else end,
            }
        )
        if end is not None:
            events.append({"rental_id": rental_id, "at": end, "kind": "stopped", "message": "seeded"})
        result.append((rental_id, rate, start, end))
    _insert(engine, RentalRow.__table__, rentals)
    _insert(engine, AllocationRow.__table__, allocations)
    _insert(engine, RentalRunRow.__table__, runs)
    if events:
        _insert(engine, RentalEventRow.__table__, events)
    return result


def grant(uow: UnitOfWorkFactory, tenant: str, amount_micros: int, now: datetime) -> None:
    with uow() as work:
        tx = Transaction.chained(
            work.ledger.head_hash(),
            key=f"credit:{tenant}:bench-grant",
            kind=TxKind.GRANT,
            at_s=to_epoch_s(now),
            postings=grant_postings(tenant, amount_micros),
            ref=tenant,
            memo="meter bench grant",
        )
        work.ledger.append(tx, now)
        work.commit()


def stop(engine: Engine, rental_ids: Sequence[str], at: datetime) -> None:
    """Stop rentals as the rental service does: state `stopped` and a `stopped` event at `at`."""
    with engine.begin() as connection:
        for start in range(0, len(rental_ids), CHUNK):
            chunk = list(rental_ids[start : start + CHUNK])
            connection.execute(update(RentalRow).where(RentalRow.id.in_(chunk)).values(state="stopped"))
        connection.execute(
            insert(RentalEventRow.__table__),
            [{"rental_id": r, "at": at, "kind": "stopped", "message": "bench"} for r in rental_ids],
        )


def run(args: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        engine = bench_engine(stack, args.database_url, "suanli_meter_bench")
        uow = unit_of_work_factory(engine)
        now = datetime.now(UTC).replace(microsecond=0)
        clock = FixedClock(now)
        billing = BillingService(
            uow, clock, CATALOG, FleetCache(CATALOG), prepaid=False, pipeline_meter=not args.sequential
        )

        started = time.perf_counter()
        nodes = put_fleet(uow, provider_fleet_toml(), now)
        tenants = seed_tenants(engine, args.tenants, now)
        seeded = seed_rentals(
            engine, args.rentals, tenants=tenants, nodes=nodes, started_at=now - timedelta(hours=1)
        )
        for tenant in tenants[: max(1, len(tenants) // 10)]:
            grant(uow, tenant, 500_000_000, now)
        seed_s = time.perf_counter() - started

        passes: list[dict[str, Any]] = []

        def meter(label: str, at: datetime) -> None:
            clock.at = at
            begun, cpu = time.perf_counter(), time.process_time()
            added = billing.meter(at, batch=args.batch)
            wall, cpu = time.perf_counter() - begun, time.process_time() - cpu
            passes.append(
                {
                    "pass": label,
                    "transactions": added,
                    "wall_s": wall,
                    "client_cpu_s": cpu,
                    "per_s": added / wall,
                }
            )
            print(f"{label}: {added} transactions in {wall:.2f} s", file=sys.stderr, flush=True)

        meter("first pass at now", now)
        meter("second pass, same instant", now)
        meter("pass at now + 60 s", now + timedelta(seconds=60))
        stopped = [rental_id for rental_id, *_ in seeded[::2]]
        stop(engine, stopped, now + timedelta(seconds=90))
        meter("half stopped: final charges, now + 120 s", now + timedelta(seconds=120))
        meter("the open half only, now + 180 s", now + timedelta(seconds=180))

        begun = time.perf_counter()
        with uow() as work:
            transactions = work.ledger.transactions(None)
            stored = work.ledger.balances(None)
        verification = verify(transactions, expected_balances=stored)
        verify_s = time.perf_counter() - begun
    return {
        "database": "PostgreSQL (throw-away)" if args.database_url is None else "PostgreSQL",
        "cpu_count": os.cpu_count(),
        "load_average_at_end": os.getloadavg()[0],
        "rentals": args.rentals,
        "tenants": args.tenants,
        "batch": args.batch,
        "pipelined": not args.sequential,
        "seed_s": seed_s,
        "passes": passes,
        "ledger": {
            "transactions": len(transactions),
            "ok": verification.ok,
            "problems": list(verification.problems)[:10],
            "sum_of_balances": sum(stored.values()),
            "verify_s": verify_s,
        },
        "goal_first_pass_s": GOAL_S,
        "goal_met": passes[0]["wall_s"] < GOAL_S,
    }


def show(result: dict[str, Any], console: Console) -> None:
    table = Table(
        title=f"meter on PostgreSQL: {result['rentals']:,} running rentals, {result['tenants']} tenants, "
        f"batches of {result['batch']}, {'pipelined' if result['pipelined'] else 'sequential'} "
        f"({result['cpu_count']} CPUs)"
    )
    for column in ("pass", "transactions", "wall (s)", "meter process CPU (s)", "tx / s"):
        table.add_column(column, justify="left" if column == "pass" else "right")
    for row in result["passes"]:
        table.add_row(
            row["pass"],
            f"{row['transactions']:,}",
            f"{row['wall_s']:.2f}",
            f"{row['client_cpu_s']:.2f}",
            f"{row['per_s']:,.0f}",
        )
    console.print(table)
    ledger = result["ledger"]
    console.print(
        f"goal: first pass < {result['goal_first_pass_s']:.0f} s: "
        f"{'met' if result['goal_met'] else 'MISSED'}; "
        f"seeding {result['seed_s']:.1f} s; ledger {ledger['transactions']:,} transactions, "
        f"{'verifies' if ledger['ok'] else 'DOES NOT VERIFY'} ({ledger['verify_s']:.1f} s), "
        f"balances sum to {ledger['sum_of_balances']}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser("suanli.api.meter_bench", __doc__)
    parser.add_argument("--rentals", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--batch", type=int, default=2000, help="rentals per database transaction")
    parser.add_argument(
        "--sequential", action="store_true", help="write each batch before reading the next (as on SQLite)"
    )
    bench_main(parser, run, show, argv)


if __name__ == "__main__":
    main()
