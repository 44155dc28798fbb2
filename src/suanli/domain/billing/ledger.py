"""Double-entry ledger: typed accounts, balanced transactions, a hash-chained append-only journal, `verify`.

Guarantees:

* A Transaction's postings sum to exactly 0 micros; else its constructor raises UnbalancedTransactionError.
* An account's balance is the sum of its postings (money in is positive): a top-up moves external cash (-) to
  tenant cash (+); a charge takes from tenant grants and cash (-) and credits provider payable and platform
  revenue (+). The sum of all balances is therefore always 0.
* `Journal` is a value: `append` returns a new journal and leaves the old one as it was. Posting a key that is
  already in the journal returns the existing transaction and the same journal; the same key with different
  postings raises IdempotencyConflictError.
* Each transaction carries `prev_hash` and `hash = sha256(prev_hash + canonical encoding of itself)`, so
  `verify` detects any changed amount, account, key or order and any removed transaction (the last one only
  against a head hash stated earlier).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from json.encoder import encode_basestring_ascii as _json_text

from suanli.domain.billing.errors import (
    IdempotencyConflictError,
    LedgerIntegrityError,
    UnbalancedTransactionError,
)

GENESIS_HASH = "0" * 64
PLATFORM = "platform"


class AccountKind(StrEnum):
    TENANT_CASH = "tenant_cash"
    TENANT_GRANTS = "tenant_grants"
    PLATFORM_REVENUE = "platform_revenue"
    PROVIDER_PAYABLE = "provider_payable"
    PROMOTIONS = "promotions"
    EXTERNAL_CASH = "external_cash"
    CONTRACT_PREPAID = "contract_prepaid"  # a compute future's prepaid value, owned by the contract id


@dataclass(frozen=True, slots=True, order=True)
class AccountId:
    """An account: its kind and owner (a tenant `ten_...`, a provider, or `platform`)."""

    kind: AccountKind
    owner: str

    def __str__(self) -> str:
        return self.kind + ":" + self.owner  # a StrEnum member adds as its value

    @classmethod
    def tenant_cash(cls, tenant: str) -> AccountId:
        return cls(AccountKind.TENANT_CASH, tenant)

    @classmethod
    def tenant_grants(cls, tenant: str) -> AccountId:
        return cls(AccountKind.TENANT_GRANTS, tenant)

    @classmethod
    def provider_payable(cls, provider: str) -> AccountId:
        return cls(AccountKind.PROVIDER_PAYABLE, provider)

    @classmethod
    def platform_revenue(cls) -> AccountId:
        return cls(AccountKind.PLATFORM_REVENUE, PLATFORM)

    @classmethod
    def promotions(cls) -> AccountId:
        return cls(AccountKind.PROMOTIONS, PLATFORM)

    @classmethod
    def external_cash(cls) -> AccountId:
        return cls(AccountKind.EXTERNAL_CASH, PLATFORM)

    @classmethod
    def contract_prepaid(cls, contract: str) -> AccountId:
        return cls(AccountKind.CONTRACT_PREPAID, contract)


@dataclass(frozen=True, slots=True)
class Posting:
    account: AccountId
    amount_micros: int


class TxKind(StrEnum):
    TOP_UP = "top_up"
    GRANT = "grant"
    CHARGE = "charge"
    PAYOUT = "payout"
    ADJUSTMENT = "adjustment"
    MEMBERSHIP = "membership"  # a membership's fee, posted when it starts
    REVENUE_SHARE = "revenue_share"  # the share of a month's reported revenue
    GRANT_EXPIRY = "grant_expiry"  # what is left of a grant at its expiry goes back to promotions
    CONTRACT = "contract"  # a compute future's prepaid price, and its recognition as revenue
    TRANSFER = "transfer"  # a compute future changing hands: the buyer pays the seller its remaining value
    SLA_CREDIT = "sla_credit"  # a month's availability credit


@dataclass(frozen=True, slots=True)
class Transaction:
    """Balanced postings under an idempotency key; `ref` names what it is about (e.g. a rental id)."""

    key: str
    kind: TxKind
    at_s: int
    postings: tuple[Posting, ...]
    ref: str = ""
    memo: str = ""
    prev_hash: str = GENESIS_HASH
    hash: str = ""

    def __post_init__(self) -> None:
        check_balanced(self.postings, self.key)

    @classmethod
    def chained(
        cls,
        prev_hash: str,
        *,
        key: str,
        kind: TxKind,
        at_s: int,
        postings: Iterable[Posting],
        ref: str = "",
        memo: str = "",
    ) -> Transaction:
        """A transaction linked after `prev_hash`, with its own hash computed (built and checked once, its
        hash set in place before anyone sees it: the meter chains 100,000s a pass)."""
        tx = cls(key, kind, at_s, normalize(postings), ref, memo, prev_hash)
        object.__setattr__(tx, "hash", chain_hash(prev_hash, tx))
        return tx

    def amount_to(self, kinds: frozenset[AccountKind]) -> int:
        """Sum of this transaction's postings to accounts of the given kinds."""
        return sum(p.amount_micros for p in self.postings if p.account.kind in kinds)


def check_balanced(postings: tuple[Posting, ...], key: str = "") -> None:
    """Raise UnbalancedTransactionError unless there are 2+ non-zero integer postings summing to exactly 0."""
    if len(postings) < 2:
        raise UnbalancedTransactionError(f"transaction {key!r} needs at least two postings")
    total = 0
    for posting in postings:
        amount = posting.amount_micros
        if type(amount) is not int or amount == 0:
            raise UnbalancedTransactionError(
                f"transaction {key!r}: posting to {posting.account} must be a non-zero int of micros"
            )
        total += amount
    if total != 0:
        raise UnbalancedTransactionError(
            f"transaction {key!r} does not balance: postings sum to {total} micros"
        )


def normalize(postings: Iterable[Posting]) -> tuple[Posting, ...]:
    """Merge postings per account, drop zeros and sort by account: the canonical form compared and hashed."""
    # sorted by AccountId's own order, (kind, owner), and summed over runs of one account: the same result
    # as merging in a dict keyed by AccountId, without hashing it (the meter normalizes 100,000s a pass);
    # a posting that needs no merging is kept as it is (they are immutable)
    ordered = sorted(postings, key=_account_order)
    merged: list[Posting] = []
    last: tuple[str, str] | None = None
    for posting in ordered:
        order = (posting.account.kind, posting.account.owner)
        if order == last:
            merged[-1] = Posting(posting.account, merged[-1].amount_micros + posting.amount_micros)
        else:
            merged.append(posting)
            last = order
    return tuple(posting for posting in merged if posting.amount_micros != 0)


def _account_order(posting: Posting) -> tuple[str, str]:
    return posting.account.kind, posting.account.owner  # a StrEnum member compares as its value


def canonical_encoding(tx: Transaction) -> bytes:
    """Deterministic bytes of everything in a transaction except its own hash: the compact, key-sorted,
    ASCII JSON of {key, kind, at_s, ref, memo, postings: [[account, micros], ...]}, written out directly
    (byte for byte what `json.dumps(body, sort_keys=True, separators=(",", ":"))` gives, at a third of
    the cost: the meter hashes 100,000s of transactions a pass)."""
    postings = ",".join(
        f"[{_json_text(p.account.kind + ':' + p.account.owner)},{int(p.amount_micros)!r}]"
        for p in tx.postings
    )
    text = (
        f'{{"at_s":{int(tx.at_s)!r},"key":{_json_text(tx.key)},"kind":{_json_text(tx.kind)},'
        f'"memo":{_json_text(tx.memo)},"postings":[{postings}],"ref":{_json_text(tx.ref)}}}'
    )
    return text.encode("ascii")


def chain_hash(prev_hash: str, tx: Transaction) -> str:
    """sha256 hex of the previous hash followed by the transaction's canonical encoding."""
    return hashlib.sha256(prev_hash.encode("ascii") + canonical_encoding(tx)).hexdigest()


@dataclass(frozen=True, slots=True)
class Journal:
    """An append-only, hash-chained sequence of transactions, as a value.

    Journals made by `append` share one backing list; a journal sees only its first `length` entries, and
    appending to an older journal copies instead of overwriting, so every journal value stays what it was.
    """

    _entries: list[Transaction] = field(default_factory=list, repr=False)
    _positions: dict[str, int] = field(default_factory=dict, repr=False)
    length: int = 0

    @classmethod
    def of(cls, transactions: Iterable[Transaction]) -> Journal:
        """A journal of these transactions as given (for loading and `verify`); the first of a key wins."""
        entries = list(transactions)
        positions: dict[str, int] = {}
        for index, tx in enumerate(entries):
            positions.setdefault(tx.key, index)
        return cls(entries, positions, len(entries))

    @property
    def transactions(self) -> tuple[Transaction, ...]:
        return tuple(self._entries[: self.length])

    @property
    def head_hash(self) -> str:
        return self._entries[self.length - 1].hash if self.length else GENESIS_HASH

    def __len__(self) -> int:
        return self.length

    def get(self, key: str) -> Transaction | None:
        index = self._positions.get(key)
        if index is None or index >= self.length:
            return None
        return self._entries[index]

    def append(
        self,
        *,
        key: str,
        kind: TxKind,
        at_s: int,
        postings: Iterable[Posting],
        ref: str = "",
        memo: str = "",
    ) -> tuple[Journal, Transaction]:
        """Post a transaction under `key`; an already posted key returns (self, the existing one)."""
        normalized = normalize(postings)
        existing = self.get(key)
        if existing is not None:
            if existing.postings != normalized:
                raise IdempotencyConflictError(f"key {key!r} was already posted with different postings")
            return self, existing
        tx = Transaction.chained(
            self.head_hash, key=key, kind=kind, at_s=at_s, postings=normalized, ref=ref, memo=memo
        )
        entries, positions = self._entries, self._positions
        if len(entries) != self.length:  # an older journal value: branch off a copy
            entries = entries[: self.length]
            positions = {k: i for k, i in positions.items() if i < self.length}
        entries.append(tx)
        positions[key] = self.length
        return Journal(entries, positions, self.length + 1), tx

    def balances(self) -> dict[AccountId, int]:
        return balances(self.transactions)

    def balance(self, account: AccountId) -> int:
        return sum(p.amount_micros for tx in self.transactions for p in tx.postings if p.account == account)


def balances(transactions: Iterable[Transaction]) -> dict[AccountId, int]:
    """Every account's balance: the sum of its postings."""
    result: dict[AccountId, int] = {}
    for tx in transactions:
        for posting in tx.postings:
            result[posting.account] = result.get(posting.account, 0) + posting.amount_micros
    return result


@dataclass(frozen=True, slots=True)
class Verification:
    """What `verify` found: the recomputed balances and head hash, and every problem (empty when sound)."""

    balances: Mapping[AccountId, int]
    head_hash: str
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(
    journal: Journal | Iterable[Transaction],
    expected_balances: Mapping[AccountId, int] | None = None,
    expected_head_hash: str | None = None,
) -> Verification:
    """Recompute the hash chain, each transaction's balance and every account balance.

    `expected_balances` (a statement, a store's cached balances) and `expected_head_hash` (a hash a tenant
    was given earlier) are compared when passed.
    """
    transactions = journal.transactions if isinstance(journal, Journal) else tuple(journal)
    problems: list[str] = []
    prev = GENESIS_HASH
    seen: set[str] = set()
    for index, tx in enumerate(transactions):
        where = f"transaction {index} ({tx.key!r})"
        if tx.key in seen:
            problems.append(f"{where}: duplicate idempotency key")
        seen.add(tx.key)
        if tx.prev_hash != prev:
            problems.append(f"{where}: prev_hash does not match the hash before it")
        if chain_hash(tx.prev_hash, tx) != tx.hash:
            problems.append(f"{where}: hash does not match its contents")
        total = sum(p.amount_micros for p in tx.postings)
        if total != 0:
            problems.append(f"{where}: postings sum to {total} micros")
        prev = tx.hash
    recomputed = balances(transactions)
    if sum(recomputed.values()) != 0:
        problems.append("the sum of all balances is not 0")
    if expected_balances is not None:
        for account in sorted(set(recomputed) | set(expected_balances)):
            got, want = recomputed.get(account, 0), expected_balances.get(account, 0)
            if got != want:
                problems.append(f"balance of {account}: recomputed {got}, stated {want}")
    if expected_head_hash is not None and expected_head_hash != prev:
        problems.append("head hash differs from the one stated")
    return Verification(recomputed, prev, tuple(problems))


def check_journal(
    journal: Journal | Iterable[Transaction],
    expected_balances: Mapping[AccountId, int] | None = None,
    expected_head_hash: str | None = None,
) -> Verification:
    """`verify`, raising LedgerIntegrityError when it finds anything."""
    result = verify(journal, expected_balances, expected_head_hash)
    if not result.ok:
        raise LedgerIntegrityError(result.problems)
    return result


def top_up_postings(tenant: str, amount_micros: int) -> tuple[Posting, ...]:
    """A tenant pays in: external cash down, tenant cash up."""
    return (
        Posting(AccountId.external_cash(), -amount_micros),
        Posting(AccountId.tenant_cash(tenant), amount_micros),
    )


def grant_postings(tenant: str, amount_micros: int) -> tuple[Posting, ...]:
    """Credits given to a tenant (e.g. a hackathon grant): promotions down, tenant grants up."""
    return (
        Posting(AccountId.promotions(), -amount_micros),
        Posting(AccountId.tenant_grants(tenant), amount_micros),
    )
