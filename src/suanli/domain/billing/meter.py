"""Meter: per-second usage of a rental, charged cumulatively so that re-running posts nothing new.

Rules, all in integer micros:

* Billable seconds at `now_s`: 0 before the start; else max(minimum_s, min(now_s, ended_s) - started_s), with
  `minimum_s` 60 by default. A preempted spot rental ends at its deadline, a lost one at its last
  heartbeat: the caller sets `ended_s` so.
* Charge to date = round half up of rate_micros_per_hour * billable_s / 3600, always from the whole interval.
* A meter run posts only `charge_delta` = charge to date - already posted, never negative, under the key
  `charge:{rental_id}:{n}`, n counting the rental's charges already in the journal; nothing to post, no key.
* A charge is paid from the tenant's grants first, then cash (cash may go below 0: the shell warns and stops).
* The provider gets charge * (10000 - commission_bp) // 10000; the platform gets the remainder, so the two sum
  to the charge exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.ledger import AccountId, AccountKind, Journal, Posting, Transaction, TxKind
from suanli.domain.billing.money import BASIS_POINTS, charge_micros

DEFAULT_MINIMUM_S = 60
_CHARGED = frozenset({AccountKind.PROVIDER_PAYABLE, AccountKind.PLATFORM_REVENUE})


@dataclass(frozen=True, slots=True)
class RentalUsage:
    """What the meter needs of a rental: who pays, who provides, the quoted rate and its interval."""

    rental_id: str
    tenant: str
    provider: str
    rate_micros_per_hour: int
    started_s: int
    ended_s: int | None = None
    minimum_s: int = DEFAULT_MINIMUM_S

    def __post_init__(self) -> None:
        if self.rate_micros_per_hour < 0:
            raise BillingError(f"rental {self.rental_id}: rate must be 0 or more")
        if self.minimum_s < 0:
            raise BillingError(f"rental {self.rental_id}: minimum_s must be 0 or more")
        if self.ended_s is not None and self.ended_s < self.started_s:
            raise BillingError(f"rental {self.rental_id}: ends at {self.ended_s}, before it starts")

    def billable_s(self, now_s: int) -> int:
        if now_s < self.started_s:
            return 0
        end_s = now_s if self.ended_s is None else min(now_s, self.ended_s)
        return max(self.minimum_s, end_s - self.started_s)

    def charge_to_date(self, now_s: int) -> int:
        return charge_micros(self.rate_micros_per_hour, self.billable_s(now_s))

    def charge_delta(self, already_posted_micros: int, now_s: int) -> int:
        """What is left to post at `now_s`; 0 when everything is posted (or more, from a later run)."""
        return max(0, self.charge_to_date(now_s) - already_posted_micros)


def split_grants(amount_micros: int, grant_balance_micros: int) -> tuple[int, int]:
    """(from grants, from cash): grants are spent first, as far as their balance goes."""
    from_grants = min(amount_micros, max(0, grant_balance_micros))
    return from_grants, amount_micros - from_grants


def split_provider(amount_micros: int, commission_bp: int) -> tuple[int, int]:
    """(provider share, platform share) of a charge; the platform keeps the rounding remainder."""
    if not 0 <= commission_bp <= BASIS_POINTS:
        raise BillingError(f"commission must be 0..10000 bp, got {commission_bp}")
    provider = amount_micros * (BASIS_POINTS - commission_bp) // BASIS_POINTS
    return provider, amount_micros - provider


def charge_postings(
    usage: RentalUsage, amount_micros: int, grant_balance_micros: int, commission_bp: int
) -> tuple[Posting, ...]:
    """The postings of one charge: grants then cash out of the tenant, provider share and commission in."""
    from_grants, from_cash = split_grants(amount_micros, grant_balance_micros)
    provider, platform = split_provider(amount_micros, commission_bp)
    return (
        Posting(AccountId.tenant_grants(usage.tenant), -from_grants),
        Posting(AccountId.tenant_cash(usage.tenant), -from_cash),
        Posting(AccountId.provider_payable(usage.provider), provider),
        Posting(AccountId.platform_revenue(), platform),
    )


@dataclass(frozen=True, slots=True)
class PostedCharges:
    """Per rental: micros charged so far and how many charge transactions carry them."""

    micros: int = 0
    count: int = 0


def posted_charges(journal: Journal) -> dict[str, PostedCharges]:
    """One pass over the journal: what was charged to each rental (the `ref` of charge transactions)."""
    result: dict[str, PostedCharges] = {}
    for tx in journal.transactions:
        if tx.kind is TxKind.CHARGE:
            seen = result.get(tx.ref, PostedCharges())
            result[tx.ref] = PostedCharges(seen.micros + tx.amount_to(_CHARGED), seen.count + 1)
    return result


def meter_run(
    journal: Journal, usages: Iterable[RentalUsage], now_s: int, commission_bp: int
) -> tuple[Journal, tuple[Transaction, ...]]:
    """Post each rental's charge delta at `now_s`; returns the new journal and the transactions it added."""
    posted = posted_charges(journal)
    balances = journal.balances()
    added: list[Transaction] = []
    for usage in usages:
        already = posted.get(usage.rental_id, PostedCharges())
        delta = usage.charge_delta(already.micros, now_s)
        if delta == 0:
            continue
        grants = AccountId.tenant_grants(usage.tenant)
        postings = charge_postings(usage, delta, balances.get(grants, 0), commission_bp)
        journal, tx = journal.append(
            key=f"charge:{usage.rental_id}:{already.count + 1}",
            kind=TxKind.CHARGE,
            at_s=now_s,
            postings=postings,
            ref=usage.rental_id,
            memo=f"{usage.billable_s(now_s)} s at {usage.rate_micros_per_hour} micros/h",
        )
        for posting in tx.postings:
            balances[posting.account] = balances.get(posting.account, 0) + posting.amount_micros
        posted[usage.rental_id] = PostedCharges(already.micros + delta, already.count + 1)
        added.append(tx)
    return journal, tuple(added)
