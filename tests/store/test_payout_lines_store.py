"""Payout lines on the real store (SQLite and PostgreSQL): kept with the postings in the transaction that
appends them (single appends and the meter's bulk batches), a page of `payouts` is a keyset range of its own
lines on their index (never a sum over the postings), pages give each (provider, rental) line once with the
postings' sums, the server's verify names a line off its postings, and the migration fills the lines from the
postings already stored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from conftest import T0
from suanli.app.billing import BillingService
from suanli.app.fleet import FleetCache
from suanli.app.records import Caller, Tenant
from suanli.domain.billing.ledger import AccountId, AccountKind, Posting, Transaction, TxKind
from suanli.domain.catalog_data import CATALOG
from suanli.store.db import downgrade, migrate

ADMIN = Caller(Tenant("ten_admin", "admin", "admin", T0), "key_admin")
PROVIDERS = tuple(f"prov-{letter}" for letter in "abcdef")
RENTALS = 25
Line = tuple[str, str, int, int]  # provider, rental, micros, transactions


class FixedClock:
    def now(self):
        return T0


@pytest.fixture
def env(store):
    engine, factory = store
    return engine, factory, BillingService(factory, FixedClock(), CATALOG, FleetCache(CATALOG))


def _charges(head: str, round_: int) -> list[Transaction]:
    """One charge of each rental that is still charged in `round_` (rental r is charged 1 + r % 3 times), on
    its provider's nodes (every fourth rental on two providers': a line of each), chained on `head`."""
    txs = []
    for rental in range(RENTALS):
        if round_ > rental % 3:
            continue
        micros = 1_000_000 + 1_000 * rental + round_
        owners = [PROVIDERS[rental % len(PROVIDERS)]]
        if rental % 4 == 0:
            owners.append(PROVIDERS[(rental + 1) % len(PROVIDERS)])
        parts = [micros * 85 // 100 // len(owners) + index for index in range(len(owners))]
        postings = [
            Posting(AccountId.tenant_cash("ten_a"), -micros),
            Posting(AccountId.platform_revenue(), micros - sum(parts)),
            *(Posting(AccountId.provider_payable(o), p) for o, p in zip(owners, parts, strict=True)),
        ]
        ref = f"rnt_{rental:03d}"
        tx = Transaction.chained(
            head, key=f"charge:{ref}:{round_}", kind=TxKind.CHARGE, at_s=round_, postings=postings, ref=ref
        )
        txs.append(tx)
        head = tx.hash
    return txs


def _reversal(head: str, provider: str, ref: str, micros: int) -> Transaction:
    """An adjustment that takes back from `provider` what rental `ref` paid it: that line sums to zero."""
    postings = [
        Posting(AccountId.provider_payable(provider), -micros),
        Posting(AccountId.tenant_cash("ten_a"), micros),
    ]
    return Transaction.chained(
        head, key=f"reverse:{ref}", kind=TxKind.ADJUSTMENT, at_s=9, postings=postings, ref=ref
    )


def _fill(factory) -> list[Transaction]:
    """Three rounds of charges (the first and third in bulk, as the meter appends; the second one at a time)
    and a reversal of one provider's line; every transaction appended, in chain order."""
    appended: list[Transaction] = []
    for round_ in range(3):
        with factory() as u:
            txs = _charges(u.ledger.head_hash(), round_)
            if round_ == 1:
                for tx in txs:
                    u.ledger.append(tx, T0)
            else:
                u.ledger.append_many(txs, T0)
            u.commit()
        appended += txs
    zeroed = next(p for p in appended[3].postings if p.account.kind is AccountKind.PROVIDER_PAYABLE)
    with factory() as u:
        reversal = _reversal(
            u.ledger.head_hash(), zeroed.account.owner, appended[3].ref, zeroed.amount_micros
        )
        u.ledger.append(reversal, T0)
        u.commit()
    return [*appended, reversal]


def _expected(txs: Sequence[Transaction]) -> list[Line]:
    """The lines the postings make, those that sum to zero left out, in (provider, rental) order."""
    sums: dict[tuple[str, str], tuple[int, int]] = {}
    for tx in txs:
        for p in tx.postings:
            if p.account.kind is AccountKind.PROVIDER_PAYABLE:
                micros, count = sums.get((p.account.owner, tx.ref), (0, 0))
                sums[(p.account.owner, tx.ref)] = (micros + p.amount_micros, count + 1)
    return [(o, r, micros, count) for (o, r), (micros, count) in sorted(sums.items()) if micros != 0]


def _paged(billing: BillingService, provider: str | None, limit: int) -> tuple[list[Line], dict[str, int]]:
    """Every line of the pages from the first, following `next_after`; each provider's balance as given."""
    lines: list[Line] = []
    balances: dict[str, int] = {}
    after = None
    while True:
        page = billing.payouts(ADMIN, provider, after, limit)
        assert sum(len(p.lines) for p in page.payouts) <= limit
        for payout in page.payouts:
            assert balances.setdefault(payout.provider, payout.payable_micros) == payout.payable_micros
            lines += [(payout.provider, x.ref, x.amount_micros, x.transactions) for x in payout.lines]
        if page.next_after is None:
            return lines, balances
        after = page.next_after


def test_payout_pages_give_each_provider_rental_line_once_with_its_postings_sums(env) -> None:
    """6 providers x 25 rentals (some on two providers, charged one to three times, in bulk and one at a
    time, one line taken back to zero): at page sizes 1, 7, 100 and 1,000, for an admin and for each provider,
    the pages give every line once, in order, with its postings' micros and transaction count; the zero line
    is left out; each provider's balance is the sum of its lines."""
    _, factory, billing = env
    expected = _expected(_fill(factory))
    assert len(expected) == RENTALS + len(range(0, RENTALS, 4)) - 1
    for limit in (1, 7, 100, 1000):
        lines, balances = _paged(billing, None, limit)
        assert lines == expected
        assert balances == {o: sum(x[2] for x in expected if x[0] == o) for o in PROVIDERS}
    for provider in PROVIDERS:
        lines, _ = _paged(billing, provider, 3)
        assert lines == [x for x in expected if x[0] == provider]
    page = billing.payouts(ADMIN, PROVIDERS[0], f"{PROVIDERS[1]}/rnt_000", 5)  # a cursor past the provider
    assert [p.lines for p in page.payouts] == [] and page.next_after is None
    with factory() as u:
        assert u.ledger.payout_lines() == u.ledger.posted_payables()
    result, _ = billing.verify(ADMIN)
    assert result.ok, result.problems


def _page_statements(engine: Engine, billing: BillingService, provider: str | None, after: str | None):
    """The SELECT statements (and their parameters) one page of `payouts` runs."""
    seen: list[tuple[str, Any]] = []

    def grab(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", grab)
    try:
        billing.payouts(ADMIN, provider, after, 5)
    finally:
        event.remove(engine, "before_cursor_execute", grab)
    return seen


def _plan(engine: Engine, statement: str, parameters: Any) -> str:
    """The database's plan of `statement`: SQLite's EXPLAIN QUERY PLAN; PostgreSQL's EXPLAIN with sequential
    scans priced out (on a table this small it would read the heap and sort, whatever the indexes)."""
    with engine.connect() as connection:
        cursor = connection.connection.driver_connection.cursor()
        if engine.dialect.name == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + statement, parameters)
            return "\n".join(row[3] for row in cursor.fetchall())
        cursor.execute("SET enable_seqscan = off")
        cursor.execute("EXPLAIN " + statement, parameters)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.parametrize(
    ("provider", "after"),
    [(None, None), (None, "prov-c/rnt_008"), ("prov-c", None), ("prov-c", "prov-c/rnt_008")],
    ids=["first", "past", "provider_first", "provider_past"],
)
def test_a_payouts_page_is_a_range_of_the_open_lines_index_never_a_sum_of_the_postings(
    env, provider: str | None, after: str | None
) -> None:
    """The page's statements read no posting, and its lines' plan is the open-lines index in its order (no
    sort, no grouping), the cursor an index condition: a page costs its own lines, however long the ledger."""
    engine, factory, billing = env
    _fill(factory)
    statements = _page_statements(engine, billing, provider, after)
    assert statements and not [s for s, _ in statements if "ledger_postings" in s]
    (lines,) = [(s, p) for s, p in statements if "ledger_payout_lines" in s]
    plan = _plan(engine, *lines)
    if engine.dialect.name == "sqlite":
        assert "ix_ledger_payout_lines_open" in plan, plan
    else:  # either key in the same order: unanalysed, PostgreSQL may walk the primary key, filtering zeros
        assert "Index Scan using ix_ledger_payout_lines_open" in plan or "ledger_payout_lines_pkey" in plan, (
            plan
        )
    assert "TEMP B-TREE" not in plan and "Sort" not in plan and "Aggregate" not in plan, plan
    if after is not None and engine.dialect.name == "sqlite":
        assert ("SEARCH" in plan and "ref)>(?,?)" in plan) or "ref>?" in plan, plan
    if after is not None and engine.dialect.name == "postgresql":
        assert "Index Cond" in plan and "rnt_008" in plan.split("Index Cond")[1], plan


def test_the_ledger_verify_names_a_payout_line_that_disagrees_with_its_postings(env) -> None:
    engine, factory, billing = env
    _fill(factory)
    assert billing.verify(ADMIN)[0].ok
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE ledger_payout_lines SET amount_micros = amount_micros + 1 WHERE ref = 'rnt_009'")
        )
    result, _ = billing.verify(ADMIN)
    assert not result.ok
    assert [p for p in result.problems if "payout line" in p] == [
        f"payout line prov-d/rnt_009 holds ({1_009_000 * 85 // 100 + 1}, 1) (micros, transactions), its "
        f"postings sum to ({1_009_000 * 85 // 100}, 1)"
    ]


def test_a_transaction_that_does_not_commit_leaves_the_payout_lines_as_they_were(env) -> None:
    """A process that dies before its commit (here: the unit of work left without one) takes its postings
    and its lines' updates with it: the lines never count a charge the ledger does not hold."""
    _, factory, billing = env
    expected = _expected(_fill(factory))
    with factory() as u:
        u.ledger.append_many(_charges(u.ledger.head_hash(), 3), T0)
        u.ledger.append(_reversal(u.ledger.head_hash(), "prov-a", "rnt_000", 5), T0)
    assert _paged(billing, None, 100)[0] == expected
    assert billing.verify(ADMIN)[0].ok


def test_the_migration_fills_the_payout_lines_from_the_postings_already_stored(env) -> None:
    engine, factory, billing = env
    expected = _expected(_fill(factory))
    downgrade(engine, "0049")
    with engine.connect() as connection:
        assert "ledger_payout_lines" not in engine.dialect.get_table_names(connection)
    migrate(engine)
    assert _paged(billing, None, 7)[0] == expected
    with factory() as u:
        assert u.ledger.payout_lines() == u.ledger.posted_payables()
    assert billing.verify(ADMIN)[0].ok
