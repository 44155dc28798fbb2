"""Ledger: balanced transactions, idempotency keys, the hash chain and `verify`."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from suanli.domain.billing.errors import (
    IdempotencyConflictError,
    LedgerIntegrityError,
    UnbalancedTransactionError,
)
from suanli.domain.billing.ledger import (
    AccountId,
    Journal,
    Posting,
    Transaction,
    TxKind,
    check_journal,
    grant_postings,
    top_up_postings,
    verify,
)

CASH = AccountId.tenant_cash("ten_a")
EXTERNAL = AccountId.external_cash()
ACCOUNTS = (
    CASH,
    AccountId.tenant_grants("ten_a"),
    AccountId.tenant_cash("ten_b"),
    AccountId.provider_payable("prov_1"),
    AccountId.platform_revenue(),
    AccountId.promotions(),
    EXTERNAL,
)

amounts = st.integers(-(10**12), 10**12).filter(lambda n: n != 0)


@st.composite
def balanced_postings(draw: st.DrawFn) -> tuple[Posting, ...]:
    """2..6 postings on distinct accounts, the last one balancing the others."""
    accounts = draw(st.lists(st.sampled_from(ACCOUNTS), min_size=2, max_size=6, unique=True))
    head = [Posting(a, draw(amounts)) for a in accounts[:-1]]
    rest = -sum(p.amount_micros for p in head)
    if rest == 0:
        head[0] = Posting(head[0].account, head[0].amount_micros + 1)
        rest = -1
    return (*head, Posting(accounts[-1], rest))


def _journal_of(postings_list: list[tuple[Posting, ...]]) -> Journal:
    journal = Journal()
    for index, postings in enumerate(postings_list):
        journal, _ = journal.append(key=f"k{index}", kind=TxKind.ADJUSTMENT, at_s=index, postings=postings)
    return journal


@given(st.lists(balanced_postings(), min_size=1, max_size=20))
def test_every_transaction_balances_and_the_journal_verifies(
    postings_list: list[tuple[Posting, ...]],
) -> None:
    journal = _journal_of(postings_list)
    for tx in journal.transactions:
        assert sum(p.amount_micros for p in tx.postings) == 0
    result = check_journal(journal)
    assert sum(result.balances.values()) == 0
    assert result.head_hash == journal.head_hash


@given(balanced_postings(), st.integers(-5, 5).filter(lambda n: n != 0))
def test_an_unbalanced_transaction_cannot_be_built(postings: tuple[Posting, ...], off_by: int) -> None:
    broken = (*postings[:-1], Posting(postings[-1].account, postings[-1].amount_micros + off_by))
    with pytest.raises(UnbalancedTransactionError):
        Transaction("k", TxKind.ADJUSTMENT, 0, broken)
    with pytest.raises(UnbalancedTransactionError):
        Journal().append(key="k", kind=TxKind.ADJUSTMENT, at_s=0, postings=broken)


@pytest.mark.parametrize(
    "postings",
    [
        pytest.param((), id="empty"),
        pytest.param((Posting(CASH, 0), Posting(EXTERNAL, 0)), id="all-zero"),
        pytest.param((Posting(CASH, 5), Posting(CASH, -5)), id="nets-to-nothing"),
        pytest.param((Posting(CASH, 1.5), Posting(EXTERNAL, -1.5)), id="float-amounts"),  # type: ignore
    ],
)
def test_degenerate_transactions_are_refused(postings: tuple[Posting, ...]) -> None:
    with pytest.raises(UnbalancedTransactionError):
        Journal().append(key="k", kind=TxKind.ADJUSTMENT, at_s=0, postings=postings)


def test_posting_a_key_twice_is_a_no_op_and_different_postings_conflict() -> None:
    journal, first = Journal().append(
        key="topup:1", kind=TxKind.TOP_UP, at_s=1, postings=top_up_postings("ten_a", 100)
    )
    again, second = journal.append(
        key="topup:1", kind=TxKind.TOP_UP, at_s=99, postings=top_up_postings("ten_a", 100)
    )
    assert again is journal and second is first and len(again) == 1
    reordered = tuple(reversed(top_up_postings("ten_a", 100)))
    assert journal.append(key="topup:1", kind=TxKind.TOP_UP, at_s=2, postings=reordered)[1] is first
    with pytest.raises(IdempotencyConflictError):
        journal.append(key="topup:1", kind=TxKind.TOP_UP, at_s=1, postings=top_up_postings("ten_a", 101))


def test_journal_values_do_not_change_when_appended_to() -> None:
    base, _ = Journal().append(key="a", kind=TxKind.TOP_UP, at_s=0, postings=top_up_postings("ten_a", 10))
    left, _ = base.append(key="b", kind=TxKind.TOP_UP, at_s=1, postings=top_up_postings("ten_a", 20))
    right, _ = base.append(key="c", kind=TxKind.GRANT, at_s=1, postings=grant_postings("ten_a", 30))
    assert [tx.key for tx in base.transactions] == ["a"]
    assert [tx.key for tx in left.transactions] == ["a", "b"]
    assert [tx.key for tx in right.transactions] == ["a", "c"]
    assert base.get("b") is None and right.get("b") is None
    assert left.balance(CASH) == 30 and right.balance(CASH) == 10
    assert check_journal(left).ok and check_journal(right).ok


@given(
    st.lists(balanced_postings(), min_size=1, max_size=10),
    st.data(),
    st.integers(1, 10**6),
)
def test_the_hash_chain_detects_any_tampered_amount(
    postings_list: list[tuple[Posting, ...]], data: st.DataObject, shift: int
) -> None:
    journal = _journal_of(postings_list)
    txs = list(journal.transactions)
    index = data.draw(st.integers(0, len(txs) - 1))
    tx = txs[index]
    # Move `shift` micros between two postings: still balanced, so only the hash can tell.
    first, second, *rest = tx.postings
    tampered_postings = (
        Posting(first.account, first.amount_micros + shift),
        Posting(second.account, second.amount_micros - shift),
        *rest,
    )
    tampered = copy.copy(tx)
    object.__setattr__(tampered, "postings", tampered_postings)  # a corrupted row, not a constructor call
    txs[index] = tampered
    result = verify(txs)
    assert not result.ok
    assert any(f"transaction {index}" in problem for problem in result.problems)
    with pytest.raises(LedgerIntegrityError):
        check_journal(txs)


def test_rehashing_a_tampered_transaction_breaks_the_next_link_and_the_stated_head() -> None:
    journal = _journal_of([top_up_postings("ten_a", 100), top_up_postings("ten_a", 50)])
    first, second = journal.transactions
    forged = Transaction.chained(
        first.prev_hash, key=first.key, kind=first.kind, at_s=first.at_s, postings=top_up_postings("ten_a", 1)
    )
    problems = verify([forged, second]).problems
    assert any("prev_hash" in p for p in problems)
    assert not verify([forged], expected_head_hash=second.hash).ok
    assert not verify([first]).problems and not verify([second]).ok  # a removed head is caught too


def test_unbalanced_bypassing_the_constructor_and_wrong_stated_balances_are_reported() -> None:
    journal = _journal_of([top_up_postings("ten_a", 100)])
    (tx,) = journal.transactions
    object.__setattr__(tx.postings[0], "amount_micros", -99)  # a corrupted row, not a constructor call
    try:
        problems = verify(journal).problems
        assert any("sum to 1" in p for p in problems)
        assert any("hash does not match" in p for p in problems)
    finally:
        object.__setattr__(tx.postings[0], "amount_micros", tx.postings[0].amount_micros - 1)
    assert verify(journal).ok
    assert not verify(journal, expected_balances={CASH: 99, EXTERNAL: -100}).ok
    assert verify(journal, expected_balances={CASH: 100, EXTERNAL: -100}).ok
