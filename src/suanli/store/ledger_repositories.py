"""The ledger repository: append-only storage of the domain's hash-chained transactions.

There is no update or delete path, and the database refuses one (migration 0012). `append` writes a
transaction and its postings with `postings_sum` (the database refuses a sum other than 0) and its `prev_hash`
(UNIQUE: a second writer appending after the same head is refused, so the chain never forks; the caller
retries on a fresh head). `append_many` writes a run of transactions chained one on the next (the meter's
batch) with two bulk INSERTs: the transactions (their `seq`s come back with RETURNING, in order), then all
their postings. Either way the accounts' running balances (`ledger_balances`) take the postings' sums in the
same transaction, after the transaction rows (whose UNIQUE `prev_hash` already orders concurrent writers), in
key order, and so do the providers' payout lines (`ledger_payout_lines`: per provider payable and `ref`,
the micros and the transactions). Reading returns domain `Transaction`s in chain order (`seq`); `balances`
reads the running balances, `posted_balances` sums the postings; `payables` reads a page of the payout
lines, `posted_payables` sums the postings into them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    String,
    any_,
    bindparam,
    func,
    insert,
    select,
    text,
    true,
    tuple_,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.app.errors import Duplicate
from suanli.domain.billing.ledger import GENESIS_HASH, AccountId, AccountKind, Posting, Transaction, TxKind
from suanli.domain.billing.meter import PostedCharges
from suanli.store.pg_text import copy_text, copy_time, int_array, text_array
from suanli.store.rows import LedgerBalanceRow, LedgerPayoutLineRow, LedgerPostingRow, LedgerTransactionRow

_CHARGED = (AccountKind.PROVIDER_PAYABLE.value, AccountKind.PLATFORM_REVENUE.value)
_PAID_BY_TENANT = (AccountKind.TENANT_CASH.value, AccountKind.TENANT_GRANTS.value)
_SPENDING = tuple(
    kind.value
    for kind in (TxKind.CHARGE, TxKind.CONTRACT, TxKind.TRANSFER, TxKind.MEMBERSHIP, TxKind.REVENUE_SHARE)
)
_TRANSACTIONS = LedgerTransactionRow.__table__
_POSTINGS = LedgerPostingRow.__table__
_BALANCES = LedgerBalanceRow.__table__
_PAYOUT_LINES = LedgerPayoutLineRow.__table__
_PAYABLE = AccountKind.PROVIDER_PAYABLE
# PostgreSQL: a batch is written with COPY (its seqs taken from the sequence first, in chain order)
_PG_SEQS = text(
    "SELECT nextval(pg_get_serial_sequence('ledger_transactions', 'seq')) FROM generate_series(1, :n)"
)
_PG_COPY_TRANSACTIONS = (
    "COPY ledger_transactions (seq, key, kind, at_s, ref, memo, created_at, prev_hash, hash, postings_sum) "
    "FROM STDIN"
)
_PG_COPY_POSTINGS = "COPY ledger_postings (tx_seq, account_kind, owner, amount_micros) FROM STDIN"
# PostgreSQL: a batch's payout lines in one statement, four arrays (an executemany of a meter batch's 2,000
# rows took 40 % of its append)
_PG_ADD_TO_LINES = text(
    "INSERT INTO ledger_payout_lines (owner, ref, amount_micros, transactions) "
    "SELECT * FROM unnest(CAST(:owners AS varchar[]), CAST(:refs AS varchar[]), "
    "CAST(:amounts AS bigint[]), CAST(:counts AS integer[])) "
    "ON CONFLICT (owner, ref) DO UPDATE SET "
    "amount_micros = ledger_payout_lines.amount_micros + excluded.amount_micros, "
    "transactions = ledger_payout_lines.transactions + excluded.transactions"
)


def one_of(session: Session, column: Any, values: Iterable[str]) -> ColumnElement[bool]:
    """`column IN values`; on PostgreSQL `column = ANY(array)`: one parameter however many values."""
    found = sorted(set(values))
    if session.get_bind().dialect.name == "postgresql":
        return column == any_(bindparam(None, found, type_=ARRAY(String)))
    return column.in_(found)


class SqlLedger:
    def __init__(self, session: Session) -> None:
        self.s = session

    def head_hash(self) -> str:
        found = self.s.scalar(
            select(LedgerTransactionRow.hash).order_by(LedgerTransactionRow.seq.desc()).limit(1)
        )
        return found or GENESIS_HASH

    def head_seq(self) -> int:
        """The last transaction's sequence number (0 for an empty ledger): reads bounded by it see one prefix
        of the chain, whatever is appended between them."""
        return int(self.s.scalar(select(func.max(LedgerTransactionRow.seq))) or 0)

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
        self._add_to_balances([tx])

    def _add_to_balances(self, txs: Sequence[Transaction]) -> None:
        """Add the postings of `txs` to their accounts' running balances (one upsert per account), and their
        provider payable postings to the payout lines."""
        self._add_to_payout_lines(txs)
        deltas: dict[tuple[str, str], int] = {}
        for tx in txs:
            for p in tx.postings:
                key = (p.account.owner, p.account.kind.value)
                deltas[key] = deltas.get(key, 0) + p.amount_micros
        if not deltas:
            return
        dialect = postgresql if self.s.get_bind().dialect.name == "postgresql" else sqlite
        statement = dialect.insert(_BALANCES)
        statement = statement.on_conflict_do_update(
            index_elements=[_BALANCES.c.owner, _BALANCES.c.account_kind],
            set_={"balance_micros": _BALANCES.c.balance_micros + statement.excluded.balance_micros},
        )
        rows = [
            {"owner": owner, "account_kind": kind, "balance_micros": amount}
            for (owner, kind), amount in sorted(deltas.items())
        ]
        self.s.execute(statement, rows)

    def _add_to_payout_lines(self, txs: Sequence[Transaction]) -> None:
        """Add the provider payable postings of `txs` to their (provider, ref) payout lines: the micros, and
        one transaction each (one upsert per line, in key order)."""
        deltas: dict[tuple[str, str], tuple[int, int]] = {}
        for tx in txs:
            paid = {p.account.owner: 0 for p in tx.postings if p.account.kind is _PAYABLE}
            for p in tx.postings:
                if p.account.kind is _PAYABLE:
                    paid[p.account.owner] += p.amount_micros
            for owner, micros in paid.items():
                amount, count = deltas.get((owner, tx.ref), (0, 0))
                deltas[(owner, tx.ref)] = (amount + micros, count + 1)
        if not deltas:
            return
        keys = sorted(deltas)
        if self.s.get_bind().dialect.name == "postgresql":
            self.s.execute(
                _PG_ADD_TO_LINES,
                {
                    "owners": text_array([owner for owner, _ in keys]),
                    "refs": text_array([ref for _, ref in keys]),
                    "amounts": int_array(deltas[key][0] for key in keys),
                    "counts": int_array(deltas[key][1] for key in keys),
                },
            )
            return
        statement = sqlite.insert(_PAYOUT_LINES)
        statement = statement.on_conflict_do_update(
            index_elements=[_PAYOUT_LINES.c.owner, _PAYOUT_LINES.c.ref],
            set_={
                "amount_micros": _PAYOUT_LINES.c.amount_micros + statement.excluded.amount_micros,
                "transactions": _PAYOUT_LINES.c.transactions + statement.excluded.transactions,
            },
        )
        rows = [
            {
                "owner": owner,
                "ref": ref,
                "amount_micros": deltas[owner, ref][0],
                "transactions": deltas[owner, ref][1],
            }
            for owner, ref in keys
        ]
        self.s.execute(statement, rows)

    def append_many(self, txs: Sequence[Transaction], created_at: datetime) -> None:
        """Append `txs` (each chained on the one before it, the first on the head) in bulk: on PostgreSQL
        with COPY (seqs taken from the sequence first, increasing in chain order), elsewhere with two
        executemany INSERTs (the seqs come back with RETURNING, in order)."""
        if not txs:
            return
        if self.s.get_bind().dialect.name == "postgresql":
            self._copy_pg(txs, created_at)
            self._add_to_balances(txs)
            return
        rows: list[dict[str, Any]] = [
            {
                "key": tx.key,
                "kind": tx.kind.value,
                "at_s": tx.at_s,
                "ref": tx.ref,
                "memo": tx.memo,
                "created_at": created_at,
                "prev_hash": tx.prev_hash,
                "hash": tx.hash,
                "postings_sum": sum(p.amount_micros for p in tx.postings),
            }
            for tx in txs
        ]
        statement = insert(_TRANSACTIONS).returning(_TRANSACTIONS.c.seq, sort_by_parameter_order=True)
        try:
            seqs = list(self.s.execute(statement, rows).scalars())
        except IntegrityError as error:
            raise Duplicate("the ledger refused a transaction (its key or prev_hash is taken)") from error
        postings = [
            {
                "tx_seq": seq,
                "account_kind": p.account.kind.value,
                "owner": p.account.owner,
                "amount_micros": p.amount_micros,
            }
            for seq, tx in zip(seqs, txs, strict=True)
            for p in tx.postings
        ]
        if postings:
            self.s.execute(insert(_POSTINGS), postings)
        self._add_to_balances(txs)

    def _copy_pg(self, txs: Sequence[Transaction], created_at: datetime) -> None:
        """The batch's rows in COPY's text format, a table at a time (`pg_text`: one string, not a call per
        field)."""
        seqs = sorted(self.s.execute(_PG_SEQS, {"n": len(txs)}).scalars())
        at = copy_time(created_at)
        transactions = "".join(
            f"{seq}\t{copy_text(tx.key)}\t{tx.kind.value}\t{int(tx.at_s)}\t{copy_text(tx.ref)}\t"
            f"{copy_text(tx.memo)}\t{at}\t{tx.prev_hash}\t{tx.hash}\t"
            f"{sum(p.amount_micros for p in tx.postings)}\n"
            for seq, tx in zip(seqs, txs, strict=True)
        )
        postings = "".join(
            f"{seq}\t{p.account.kind.value}\t{copy_text(p.account.owner)}\t{int(p.amount_micros)}\n"
            for seq, tx in zip(seqs, txs, strict=True)
            for p in tx.postings
        )
        cursor = self.s.connection().connection.cursor()
        try:
            with cursor.copy(_PG_COPY_TRANSACTIONS) as copy:
                copy.write(transactions)
            with cursor.copy(_PG_COPY_POSTINGS) as copy:
                copy.write(postings)
        except psycopg.errors.IntegrityError as error:
            raise Duplicate("the ledger refused a transaction (its key or prev_hash is taken)") from error
        finally:
            cursor.close()

    def page(self, owner: str | None, after_seq: int, limit: int) -> list[tuple[int, Transaction]]:
        """At most `limit` of `transactions(owner)` whose `seq` is past `after_seq`, each with its `seq` (the
        cursor of the next page): a bounded read, however long the ledger."""
        seqs = select(_page_seqs(owner, after_seq, limit).subquery().c.seq)  # no parameter per transaction
        query = select(LedgerTransactionRow).where(LedgerTransactionRow.seq.in_(seqs))
        rows = list(self.s.scalars(query.order_by(LedgerTransactionRow.seq)))
        postings = self._postings(LedgerPostingRow.tx_seq.in_(seqs)) if rows else {}
        return [(row.seq, _transaction(row, postings.get(row.seq, ()))) for row in rows]

    def _postings(self, which: ColumnElement[bool]) -> dict[int, list[Posting]]:
        """The postings `which` selects, by their transaction's `seq`, each transaction's in their order."""
        by_seq: dict[int, list[Posting]] = {}
        for p in self.s.scalars(select(LedgerPostingRow).where(which).order_by(LedgerPostingRow.id)):
            by_seq.setdefault(p.tx_seq, []).append(_posting(p))
        return by_seq

    def transactions(self, owner: str | None = None) -> list[Transaction]:
        """All transactions in chain order, or those with a posting to an account of `owner`."""
        rows = list(self.s.scalars(_chain(owner)))
        if not rows:
            return []
        which = true() if owner is None else LedgerPostingRow.tx_seq.in_(_touching(owner))
        postings = self._postings(which)
        return [_transaction(row, postings.get(row.seq, ())) for row in rows]

    def balances(
        self, owners: Iterable[str] | None = None, kinds: Collection[AccountKind] | None = None
    ) -> dict[AccountId, int]:
        """Running balances of every account, or of `owners`' accounts; only of `kinds` when given."""
        query = select(LedgerBalanceRow.account_kind, LedgerBalanceRow.owner, LedgerBalanceRow.balance_micros)
        if owners is not None:
            query = query.where(one_of(self.s, LedgerBalanceRow.owner, owners))
        if kinds is not None:
            query = query.where(LedgerBalanceRow.account_kind.in_(sorted(k.value for k in kinds)))
        return {
            AccountId(AccountKind(kind), owner): int(total) for kind, owner, total in self.s.execute(query)
        }

    def posted_balances(self) -> dict[AccountId, int]:
        """Every account's balance summed from its postings (what the running balances must equal)."""
        query = select(
            LedgerPostingRow.account_kind, LedgerPostingRow.owner, func.sum(LedgerPostingRow.amount_micros)
        ).group_by(LedgerPostingRow.account_kind, LedgerPostingRow.owner)
        return {
            AccountId(AccountKind(kind), owner): int(total) for kind, owner, total in self.s.execute(query)
        }

    def charged_since(
        self, owners: Iterable[str], since_s: int, *, through_seq: int | None = None
    ) -> dict[str, int]:
        """Per tenant: micros its cash and grants paid at or after `since_s` for what it bought (rentals,
        compute futures, bought or transferred, plan fees and revenue shares), as its invoice adds them up;
        in the transactions up to `through_seq` when given."""
        query = (
            select(LedgerPostingRow.owner, func.sum(LedgerPostingRow.amount_micros))
            .join(LedgerTransactionRow, LedgerPostingRow.tx_seq == LedgerTransactionRow.seq)
            .where(
                LedgerTransactionRow.kind.in_(_SPENDING),
                LedgerPostingRow.amount_micros < 0,  # paid: a seller's receipt of a transfer is not spending
                LedgerTransactionRow.at_s >= since_s,
                LedgerPostingRow.account_kind.in_(_PAID_BY_TENANT),
                one_of(self.s, LedgerPostingRow.owner, owners),
            )
            .group_by(LedgerPostingRow.owner)
        )
        if through_seq is not None:
            query = query.where(LedgerTransactionRow.seq <= through_seq)
        return {owner: -int(total) for owner, total in self.s.execute(query)}

    def posted_charges(
        self, refs: Iterable[str] | None = None, *, through_seq: int | None = None
    ) -> dict[str, PostedCharges]:
        """Per rental (`ref`): micros charged so far and the number of charge transactions; only `refs`'
        when given (the meter's batch), in the transactions up to `through_seq` when given."""
        amounts = select(
            LedgerTransactionRow.ref,
            func.sum(LedgerPostingRow.amount_micros),
            func.count(func.distinct(LedgerTransactionRow.seq)),
        ).join(LedgerPostingRow, LedgerPostingRow.tx_seq == LedgerTransactionRow.seq)
        amounts = amounts.where(
            LedgerTransactionRow.kind == TxKind.CHARGE.value, LedgerPostingRow.account_kind.in_(_CHARGED)
        ).group_by(LedgerTransactionRow.ref)
        if through_seq is not None:
            amounts = amounts.where(LedgerTransactionRow.seq <= through_seq)
        if refs is not None and self.s.get_bind().dialect.name == "postgresql":
            return self._posted_pg(refs, through_seq)
        if refs is not None:
            amounts = amounts.where(one_of(self.s, LedgerTransactionRow.ref, refs))
        return {ref: PostedCharges(int(total), int(count)) for ref, total, count in self.s.execute(amounts)}

    def _posted_pg(self, refs: Iterable[str], through_seq: int | None) -> dict[str, PostedCharges]:
        """`posted_charges(refs)` as two single-table index reads (the charges of `refs`, then their charged
        postings), a plan that stays right on tables just bulk-loaded, before PostgreSQL has statistics."""
        query = select(LedgerTransactionRow.seq, LedgerTransactionRow.ref).where(
            one_of(self.s, LedgerTransactionRow.ref, refs), LedgerTransactionRow.kind == TxKind.CHARGE.value
        )
        if through_seq is not None:
            query = query.where(LedgerTransactionRow.seq <= through_seq)
        charges = dict(self.s.execute(query).all())
        if not charges:
            return {}
        seqs = bindparam(None, sorted(charges), type_=ARRAY(Integer))  # typed: the planner sees its length
        amounts = self.s.execute(
            select(LedgerPostingRow.tx_seq, LedgerPostingRow.amount_micros).where(
                LedgerPostingRow.tx_seq == any_(seqs), LedgerPostingRow.account_kind.in_(_CHARGED)
            )
        )
        totals: dict[str, int] = {}
        for seq, amount in amounts:
            totals[charges[seq]] = totals.get(charges[seq], 0) + amount
        counts: dict[str, int] = {}
        for ref in charges.values():
            counts[ref] = counts.get(ref, 0) + 1
        return {ref: PostedCharges(totals.get(ref, 0), count) for ref, count in counts.items()}

    def payables(
        self, provider: str | None = None, after: tuple[str, str] | None = None, limit: int | None = None
    ) -> list[tuple[str, str, int, int]]:
        """(provider, ref, micros, transactions) of the payout lines (provider payable postings per provider
        and `ref`, a charge's rental), ordered by provider then ref, those that sum to zero left out; one
        provider's only when named; only past `after` (a (provider, ref) cursor) and at most `limit` when
        given. A keyset range on `ix_ledger_payout_lines_open`: a page reads its own lines, however long the
        ledger."""
        line = LedgerPayoutLineRow
        query = (
            select(line.owner, line.ref, line.amount_micros, line.transactions)
            .where(line.amount_micros != 0)  # the open-lines index's own condition: its rows only
            .order_by(line.owner, line.ref)
            .limit(limit)
        )
        if provider is not None:
            query = query.where(line.owner == provider)
        # an index range on both databases (an OR of the two columns' comparisons is a filter after it); a
        # provider's own cursor (SQLite reads `owner = ? AND ref > ?` as the range, not the row value)
        if after is not None and after[0] == provider:
            query = query.where(line.ref > after[1])
        elif after is not None:
            query = query.where(tuple_(line.owner, line.ref) > tuple_(*after))
        return [(owner, ref, int(total), int(count)) for owner, ref, total, count in self.s.execute(query)]

    def posted_payables(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Every payout line summed from the postings, (provider, ref) -> (micros, transactions): what the
        kept lines must equal (lines that sum to zero included)."""
        query = (
            select(
                LedgerPostingRow.owner,
                LedgerTransactionRow.ref,
                func.sum(LedgerPostingRow.amount_micros),
                func.count(func.distinct(LedgerTransactionRow.seq)),
            )
            .join(LedgerTransactionRow, LedgerPostingRow.tx_seq == LedgerTransactionRow.seq)
            .where(LedgerPostingRow.account_kind == _PAYABLE.value)
            .group_by(LedgerPostingRow.owner, LedgerTransactionRow.ref)
        )
        return {(owner, ref): (int(total), int(count)) for owner, ref, total, count in self.s.execute(query)}

    def payout_lines(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Every kept payout line, (provider, ref) -> (micros, transactions), zero sums included."""
        line = LedgerPayoutLineRow
        query = select(line.owner, line.ref, line.amount_micros, line.transactions)
        return {(owner, ref): (int(total), int(count)) for owner, ref, total, count in self.s.execute(query)}

    def provider_credits(self, refs: Iterable[str]) -> dict[str, dict[str, int]]:
        """Per rental of `refs`: what its charges credited each provider so far (a rental whose nodes belonged
        to several providers: the meter pays each its share to date less this)."""
        query = (
            select(LedgerTransactionRow.ref, LedgerPostingRow.owner, func.sum(LedgerPostingRow.amount_micros))
            .join(LedgerPostingRow, LedgerPostingRow.tx_seq == LedgerTransactionRow.seq)
            .where(
                one_of(self.s, LedgerTransactionRow.ref, refs),
                LedgerTransactionRow.kind == TxKind.CHARGE.value,
                LedgerPostingRow.account_kind == AccountKind.PROVIDER_PAYABLE.value,
            )
            .group_by(LedgerTransactionRow.ref, LedgerPostingRow.owner)
        )
        found: dict[str, dict[str, int]] = {}
        for ref, owner, total in self.s.execute(query):
            found.setdefault(ref, {})[owner] = int(total)
        return found


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


def _chain(owner: str | None) -> Select[tuple[LedgerTransactionRow]]:
    """The transactions in chain order (`seq`), or those with a posting to an account of `owner`."""
    query = select(LedgerTransactionRow).order_by(LedgerTransactionRow.seq)
    return query if owner is None else query.where(LedgerTransactionRow.seq.in_(_touching(owner)))


def _page_seqs(owner: str | None, after_seq: int, limit: int) -> Select[tuple[int]]:
    """The seqs of a page, a keyset range: the first `limit` past `after_seq` of all transactions (on their
    key), or of those with a posting to an account of `owner` (on `ix_ledger_postings_owner_seq`), so a page
    reads about `limit` rows however long the owner's history is."""
    if owner is None:
        seq = LedgerTransactionRow.seq
        return select(seq.label("seq")).where(seq > after_seq).order_by(seq).limit(limit)
    tx_seq = LedgerPostingRow.tx_seq
    touching = select(tx_seq.label("seq")).where(LedgerPostingRow.owner == owner, tx_seq > after_seq)
    return touching.distinct().order_by(tx_seq).limit(limit)


def _touching(owner: str) -> Select[tuple[int]]:
    """The seqs of the transactions with a posting to an account of `owner`: a subquery, one parameter
    however many (PostgreSQL refuses a statement of more than 65,535 bind parameters)."""
    return select(LedgerPostingRow.tx_seq).where(LedgerPostingRow.owner == owner)
