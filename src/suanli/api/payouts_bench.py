"""Payouts benchmark: what a page of `GET /v1/payouts` costs on a long ledger, on PostgreSQL or SQLite.

`python -m suanli.api.payouts_bench [--database-url URL] [--transactions N] [--providers P] [--limit L]
[--json FILE]`

Without `--database-url` it starts a throw-away PostgreSQL (`suanli.store.throwaway_pg`) and migrates it; a
`sqlite:///FILE` URL measures SQLite. It appends N charge transactions (default 50,000) in chain order, as the
meter's passes do (`SqlLedger.append_many`, batches of 1,000): N/10 rentals charged ten times each, pass after
pass, on P providers' nodes (every tenth rental on two providers' nodes: a line of each). Then it times a page
of `limit` lines (`BillingService.payouts`, the code behind `GET /v1/payouts`: the lines and the providers'
balances) at the first, middle and last page, for an admin (every provider) and for one provider. Medians of
20 reads.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from suanli.api.bench import bench_engine, bench_main, bench_parser
from suanli.app.billing import BillingService
from suanli.app.fleet import FleetCache
from suanli.app.records import Caller, Tenant
from suanli.domain.billing.ledger import GENESIS_HASH, AccountId, Posting, Transaction, TxKind
from suanli.domain.catalog_data import CATALOG
from suanli.store.db import unit_of_work_factory

READS = 20
BATCH = 1000  # transactions per append, as a meter batch
CHARGES_PER_RENTAL = 10
TENANTS = 37
NOW = datetime(2030, 1, 1, tzinfo=UTC)
ADMIN = Caller(Tenant("ten_admin", "admin", "admin", NOW), "key_bench_admin")


class FixedClock:
    def now(self) -> datetime:
        return NOW


def _provider(n: int) -> str:
    return f"prov-{n:03d}"


def _charge(prev_hash: str, rental: int, nth: int, providers: int) -> Transaction:
    """The `nth` charge of `rental`: its tenant pays, its provider(s) get 85 %, the platform the rest."""
    micros = 1_000_000 + 7 * rental + nth
    payable = micros * 85 // 100
    owners = [_provider(rental % providers)]
    if rental % 10 == 0:
        owners.append(_provider((rental + 1) % providers))
    parts = [payable // len(owners)] * len(owners)
    parts[0] += payable - sum(parts)
    postings = [
        Posting(AccountId.tenant_cash(f"ten_{rental % TENANTS:02d}"), -micros),
        Posting(AccountId.platform_revenue(), micros - payable),
        *(Posting(AccountId.provider_payable(o), part) for o, part in zip(owners, parts, strict=True)),
    ]
    ref = f"rnt_{rental:06d}"
    key = f"charge:{ref}:{nth}"
    at_s = int(NOW.timestamp()) + 60 * nth
    return Transaction.chained(prev_hash, key=key, kind=TxKind.CHARGE, at_s=at_s, postings=postings, ref=ref)


def _fill(uow: Any, transactions: int, providers: int) -> float:
    """Append `transactions` charges in batches; the seconds it took."""
    rentals = max(1, transactions // CHARGES_PER_RENTAL)
    head, batch, started = GENESIS_HASH, [], time.perf_counter()
    for index in range(transactions):
        tx = _charge(head, index % rentals, 1 + index // rentals, providers)
        batch.append(tx)
        head = tx.hash
        if len(batch) == BATCH or index == transactions - 1:
            with uow() as u:
                u.ledger.append_many(batch, NOW)
                u.commit()
            batch = []
    return time.perf_counter() - started


def _cursors(billing: BillingService, provider: str | None, limit: int) -> list[str | None]:
    """The `after` of every page, in order (None: the first), read by following the pages once."""
    cursors: list[str | None] = [None]
    while (after := billing.payouts(ADMIN, provider, cursors[-1], limit).next_after) is not None:
        cursors.append(after)
    return cursors


def _median_ms(billing: BillingService, provider: str | None, after: str | None, limit: int) -> float:
    times = []
    for _ in range(READS):
        started = time.perf_counter()
        billing.payouts(ADMIN, provider, after, limit)
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 3)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        engine = bench_engine(stack, args.database_url, "suanli_payouts_bench")
        uow = unit_of_work_factory(engine)
        fill_s = _fill(uow, args.transactions, args.providers)
        billing = BillingService(uow, FixedClock(), CATALOG, FleetCache(CATALOG))
        pages: dict[str, Any] = {}
        for who, provider in (
            ("all providers (admin)", None),
            (f"one provider ({_provider(1)})", _provider(1)),
        ):
            cursors = _cursors(billing, provider, args.limit)
            at = {"first": cursors[0], "middle": cursors[len(cursors) // 2], "last": cursors[-1]}
            pages[who] = {
                "pages": len(cursors),
                **{
                    f"{name}_ms": _median_ms(billing, provider, after, args.limit)
                    for name, after in at.items()
                },
            }
    return {
        "database": engine.dialect.name,
        "transactions": args.transactions,
        "rentals": max(1, args.transactions // CHARGES_PER_RENTAL),
        "providers": args.providers,
        "limit": args.limit,
        "fill_s": round(fill_s, 1),
        "pages": pages,
    }


def show(result: dict[str, Any], console: Console) -> None:
    title = (
        f"a page of {result['limit']} payout lines on {result['database']}: {result['transactions']:,} "
        f"charges of {result['rentals']:,} rentals on {result['providers']} providers (ms, median of {READS})"
    )
    table = Table(title=title)
    for column in ("whose", "pages", "first", "middle", "last"):
        table.add_column(column, justify="left" if column == "whose" else "right")
    for who, found in result["pages"].items():
        times = (f"{found[f'{name}_ms']:.3f}" for name in ("first", "middle", "last"))
        table.add_row(who, f"{found['pages']:,}", *times)
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser("suanli.api.payouts_bench", __doc__)
    parser.add_argument("--transactions", type=int, default=50_000)
    parser.add_argument("--providers", type=int, default=20)
    parser.add_argument("--limit", type=int, default=100, help="lines a page (1 to 1,000)")
    bench_main(parser, run, show, argv)


if __name__ == "__main__":
    main()
