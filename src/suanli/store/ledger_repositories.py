"""The ledger repository: append-only storage of the domain's hash-chained transactions.

There is no update or delete path. `append` writes a transaction and its postings with `postings_sum` (the
database refuses a sum other than 0) and its `prev_hash` (UNIQUE: a second writer appending after the
same head is refused, so the chain never forks; the caller retries on a fresh head). Reading returns domain
`Transaction`s in chain order (`seq`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.app.errors import Duplicate
from suanli.domain.billing.ledger import GENESIS_HASH, AccountId, AccountKind, Posting, Transaction, TxKind
from suanli.domain.billing.meter import PostedCharges
from suanli.store.rows import LedgerPostingRow, LedgerTransactionRow

_CHARGED = (AccountKind.PROVIDER_PAYABLE.value, AccountKind.PLATFORM_REVENUE.value)


class SqlLedger:
    def __init__(self, session: Session) -> None:
        self.s = session

    def head_hash(self) -> str:
        found = self.s.scalar(
            select(LedgerTransactionRow.hash).order_by(LedgerTransactionRow.seq.desc()).limit(1)
        )
        return found or GENESIS_HASH

    def get(self, key: str) -> Transaction | None:
        row = self.s.scalar(select(LedgerTransactionRow).where(LedgerTransactionRow.key == key))
        if row is None:
            return None
        postings = self.s.scalars(
            select(LedgerPostingRow).where(LedgerPostingRow.tx_seq == row.seq).order_by(LedgerPostingRow.id)
        )
        return _transaction(row, [_posting(p) for p in postings])

    def append(self, tx: Transaction, created_at: datetime) -> None:
        row = LedgerTransactionRow(
            key=tx.key,
            kind=tx.kind.value,
            at_s=tx.at_s,
            ref=tx.ref,
            memo=tx.memo,
            created_at=created_at,
            prev_hash=tx.prev_hash,
            hash=tx.hash,
            postings_sum=sum(p.amount_micros for p in tx.postings),
        )
        self.s.add(row)
        try:
            self.s.flush()
        except IntegrityError as error:
            raise Duplicate("the ledger refused the transaction (its key or prev_hash is taken)") from error
        self.s.add_all(
            LedgerPostingRow(
                tx_seq=row.seq,
                account_kind=p.account.kind.value,
                owner=p.account.owner,
                amount_micros=p.amount_micros,
            )
            for p in tx.postings
        )
        self.s.flush()

    def transactions(self, owner: str | None = None) -> list[Transaction]:
        """All transactions in chain order, or those with a posting to an account of `owner`."""
        query = select(LedgerTransactionRow).order_by(LedgerTransactionRow.seq)
        if owner is not None:
            touching = select(LedgerPostingRow.tx_seq).where(LedgerPostingRow.owner == owner)
            query = query.where(LedgerTransactionRow.seq.in_(touching))
        rows = list(self.s.scalars(query))
        postings: dict[int, list[Posting]] = {}
        if rows:
            posting_query = select(LedgerPostingRow).order_by(LedgerPostingRow.id)
            if owner is not None:
                posting_query = posting_query.where(LedgerPostingRow.tx_seq.in_([r.seq for r in rows]))
            for p in self.s.scalars(posting_query):
                postings.setdefault(p.tx_seq, []).append(_posting(p))
        return [_transaction(row, postings.get(row.seq, ())) for row in rows]

    def balances(self, owners: Iterable[str] | None = None) -> dict[AccountId, int]:
        query = select(
            LedgerPostingRow.account_kind, LedgerPostingRow.owner, func.sum(LedgerPostingRow.amount_micros)
        ).group_by(LedgerPostingRow.account_kind, LedgerPostingRow.owner)
        if owners is not None:
            query = query.where(LedgerPostingRow.owner.in_(sorted(set(owners))))
        return {
            AccountId(AccountKind(kind), owner): int(total) for kind, owner, total in self.s.execute(query)
        }

    def posted_charges(self) -> dict[str, PostedCharges]:
        """Per rental (`ref`): micros charged so far and the number of charge transactions."""
        amounts = select(
            LedgerTransactionRow.ref,
            func.sum(LedgerPostingRow.amount_micros),
            func.count(func.distinct(LedgerTransactionRow.seq)),
        ).join(LedgerPostingRow, LedgerPostingRow.tx_seq == LedgerTransactionRow.seq)
        amounts = amounts.where(
            LedgerTransactionRow.kind == TxKind.CHARGE.value, LedgerPostingRow.account_kind.in_(_CHARGED)
        ).group_by(LedgerTransactionRow.ref)
        return {ref: PostedCharges(int(total), int(count)) for ref, total, count in self.s.execute(amounts)}

    def payables(self, provider: str | None = None) -> list[tuple[str, str, int, int]]:
        """(provider, ref, micros, transactions) of every provider payable posting, per provider and `ref`
        (a charge's rental), ordered by provider then ref; one provider's only when named."""
        query = (
            select(
                LedgerPostingRow.owner,
                LedgerTransactionRow.ref,
                func.sum(LedgerPostingRow.amount_micros),
                func.count(func.distinct(LedgerTransactionRow.seq)),
            )
            .join(LedgerTransactionRow, LedgerPostingRow.tx_seq == LedgerTransactionRow.seq)
            .where(LedgerPostingRow.account_kind == AccountKind.PROVIDER_PAYABLE.value)
            .group_by(LedgerPostingRow.owner, LedgerTransactionRow.ref)
            .order_by(LedgerPostingRow.owner, LedgerTransactionRow.ref)
        )
        if provider is not None:
            query = query.where(LedgerPostingRow.owner == provider)
        return [(owner, ref, int(total), int(count)) for owner, ref, total, count in self.s.execute(query)]


def _posting(row: LedgerPostingRow) -> Posting:
    return Posting(AccountId(AccountKind(row.account_kind), row.owner), row.amount_micros)


def _transaction(row: LedgerTransactionRow, postings: Iterable[Posting]) -> Transaction:
    """The stored transaction as read, without the constructor's balance check: a tampered row must reach
    `verify` (which reports it) instead of failing the read."""
    tx = object.__new__(Transaction)
    values = {
        "key": row.key,
        "kind": TxKind(row.kind),
        "at_s": row.at_s,
        "postings": tuple(postings),
        "ref": row.ref,
        "memo": row.memo,
        "prev_hash": row.prev_hash,
        "hash": row.hash,
    }
    for name, value in values.items():
        object.__setattr__(tx, name, value)
    return tx
