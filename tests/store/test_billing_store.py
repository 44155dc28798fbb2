"""Billing on the real store (SQLite and PostgreSQL): the meter charges rate x max(N, 60) s exactly once
however often it runs, a preempted rental to its deadline, grants before cash, the provider the charge minus
the commission; the ledger verifies, a tampered posting does not, and the database refuses an unbalanced or
forked transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event, text

from suanli.app.agent_records import RentalRun
from suanli.app.billing import BillingService
from suanli.app.errors import Conflict, Forbidden
from suanli.app.fleet import FleetCache
from suanli.app.records import Caller, Rental, RentalEvent, RentalSpec, Tenant
from suanli.domain.billing.ledger import AccountId, Posting, Transaction, TxKind, verify
from suanli.domain.billing.money import charge_micros
from suanli.domain.catalog_data import CATALOG
from suanli.store.agent_repositories import SqlAgentUnitOfWork
from suanli.store.db import downgrade, make_engine, migrate, session_factory, unit_of_work_factory

T0 = datetime(2030, 1, 1, tzinfo=UTC)
RATE = 2_990_000  # micros per hour
ADMIN = Caller(Tenant("ten_admin", "admin", "admin", T0), "key_admin")


@pytest.fixture
def env(store, clock):
    engine, factory = store
    with factory() as u:
        u.tenants.add(Tenant("ten_admin", "admin", "admin", T0))
        u.tenants.add(Tenant("ten_a", "a", "tenant", T0))
        u.commit()
    billing = BillingService(factory, clock, CATALOG, FleetCache(CATALOG), commission_bp=1500)
    return engine, factory, billing, clock


def _placed(
    factory, rental_id: str, *, ended: str | None = None, after_s: int = 0, deadline_s: int = 0
) -> None:
    with factory() as u:
        u.rentals.add(Rental(rental_id, "ten_a", "pending", RentalSpec(gpu_model="H100", gpus=1), T0))
        assert u.rentals.mark_placed(rental_id, T0, RATE)
        if ended == "stopped":
            u.rentals.set_state(rental_id, "stopped", expect=("placed",), reason=None)
            u.rentals.add_event(rental_id, RentalEvent(T0 + timedelta(seconds=after_s), "stopped"))
        if ended == "preempted":
            u.rentals.give_notice(rental_id, "rnt_x", T0 + timedelta(seconds=deadline_s), expect=("placed",))
            u.rentals.set_state(rental_id, "preempted", expect=("preempting",), reason=None)
            u.rentals.add_event(rental_id, RentalEvent(T0 + timedelta(seconds=after_s), "preempted"))
        u.commit()


def _charged(factory, rental_id: str) -> tuple[int, list[str]]:
    with factory() as u:
        txs = [t for t in u.ledger.transactions(None) if t.ref == rental_id and t.kind is TxKind.CHARGE]
    return sum(-p.amount_micros for t in txs for p in t.postings if p.amount_micros < 0), [t.key for t in txs]


@pytest.mark.parametrize("seconds", [10, 60, 90, 3601])
def test_a_stopped_rental_is_charged_rate_times_max_n_60_exactly_once(env, seconds: int) -> None:
    _, factory, billing, _ = env
    billing.credit(ADMIN, "ten_a", 100_000_000, False, "seed")
    _placed(factory, "rnt_s", ended="stopped", after_s=seconds)
    for offset in (5, 30, seconds // 2, seconds, seconds + 1, 10_000, 10_000, 20_000):
        billing.meter(now=T0 + timedelta(seconds=offset))
    total, keys = _charged(factory, "rnt_s")
    assert total == charge_micros(RATE, max(seconds, 60))
    assert keys == [f"charge:rnt_s:{n}" for n in range(1, len(keys) + 1)]
    assert billing.meter(now=T0 + timedelta(days=1)) == 0


def test_a_live_rental_is_charged_cumulatively_and_the_meter_posts_only_deltas(env) -> None:
    _, factory, billing, _ = env
    _placed(factory, "rnt_live")
    assert billing.meter(now=T0 + timedelta(seconds=10)) == 1  # its 10 s: no minimum charged ahead
    assert _charged(factory, "rnt_live")[0] == charge_micros(RATE, 10)
    assert billing.meter(now=T0 + timedelta(seconds=10)) == 0
    assert billing.meter(now=T0 + timedelta(seconds=600)) == 1
    assert _charged(factory, "rnt_live")[0] == charge_micros(RATE, 600)


@pytest.mark.parametrize(
    ("ended", "started", "charged_s"),
    [
        ("stopped", False, 60),
        ("failed", True, 60),
        ("failed", False, 20),
        ("preempted", False, 20),
        ("lost", False, 20),
    ],
    ids=["stopped", "workload-failed", "failed-before-start", "preempted", "lost"],
)
def test_the_minimum_is_charged_when_the_tenant_ends_a_rental_not_when_the_platform_does(
    env, ended: str, started: bool, charged_s: int
) -> None:
    """A rental its tenant stops (or whose started workload fails) 20 s in pays the 60-s minimum, charged at
    its end; one the platform preempts or loses 20 s in, or whose host fails it before its workload started
    (no agent-reported start), pays its 20 s (it was charged the minimum ahead, past its notice deadline)."""
    _, factory, billing, _ = env
    _placed(factory, "rnt_m")
    if started:  # its agent reported its workload started
        with SqlAgentUnitOfWork(session_factory(env[0])) as u:
            u.agents.put_run(RentalRun("rnt_m", "n1", "running", started_at=T0))
            u.commit()
    billing.meter(now=T0 + timedelta(seconds=10))
    assert _charged(factory, "rnt_m")[0] == charge_micros(RATE, 10)  # while it ran: what it held
    with factory() as u:
        end = T0 + timedelta(seconds=20)
        if ended == "preempted":
            u.rentals.give_notice("rnt_m", "rnt_x", end, expect=("placed",))
        u.rentals.set_state("rnt_m", ended, expect=("placed", "preempting"), reason=None)
        u.rentals.add_event("rnt_m", RentalEvent(end, ended))
        u.commit()
    billing.meter(now=T0 + timedelta(seconds=100))
    assert _charged(factory, "rnt_m")[0] == charge_micros(RATE, charged_s)


def test_an_end_pass_charges_the_ended_rentals_only_and_the_timer_pass_does_not_charge_them_again(
    env,
) -> None:
    """`meter_ended` (a rental's end wakes it) posts the ended rentals' final charges and nothing for the
    live ones; the timer's pass after it charges the live ones and nothing more for the ended ones."""
    _, factory, billing, _ = env
    _placed(factory, "rnt_live1")
    _placed(factory, "rnt_live2")
    _placed(factory, "rnt_end", ended="stopped", after_s=90)
    assert billing.meter_ended(now=T0 + timedelta(seconds=100)) == 1
    assert _charged(factory, "rnt_end") == (charge_micros(RATE, 90), ["charge:rnt_end:1"])
    assert _charged(factory, "rnt_live1") == _charged(factory, "rnt_live2") == (0, [])
    assert billing.meter_ended(now=T0 + timedelta(seconds=200)) == 0  # closed: nothing more

    assert billing.meter(now=T0 + timedelta(seconds=300)) == 2
    assert _charged(factory, "rnt_live1")[0] == _charged(factory, "rnt_live2")[0] == charge_micros(RATE, 300)
    assert _charged(factory, "rnt_end") == (charge_micros(RATE, 90), ["charge:rnt_end:1"])


def test_a_preempted_rental_is_charged_to_its_deadline(env) -> None:
    _, factory, billing, _ = env
    _placed(factory, "rnt_p", ended="preempted", after_s=500, deadline_s=120)
    billing.meter(now=T0 + timedelta(seconds=1_000))
    billing.meter(now=T0 + timedelta(seconds=2_000))
    assert _charged(factory, "rnt_p")[0] == charge_micros(RATE, 120)


def test_grants_are_spent_before_cash_and_the_provider_gets_the_charge_minus_commission(env) -> None:
    _, factory, billing, _ = env
    billing.credit(ADMIN, "ten_a", 50_000, True, "grant-1")
    billing.credit(ADMIN, "ten_a", 1_000_000, False, "cash-1")
    billing.credit(ADMIN, "ten_a", 1_000_000, False, "cash-1")  # same key: posted once
    _placed(factory, "rnt_g", ended="stopped", after_s=90)
    billing.meter(now=T0 + timedelta(seconds=100))
    charge = charge_micros(RATE, 90)
    balance = billing.balance(ADMIN, "ten_a")
    assert (balance.grants_micros, balance.cash_micros) == (0, 1_000_000 - (charge - 50_000))
    with factory() as u:
        balances = u.ledger.balances(None)
    provider = charge * 8500 // 10_000
    assert balances[AccountId.provider_payable("platform")] == provider
    assert balances[AccountId.platform_revenue()] == charge - provider
    result, count = billing.verify(ADMIN)
    assert result.ok, result.problems
    assert count == 3


def test_verify_detects_a_tampered_posting(env) -> None:
    engine, factory, billing, _ = env
    billing.credit(ADMIN, "ten_a", 1_000_000, False, "cash")
    _placed(factory, "rnt_t", ended="stopped", after_s=300)
    billing.meter(now=T0 + timedelta(seconds=400))
    assert billing.verify(ADMIN)[0].ok
    tamper = text(
        "UPDATE ledger_postings SET amount_micros = amount_micros - 1 "
        "WHERE id = (SELECT MIN(id) FROM ledger_postings WHERE account_kind = 'tenant_cash')"
    )
    with pytest.raises(Exception, match="append-only"), engine.begin() as connection:
        connection.execute(tamper)
    with engine.begin() as connection:  # someone with the power to lift the guards (superuser, file access)
        _lift_ledger_guards(connection)
        connection.execute(tamper)
    with factory() as u:
        transactions = u.ledger.transactions(None)
    result = verify(transactions)
    assert not result.ok
    assert any("hash does not match" in p for p in result.problems)


def _lift_ledger_guards(connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SET LOCAL session_replication_role = replica"))  # no triggers fire
    else:
        connection.execute(text("DROP TRIGGER ledger_postings_no_update"))


def test_the_database_keeps_the_ledger_append_only(env) -> None:
    engine, _, billing, _ = env
    billing.credit(ADMIN, "ten_a", 1_000, False, "first")
    statements = [
        "UPDATE ledger_transactions SET memo = 'edited'",
        "DELETE FROM ledger_postings",
        "DELETE FROM ledger_transactions",
    ]
    if engine.dialect.name == "postgresql":
        statements.append("TRUNCATE ledger_postings, ledger_transactions")
    for statement in statements:
        with pytest.raises(Exception, match="append-only"), engine.begin() as connection:
            connection.execute(text(statement))
    assert billing.verify(ADMIN)[0].ok


def test_the_guard_and_the_expected_start_migrations_go_down_and_up_again(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine)
    downgrade(engine, "0010")
    tx = text(
        "INSERT INTO ledger_transactions (seq, key, kind, at_s, ref, memo, created_at, prev_hash, hash, "
        "postings_sum) VALUES (1, 'k', 'top_up', 0, '', '', :at, 'p', 'h', 0)"
    )
    postings = text(
        "INSERT INTO ledger_postings (tx_seq, account_kind, owner, amount_micros) "
        "VALUES (1, 'external_cash', 'platform', -5), (1, 'tenant_cash', 'ten_a', 5)"
    )
    with engine.begin() as connection:  # unguarded again: rows can be written and deleted
        connection.execute(tx, {"at": T0})
        connection.execute(postings)
        assert connection.execute(text("DELETE FROM ledger_postings")).rowcount == 2
        connection.execute(postings)
    migrate(engine)
    with pytest.raises(Exception, match="append-only"), engine.begin() as connection:
        connection.execute(text("DELETE FROM ledger_postings"))
    engine.dispose()


def test_the_database_refuses_unbalanced_and_forked_transactions(env) -> None:
    engine, factory, billing, _ = env
    billing.credit(ADMIN, "ten_a", 1_000, False, "first")
    with factory() as u:
        head = u.ledger.head_hash()
        genesis_fork = Transaction.chained(
            "0" * 64,
            key="fork",
            kind=TxKind.ADJUSTMENT,
            at_s=0,
            postings=(Posting(AccountId.promotions(), -1), Posting(AccountId.tenant_grants("ten_a"), 1)),
        )
        with pytest.raises(Conflict):
            u.ledger.append(genesis_fork, T0)
    with pytest.raises(Exception), engine.begin() as connection:  # noqa: B017 - IntegrityError by dialect
        connection.execute(
            text(
                "INSERT INTO ledger_transactions (key, kind, at_s, ref, memo, created_at, prev_hash, hash, "
                "postings_sum) VALUES ('bad', 'adjustment', 0, '', '', :at, :prev, 'x', 5)"
            ),
            {"at": T0, "prev": head},
        )


def test_payouts_sum_each_providers_payable_per_rental_and_are_scoped_by_role(env) -> None:
    _, factory, billing, _ = env
    billing.credit(ADMIN, "ten_a", 10_000_000, False, "cash-p")
    _placed(factory, "rnt_p1", ended="stopped", after_s=90)
    _placed(factory, "rnt_p2")
    billing.meter(now=T0 + timedelta(seconds=100))
    billing.meter(now=T0 + timedelta(seconds=400))  # rnt_p2 again: a second charge transaction
    share1 = charge_micros(RATE, 90) * 8500 // 10_000
    with factory() as u:
        payable = u.ledger.balances(None)[AccountId.provider_payable("platform")]
    (payout,) = billing.payouts(ADMIN).payouts
    assert payout.provider == "platform" and payout.payable_micros == payable
    assert [(x.ref, x.transactions) for x in payout.lines] == [("rnt_p1", 1), ("rnt_p2", 2)]
    assert payout.lines[0].amount_micros == share1
    platform = Caller(Tenant("ten_p", "platform", "provider", T0), "key_p")
    assert billing.payouts(platform).payouts == [payout]
    assert billing.payouts(Caller(Tenant("ten_q", "other", "provider", T0), "key_q")).payouts[0].lines == ()
    with pytest.raises(Forbidden):
        billing.payouts(Caller(Tenant("ten_q", "other", "provider", T0), "key_q"), "platform")
    with pytest.raises(Forbidden):
        billing.payouts(Caller(Tenant("ten_a", "a", "tenant", T0), "key_a"))


def test_running_balances_follow_every_append(env) -> None:
    """Single appends (credits) and the meter's bulk batches keep `ledger_balances` equal to the postings."""
    _, factory, billing, _ = env
    billing.credit(ADMIN, "ten_a", 1_000_000, False, "cash")
    billing.credit(ADMIN, "ten_a", 50_000, True, "grant")
    for number in range(5):
        _placed(factory, f"rnt_{number}", ended="stopped" if number % 2 else None, after_s=100 + number)
    billing.meter(now=T0 + timedelta(seconds=200))
    billing.meter(now=T0 + timedelta(seconds=400))
    with factory() as u:
        running, posted = u.ledger.balances(None), u.ledger.posted_balances()
        mine = u.ledger.balances(["ten_a"])
    assert running == posted and sum(running.values()) == 0
    assert mine == {a: v for a, v in posted.items() if a.owner == "ten_a"} and len(mine) == 2
    assert billing.verify(ADMIN)[0].ok


def test_verify_reports_a_running_balance_that_drifted(env) -> None:
    engine, _, billing, _ = env
    billing.credit(ADMIN, "ten_a", 1_000_000, False, "cash")
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE ledger_balances SET balance_micros = balance_micros + 1 WHERE owner = 'ten_a'")
        )
    result, _ = billing.verify(ADMIN)
    assert [p for p in result.problems if "tenant_cash" in p and "stated 1000001" in p]


def test_the_migration_fills_running_balances_from_stored_postings(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate(engine, "0007")
    with engine.begin() as connection:
        for seq, (owner, amount) in enumerate((("ten_a", 700), ("ten_a", 300), ("ten_b", 5)), start=1):
            connection.execute(
                text(
                    "INSERT INTO ledger_transactions (seq, key, kind, at_s, ref, memo, created_at, prev_hash,"
                    " hash, postings_sum) VALUES (:seq, :key, 'top_up', 0, '', '', :at, :prev, :hash, 0)"
                ),
                {"seq": seq, "key": f"k{seq}", "at": T0, "prev": f"p{seq}", "hash": f"h{seq}"},
            )
            connection.execute(
                text(
                    "INSERT INTO ledger_postings (tx_seq, account_kind, owner, amount_micros) VALUES"
                    " (:seq, 'external_cash', 'platform', :minus), (:seq, 'tenant_cash', :owner, :amount)"
                ),
                {"seq": seq, "owner": owner, "amount": amount, "minus": -amount},
            )
    migrate(engine)
    with unit_of_work_factory(engine)() as u:
        assert u.ledger.balances(None) == {
            AccountId.tenant_cash("ten_a"): 1000,
            AccountId.tenant_cash("ten_b"): 5,
            AccountId.external_cash(): -1005,
        }
    engine.dispose()


def test_money_facts_read_in_one_query_agree_with_the_single_reads(env) -> None:
    from suanli.app.records import ContractRecord, PriceEntry
    from suanli.domain.billing.plans import PaymentMode, PaymentTerms, Plan, PlanKind

    _, factory, billing, _ = env
    with factory() as u:
        empty = u.terms.money_facts("ten_a")
    assert (empty.plan_count, empty.contract_count, empty.cash_micros, empty.terms) == (0, 0, 0, None)
    billing.credit(ADMIN, "ten_a", 1_000_000, False, "cash")
    billing.credit(ADMIN, "ten_a", 70_000, True, "grant")
    with factory() as u:
        u.terms.add_plan(Plan("pln_1", "ten_a", PlanKind.MEMBERSHIP, 1000, 5, 0, 0, 10**10), T0)
        end = T0 + timedelta(days=1)
        u.contracts.add(ContractRecord("ctr_1", "ten_a", "H100-SXM-80GB", 2, "eu", T0, end, T0))
        u.terms.set_payment_terms("ten_a", PaymentTerms(PaymentMode.POSTPAID, 5_000), T0)
        u.prices.add(PriceEntry("H100-SXM-80GB", "*", "on_demand", 1_000, T0, "test"))
        u.commit()
    with factory() as u:
        facts = u.terms.money_facts("ten_a")
        balances = u.ledger.balances(["ten_a"])
        assert facts.price_stamp == u.prices.stamp()
        assert facts.terms == u.terms.payment_terms("ten_a")[0] == PaymentTerms(PaymentMode.POSTPAID, 5_000)
    assert (facts.plan_count, facts.contract_count) == (1, 1)
    assert facts.cash_micros == balances[AccountId.tenant_cash("ten_a")] == 1_000_000
    assert facts.grants_micros == balances[AccountId.tenant_grants("ten_a")] == 70_000


def test_charged_since_sums_what_a_tenant_paid_in_charges(env) -> None:
    _, factory, billing, _ = env
    billing.credit(ADMIN, "ten_a", 1_000_000, False, "cash")
    _placed(factory, "rnt_s", ended="stopped", after_s=120)
    billing.meter(now=T0 + timedelta(seconds=200))
    start = int(T0.timestamp())
    with factory() as u:
        assert u.ledger.charged_since(["ten_a"], start) == {"ten_a": charge_micros(RATE, 120)}
        assert u.ledger.charged_since(["ten_a"], start + 10_000) == {}  # stamped before: not counted
        assert u.ledger.charged_since(["ten_b"], start) == {}


def test_a_rental_is_billed_the_whole_seconds_it_held_counted_from_its_start(env) -> None:
    """Placed at .9 of a second and preempted 84.42 s later: 84 s, not the 85 that cutting both ends to the
    clock's seconds gave (a second past its notice deadline)."""
    _, factory, billing, _ = env
    placed = T0 + timedelta(seconds=0.9)
    deadline = placed + timedelta(seconds=84.42)
    with factory() as u:
        u.rentals.add(Rental("rnt_f", "ten_a", "pending", RentalSpec(gpu_model="H100", gpus=1), T0))
        assert u.rentals.mark_placed("rnt_f", placed, RATE)
        u.rentals.give_notice("rnt_f", "rnt_x", deadline, expect=("placed",))
        u.rentals.set_state("rnt_f", "preempted", expect=("preempting",), reason=None)
        u.rentals.add_event("rnt_f", RentalEvent(deadline, "preempted"))
        u.commit()
    billing.meter(now=T0 + timedelta(seconds=200))
    assert _charged(factory, "rnt_f")[0] == charge_micros(RATE, 84)


class _ReadBeforeTheOtherCommitted:
    """A unit of work of a second process whose ledger read came before the first one's credit committed
    (it sees no transaction under the key), as when two servers take the same credit at once."""

    def __init__(self, factory) -> None:
        self.uow = factory()

    def __enter__(self):
        uow = self.uow.__enter__()
        uow.ledger.get = lambda key: None
        return uow

    def __exit__(self, *exc) -> None:
        self.uow.__exit__(*exc)


def test_a_grant_credited_by_two_processes_at_once_is_made_once_and_both_answer_it(env) -> None:
    """The second's grant row collided before its ledger append: an IntegrityError (a 500), not a retry."""
    _, factory, billing, clock = env
    first = billing.credit(ADMIN, "ten_a", 50_000, True, "race")
    attempts = iter([_ReadBeforeTheOtherCommitted(factory)])
    second_process = BillingService(
        lambda: next(attempts, None) or factory(), clock, CATALOG, FleetCache(CATALOG)
    )
    assert second_process.credit(ADMIN, "ten_a", 50_000, True, "race") == first
    with factory() as u:
        assert [g.amount_micros for g in u.terms.grants("ten_a")] == [50_000]
        assert u.ledger.balances(["ten_a"])[AccountId.tenant_grants("ten_a")] == 50_000


def test_a_tenants_ledger_pages_hold_each_of_its_transactions_once_among_other_tenants(env) -> None:
    """A tenant's pages (a keyset on seq over its postings) give each of its transactions exactly once, in
    chain order, none of another tenant's, a charge with two postings to it (grants and cash) once; an
    admin's pages give every transaction once."""
    _, factory, billing, _ = env
    with factory() as u:
        u.tenants.add(Tenant("ten_b", "b", "tenant", T0))
        u.commit()
    billing.credit(ADMIN, "ten_a", 1_000, True, "grant")  # spent first: the charge posts to grants and cash
    for n in range(12):
        billing.credit(ADMIN, "ten_a", 1_000_000, False, f"a-{n}")
        billing.credit(ADMIN, "ten_b", 1_000, False, f"b-{n}")
        billing.credit(ADMIN, "ten_b", 2_000, False, f"b2-{n}")
    _placed(factory, "rnt_pg", ended="stopped", after_s=90)
    billing.meter(now=T0 + timedelta(seconds=100))

    def pages(owner: str | None, limit: int) -> list[int]:
        seqs: list[int] = []
        with factory() as u:
            while page := u.ledger.page(owner, seqs[-1] if seqs else 0, limit):
                assert len(page) <= limit
                seqs += [seq for seq, _ in page]
        return seqs

    with factory() as u:
        everything = u.ledger.page(None, 0, 1_000)
        mine = [seq for seq, tx in everything if any(p.account.owner == "ten_a" for p in tx.postings)]
    assert len(mine) == 1 + 12 + 1 and len(everything) == 1 + 36 + 1
    for limit in (1, 5, 7, 100):
        assert pages("ten_a", limit) == mine
        assert pages(None, limit) == [seq for seq, _ in everything]
    with factory() as u:
        charge = u.ledger.page("ten_a", mine[-2], 5)
    assert [tx.kind for _, tx in charge] == [TxKind.CHARGE]
    assert len([p for p in charge[0][1].postings if p.account.owner == "ten_a"]) == 2


def test_a_tenants_ledger_binds_no_parameter_per_transaction(env) -> None:
    """PostgreSQL takes at most 65,535 bind parameters in a statement: a tenant's ledger (whole, or a page)
    binds as many for 40 transactions as for 1, so one past 65,535 transactions reads as any other."""
    engine, factory, billing, _ = env
    bound: list[int] = []

    def count(_conn, _cursor, _statement, parameters, _context, _many) -> None:
        bound.append(len(parameters or ()))

    def most_bound(read: Callable[[], object]) -> int:
        bound.clear()
        event.listen(engine, "before_cursor_execute", count)
        try:
            read()
        finally:
            event.remove(engine, "before_cursor_execute", count)
        return max(bound)

    billing.credit(ADMIN, "ten_a", 1_000, False, "first")
    with factory() as u:
        one = (
            most_bound(lambda: u.ledger.transactions("ten_a")),
            most_bound(lambda: u.ledger.page("ten_a", 0, 1000)),
        )
    for n in range(39):
        billing.credit(ADMIN, "ten_a", 1_000, False, f"more-{n}")
    with factory() as u:
        assert len(u.ledger.transactions("ten_a")) == 40
        forty = (
            most_bound(lambda: u.ledger.transactions("ten_a")),
            most_bound(lambda: u.ledger.page("ten_a", 0, 1000)),
        )
    assert forty == one and max(one) < 10
