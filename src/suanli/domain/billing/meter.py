"""Meter: per-second usage of a rental, charged cumulatively so that re-running posts nothing new.

Rules, all in integer micros:

* Billable seconds at `now_s`: 0 before the start; else max(minimum_s, min(now_s, ended_s) - started_s), with
  `minimum_s` 60 by default. A preempted spot rental ends at its deadline, a lost one at its last
  heartbeat: the caller sets `ended_s` so. The caller gives `minimum_s` 0 to a live rental and to one the
  platform ended, so the minimum is charged when a tenant's rental ends, never ahead (`app/usage.py`).
* Charge to date = round half up of rate_micros_per_hour * billable_s / 3600, always from the whole interval.
* Rate changes (a spot rental follows its pool's spot price): `rate_changes` = ((from_s, rate), ...), sorted,
  each rate in force from its `from_s` on; before the first one the rental pays `rate_micros_per_hour`. The
  charge to date is then round half up of (sum over the segments of rate_i * seconds_i inside
  [started_s, min(now_s, ended_s)]) / 3600: one rounding of the exact cumulative sum, never per segment.
  When that interval is shorter than `minimum_s`, the missing seconds are billed at the rate in force at
  `started_s` (the first segment's). That sum falls only if the rate drops inside the first minute; the
  charge to date never falls (a posted charge cannot be taken back), so it is the largest such sum at any
  instant up to now (at the start, a rate change or now: it is linear in between). Without rate changes
  this is exactly the rule above.
* Gaps (a re-queued rental waiting in the queue between two placements): `gaps` = ((from_s, to_s), ...),
  sorted and disjoint, are billed nothing; they are segments at rate 0, and at `to_s` the rate in force then
  (from `rate_changes`) resumes. The charge is still one rounding of the cumulative sum, and the billable
  seconds leave the gaps out.
* A meter run posts only `charge_delta` = charge to date - already posted, never negative, under the key
  `charge:{rental_id}:{n}`, n counting the rental's charges already in the journal; nothing to post, no key.
  A delta run up over a UTC midnight is posted as one charge per day (`charge_by_day`), the earlier days'
  dated their last second, so a day's and a month's spend and invoice hold the charge of their own seconds.
* A charge is paid from the tenant's grants first, then cash (cash may go below 0: the shell warns and stops).
* The providers get their share of the cumulative charge: floor(total_after * (10000 - commission_bp) /
  10000) less the same of total_before; the platform gets the remainder, so the two sum to the charge exactly
  and the providers' total is that of one charge of the total, however often the meter runs. A rental that
  held nodes of one provider pays it all of that part (`provider`). One whose `holders` name several (a gang
  across providers, a re-placed or grown rental) splits it by the GPU milli it held on each provider's nodes
  over time (`suanli.domain.billing.provider_split`): each provider gets its share to date less what it was
  credited before, so each provider's total too is independent of how often the meter runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.ledger import AccountId, AccountKind, Journal, Posting, Transaction, TxKind
from suanli.domain.billing.money import BASIS_POINTS, SECONDS_PER_HOUR, charge_micros, round_half_up
from suanli.domain.billing.provider_split import Holders, charge_parts, providers_of, shares_to_date

SECONDS_PER_DAY = 86_400  # a UTC day: epoch seconds count no leap seconds, so midnights are its multiples
DEFAULT_MINIMUM_S = 60
_CHARGED = frozenset({AccountKind.PROVIDER_PAYABLE, AccountKind.PLATFORM_REVENUE})


@dataclass(frozen=True, slots=True)
class RentalUsage:
    """What the meter needs of a rental: who pays, who provides, the quoted rate and its interval; `holders`
    only when several providers' nodes held it (then they, not `provider`, share the provider part)."""

    rental_id: str
    tenant: str
    provider: str
    rate_micros_per_hour: int
    started_s: int
    ended_s: int | None = None
    minimum_s: int = DEFAULT_MINIMUM_S
    rate_changes: tuple[tuple[int, int], ...] = ()  # (from_s, rate micros/h), sorted by from_s
    gaps: tuple[tuple[int, int], ...] = ()  # (from_s, to_s): unbilled (waiting in the queue), sorted
    holders: Holders = ()  # (from_s, ((provider, GPU milli), ...)): who held it from then on, sorted

    def __post_init__(self) -> None:
        if self.rate_micros_per_hour < 0:
            raise BillingError(f"rental {self.rental_id}: rate must be 0 or more")
        if self.minimum_s < 0:
            raise BillingError(f"rental {self.rental_id}: minimum_s must be 0 or more")
        if self.ended_s is not None and self.ended_s < self.started_s:
            raise BillingError(f"rental {self.rental_id}: ends at {self.ended_s}, before it starts")
        if self.rate_changes:
            self._check_changes()
        if self.gaps:
            self._check_gaps()
        if any(
            later[0] <= earlier[0] for earlier, later in zip(self.holders, self.holders[1:], strict=False)
        ):
            raise BillingError(f"rental {self.rental_id}: holders must be sorted, one per instant")

    @property
    def shared(self) -> bool:
        """Several providers' nodes held it: the provider part is split among them."""
        return len(providers_of(self.holders)) > 1

    def _check_gaps(self) -> None:
        previous = None
        for from_s, to_s in self.gaps:
            if to_s <= from_s or (previous is not None and from_s <= previous):
                raise BillingError(f"rental {self.rental_id}: gaps must be sorted, disjoint and not empty")
            previous = to_s

    def _check_changes(self) -> None:
        previous = None
        for from_s, rate in self.rate_changes:
            if rate < 0:
                raise BillingError(f"rental {self.rental_id}: rate must be 0 or more")
            if previous is not None and from_s <= previous:
                raise BillingError(f"rental {self.rental_id}: rate changes must be sorted, one per instant")
            previous = from_s

    def billable_s(self, now_s: int) -> int:
        if now_s < self.started_s:
            return 0
        end_s = now_s if self.ended_s is None else min(now_s, self.ended_s)
        waited = sum(max(0, min(to_s, end_s) - from_s) for from_s, to_s in self.gaps if from_s < end_s)
        return max(self.minimum_s, end_s - self.started_s - waited)

    def segments(self) -> tuple[tuple[int, int], ...]:
        """The rate changes with the gaps as segments at rate 0 (each gap's end resumes the rate then)."""
        if not self.gaps:
            return self.rate_changes
        merged = {at_s: rate for at_s, rate in self.rate_changes if not _inside(at_s, self.gaps)}
        for from_s, to_s in self.gaps:
            merged[from_s] = 0
            merged[to_s] = _rate_at(self.rate_micros_per_hour, self.rate_changes, to_s)
        return tuple(sorted(merged.items()))

    def rate_at(self, at_s: int) -> int:
        """The rate in force at `at_s`: the last change from at or before it, else `rate_micros_per_hour`."""
        return _rate_at(self.rate_micros_per_hour, self.segments(), at_s)

    def micros_seconds(self, now_s: int) -> int:
        """The exact charge to date times 3600 (rate micros/h x seconds), before the one rounding."""
        if now_s < self.started_s:
            return 0
        end_s = now_s if self.ended_s is None else min(now_s, self.ended_s)
        changes = self.segments()
        due = self._due(end_s, changes)
        if changes:  # a rate drop inside the minimum must not lower what was already due
            limit_s = min(end_s, self.started_s + self.minimum_s)
            for from_s, _ in changes:
                if self.started_s <= from_s < limit_s:
                    due = max(due, self._due(from_s, changes))
            if end_s > self.started_s:
                due = max(due, self._due(self.started_s, changes))
        return due

    def _due(self, end_s: int, changes: tuple[tuple[int, int], ...]) -> int:
        """Segments' rate x seconds over [started_s, end_s], plus the minimum's missing seconds at the rate
        in force at started_s."""
        short = max(0, self.minimum_s - (end_s - self.started_s))
        if not changes:
            return self.rate_micros_per_hour * (end_s - self.started_s + short)
        total, at_s, rate = 0, self.started_s, self.rate_micros_per_hour
        first = None
        for from_s, changed in changes:
            if from_s > at_s:
                if first is None:
                    first = rate
                if from_s >= end_s:
                    break
                total += rate * (from_s - at_s)
                at_s = from_s
            rate = changed
        if first is None:
            first = rate
        total += rate * (end_s - at_s)
        return total + first * short

    def charge_to_date(self, now_s: int) -> int:
        if not self.rate_changes and not self.gaps:
            return charge_micros(self.rate_micros_per_hour, self.billable_s(now_s))
        return round_half_up(self.micros_seconds(now_s), SECONDS_PER_HOUR)

    def memo(self, now_s: int) -> str:
        """The charge transaction's memo: seconds billed and the rate (the current one after changes)."""
        if not self.rate_changes and not self.gaps:
            return f"{self.billable_s(now_s)} s at {self.rate_micros_per_hour} micros/h"
        end_s = now_s if self.ended_s is None else min(now_s, self.ended_s)
        return f"{self.billable_s(now_s)} s at rates that changed, now {self.rate_at(end_s)} micros/h"

    def charge_delta(self, already_posted_micros: int, now_s: int) -> int:
        """What is left to post at `now_s`; 0 when everything is posted (or more, from a later run)."""
        return max(0, self.charge_to_date(now_s) - already_posted_micros)

    def charge_delta_since(self, already_posted_micros: int, since_s: int, now_s: int) -> int:
        """The part of `charge_delta` run up from `since_s` on (a day's or month's start): what was run up
        before it and is not posted yet belongs to the earlier period."""
        return max(0, self.charge_to_date(now_s) - max(already_posted_micros, self.charge_to_date(since_s)))

    def charge_by_day(self, already_posted_micros: int, now_s: int) -> tuple[tuple[int, int], ...]:
        """`charge_delta` as (at_s, micros) pieces, one per UTC day it was run up in: a day before `now_s`'s
        is dated its last second, so a charge late past midnight (or a month's end) falls in the day and month
        of its seconds, each second once; the pieces sum to `charge_delta`."""
        total = self.charge_to_date(now_s)
        if total <= already_posted_micros:
            return ()
        midnights: list[int] = []
        midnight = now_s - now_s % SECONDS_PER_DAY
        while midnight > self.started_s and self.charge_to_date(midnight) > already_posted_micros:
            midnights.append(midnight)
            midnight -= SECONDS_PER_DAY
        pieces, level = [], already_posted_micros
        for midnight in reversed(midnights):
            reached = min(max(level, self.charge_to_date(midnight)), total)
            if reached > level:
                pieces.append((midnight - 1, reached - level))
            level = reached
        if total > level:
            pieces.append((now_s, total - level))
        return tuple(pieces)


def _rate_at(rate: int, changes: tuple[tuple[int, int], ...], at_s: int) -> int:
    """The rate in force at `at_s`: the last change from at or before it, else `rate`."""
    for from_s, changed in changes:
        if from_s > at_s:
            break
        rate = changed
    return rate


def _inside(at_s: int, gaps: tuple[tuple[int, int], ...]) -> bool:
    """`at_s` falls in a gap (from its start, before its end)."""
    return any(from_s <= at_s < to_s for from_s, to_s in gaps)


def split_grants(amount_micros: int, grant_balance_micros: int) -> tuple[int, int]:
    """(from grants, from cash): grants are spent first, as far as their balance goes."""
    from_grants = min(amount_micros, max(0, grant_balance_micros))
    return from_grants, amount_micros - from_grants


def provider_total(charged_micros: int, commission_bp: int) -> int:
    """The providers' part of a cumulative charge: the charge less the commission, rounded down."""
    if not 0 <= commission_bp <= BASIS_POINTS:
        raise BillingError(f"commission must be 0..10000 bp, got {commission_bp}")
    return charged_micros * (BASIS_POINTS - commission_bp) // BASIS_POINTS


def split_provider(amount_micros: int, commission_bp: int, already_micros: int = 0) -> tuple[int, int]:
    """(provider share, platform share) of a charge made after `already_micros` were charged: the provider's
    share of the cumulative charge less its share of what came before, so the split does not depend on how
    often the meter runs; the platform keeps the rounding remainder."""
    total = already_micros + amount_micros
    provider = provider_total(total, commission_bp) - provider_total(already_micros, commission_bp)
    return provider, amount_micros - provider


def provider_parts(
    usage: RentalUsage,
    amount_micros: int,
    commission_bp: int,
    already_micros: int,
    credited: Mapping[str, int],
    now_s: int,
) -> dict[str, int]:
    """The provider part of the charge `amount_micros` (made after `already_micros`, at `now_s`) per provider:
    all to `usage.provider` unless the rental is `shared`; then each provider's share to date of the
    cumulative provider total less what it was `credited` before (`provider_split.charge_parts`)."""
    provider, _ = split_provider(amount_micros, commission_bp, already_micros)
    if not usage.shared:
        return {usage.provider: provider} if provider else {}

    def total_at(at_s: int) -> int:
        return provider_total(usage.charge_to_date(at_s), commission_bp)

    shares = shares_to_date(total_at, usage.started_s, usage.holders, now_s)
    return charge_parts(shares, credited, provider)


def charge_postings(
    usage: RentalUsage,
    amount_micros: int,
    grant_balance_micros: int,
    commission_bp: int,
    already_micros: int = 0,
    parts: Mapping[str, int] | None = None,
) -> tuple[Posting, ...]:
    """The postings of one charge (after `already_micros` charged to the rental): grants then cash out of the
    tenant, provider share and commission in; the provider share to each provider as `parts` says (from
    `provider_parts`; they must sum to it), else all to `usage.provider`."""
    from_grants, from_cash = split_grants(amount_micros, grant_balance_micros)
    provider, platform = split_provider(amount_micros, commission_bp, already_micros)
    if parts is None:
        parts = {usage.provider: provider}
    elif sum(parts.values()) != provider or any(micros < 0 for micros in parts.values()):
        raise BillingError(f"rental {usage.rental_id}: provider parts {dict(parts)} do not make {provider}")
    return (
        Posting(AccountId.tenant_grants(usage.tenant), -from_grants),
        Posting(AccountId.tenant_cash(usage.tenant), -from_cash),
        *(Posting(AccountId.provider_payable(owner), micros) for owner, micros in sorted(parts.items())),
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


def provider_credits(journal: Journal) -> dict[str, dict[str, int]]:
    """Per rental (`ref`), what its charges credited each provider so far."""
    result: dict[str, dict[str, int]] = {}
    for tx in journal.transactions:
        if tx.kind is TxKind.CHARGE:
            for posting in tx.postings:
                if posting.account.kind is AccountKind.PROVIDER_PAYABLE:
                    credited = result.setdefault(tx.ref, {})
                    owner = posting.account.owner
                    credited[owner] = credited.get(owner, 0) + posting.amount_micros
    return result


def meter_run(
    journal: Journal, usages: Iterable[RentalUsage], now_s: int, commission_bp: int
) -> tuple[Journal, tuple[Transaction, ...]]:
    """Post each rental's charge delta at `now_s`; returns the new journal and the transactions it added."""
    posted = posted_charges(journal)
    balances = journal.balances()
    credits: dict[str, dict[str, int]] | None = None
    added: list[Transaction] = []
    for usage in usages:
        already = posted.get(usage.rental_id, PostedCharges())
        delta = usage.charge_delta(already.micros, now_s)
        if delta == 0:
            continue
        grants = AccountId.tenant_grants(usage.tenant)
        parts = None
        if usage.shared:
            credits = provider_credits(journal) if credits is None else credits
            credited = credits.get(usage.rental_id, {})
            parts = provider_parts(usage, delta, commission_bp, already.micros, credited, now_s)
        postings = charge_postings(
            usage, delta, balances.get(grants, 0), commission_bp, already.micros, parts
        )
        journal, tx = journal.append(
            key=f"charge:{usage.rental_id}:{already.count + 1}",
            kind=TxKind.CHARGE,
            at_s=now_s,
            postings=postings,
            ref=usage.rental_id,
            memo=usage.memo(now_s),
        )
        for posting in tx.postings:
            balances[posting.account] = balances.get(posting.account, 0) + posting.amount_micros
            if credits is not None and posting.account.kind is AccountKind.PROVIDER_PAYABLE:
                credited = credits.setdefault(usage.rental_id, {})
                owner = posting.account.owner
                credited[owner] = credited.get(owner, 0) + posting.amount_micros
        posted[usage.rental_id] = PostedCharges(already.micros + delta, already.count + 1)
        added.append(tx)
    return journal, tuple(added)
