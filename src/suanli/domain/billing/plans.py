"""Plans a tenant can be on, grants with expiry, and how a tenant pays; pure, integer micros, epoch seconds.

* **Membership**: an annual fee, posted once when the membership starts (tenant cash -> platform revenue),
  and a discount of `discount_bp` on on-demand prices while it lasts.
* **Revenue share**: a lower base price (a discount of `discount_bp` on on-demand and reserved prices) plus
  `revenue_share_bp` of the revenue the tenant reports for each month, posted as that month's plan line.
* Pay as you go is having no plan in force.
* **Grants** (e.g. hackathon credits) are spent before cash; spending is attributed to the grant that
  expires first. At its expiry, what is left of a grant goes back to promotions, capped at the tenant's
  grant balance (a charge posted late may already have spent it).
* **Payment terms**: a prepaid tenant's floor is 0; a postpaid tenant's floor is minus its credit limit. A
  new rental is refused when its minimum charge would take the tenant's cash + grants below the floor; a
  tenant below its floor is warned, and its running rentals are stopped once the grace period has passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.invoice import InvoiceLine
from suanli.domain.billing.ledger import AccountId, Posting, Transaction, TxKind
from suanli.domain.billing.money import BASIS_POINTS, SECONDS_PER_HOUR, round_half_up
from suanli.domain.billing.pricebook import Discount
from suanli.domain.request import Tier


class PlanKind(StrEnum):
    MEMBERSHIP = "membership"
    REVENUE_SHARE = "revenue_share"


@dataclass(frozen=True, slots=True)
class Plan:
    """A plan over [starts_s, ends_s)."""

    id: str
    tenant: str
    kind: PlanKind
    discount_bp: int
    fee_micros: int
    revenue_share_bp: int
    starts_s: int
    ends_s: int

    def __post_init__(self) -> None:
        # the messages name the field, never the id: a plan refused here was never created
        for name in ("discount_bp", "revenue_share_bp"):
            value = getattr(self, name)
            if not 0 <= value <= BASIS_POINTS:
                raise BillingError(f"{name} must be 0..10000, got {value}")
        if self.fee_micros < 0:
            raise BillingError("fee_micros must be 0 or more")
        if self.ends_s <= self.starts_s:
            raise BillingError("ends_s must be after starts_s")
        if self.kind is PlanKind.MEMBERSHIP and self.revenue_share_bp:
            raise BillingError("a membership has no revenue share (revenue_share_bp must be 0)")

    def in_force(self, at_s: int) -> bool:
        return self.starts_s <= at_s < self.ends_s

    @property
    def discounted_tiers(self) -> frozenset[Tier]:
        if self.kind is PlanKind.MEMBERSHIP:
            return frozenset({Tier.ON_DEMAND})
        return frozenset({Tier.ON_DEMAND, Tier.RESERVED})

    @property
    def label(self) -> str:
        return f"{self.kind.value} {self.id}"


def a_year_after(start: datetime) -> datetime:
    """The same month, day and time next year: a plan's default end (a calendar year, not 365 days, which
    falls a day short across a Feb 29); Feb 29 goes to Feb 28, as dateutil's `relativedelta(years=1)`."""
    try:
        return start.replace(year=start.year + 1)
    except ValueError:  # Feb 29, and next year is not a leap year
        return start.replace(year=start.year + 1, day=28)


def plan_in_force(plans: Iterable[Plan], at_s: int) -> Plan | None:
    """The plan in force at `at_s`: of those whose window holds it, the latest started (then the last id)."""
    live = [p for p in plans if p.in_force(at_s)]
    return max(live, key=lambda p: (p.starts_s, p.id)) if live else None


def plan_discounts(plan: Plan | None, tier: Tier) -> tuple[Discount, ...]:
    """The discount a plan gives on a tier's base price (none outside its tiers, or without a plan)."""
    if plan is None or plan.discount_bp == 0 or tier not in plan.discounted_tiers:
        return ()
    return (Discount(plan.label, plan.discount_bp),)


def overlapping(plans: Iterable[Plan], new: Plan) -> Plan | None:
    """A plan of the same tenant whose window overlaps the new one's (one plan at a time)."""
    for plan in plans:
        if plan.tenant == new.tenant and plan.starts_s < new.ends_s and new.starts_s < plan.ends_s:
            return plan
    return None


def fee_postings(tenant: str, fee_micros: int) -> tuple[Posting, ...]:
    """A membership fee: tenant cash -> platform revenue."""
    return (
        Posting(AccountId.tenant_cash(tenant), -fee_micros),
        Posting(AccountId.platform_revenue(), fee_micros),
    )


def revenue_share_micros(plans: Iterable[Plan], revenue_micros: int, start_s: int, end_s: int) -> int:
    """The share of revenue reported for [start_s, end_s) (a month) that its revenue-share plans take, each
    in proportion to the time of it it was in force (a plan from mid-month takes half its rate; round half
    up, once)."""
    if revenue_micros < 0:
        raise BillingError("reported revenue must be 0 or more")
    if end_s <= start_s:
        raise BillingError("the reported period must end after it starts")
    bp_seconds = sum(
        plan.revenue_share_bp * max(0, min(plan.ends_s, end_s) - max(plan.starts_s, start_s))
        for plan in plans
        if plan.kind is PlanKind.REVENUE_SHARE
    )
    return round_half_up(revenue_micros * bp_seconds, BASIS_POINTS * (end_s - start_s))


# --- grants --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grant:
    id: str
    tenant: str
    amount_micros: int
    granted_s: int
    expires_s: int | None = None

    def __post_init__(self) -> None:
        if self.amount_micros <= 0:
            raise BillingError(f"grant {self.id}: amount must be positive")
        if self.expires_s is not None and self.expires_s <= self.granted_s:
            raise BillingError(f"grant {self.id}: expires before it is granted")


def grants_left(grants: Sequence[Grant], spends: Iterable[tuple[int, int]], at_s: int) -> dict[str, int]:
    """What is left of each grant at `at_s`, given grant spends as (at_s, micros > 0).

    A spend is attributed to the live grants (granted at or before it, not yet expired) that expire first
    (never-expiring ones last; ties by grant time, then id). A grant past its expiry keeps what was left
    at its expiry (that is what expires). Spends no live grant covers are not attributed.
    """
    left = {g.id: 0 for g in grants}
    events: list[tuple[int, int, str, int]] = []  # (time, order, grant id or "", micros)
    for g in grants:
        events.append((g.granted_s, 0, g.id, g.amount_micros))
        if g.expires_s is not None:
            events.append((g.expires_s, 1, g.id, 0))
    for spent_s, micros in spends:
        events.append((spent_s, 2, "", micros))
    expired: set[str] = set()
    by_id = {g.id: g for g in grants}
    for moment, order, grant_id, micros in sorted(events):
        if moment > at_s:
            break
        if order == 0:
            left[grant_id] = micros
        elif order == 1:
            expired.add(grant_id)
        else:
            live = sorted(
                (g for g in grants if g.id not in expired and g.granted_s <= moment and left[g.id] > 0),
                key=lambda g: (g.expires_s is None, g.expires_s or 0, g.granted_s, g.id),
            )
            for g in live:
                take = min(micros, left[g.id])
                left[g.id] -= take
                micros -= take
                if micros == 0:
                    break
    return {gid: amount for gid, amount in left.items() if gid in by_id}


def expiry_micros(grant: Grant, left_at_expiry: int, grant_balance_micros: int) -> int:
    """What to take back at a grant's expiry: what is left of it, capped at the tenant's grant balance."""
    return max(0, min(left_at_expiry, grant_balance_micros))


def expiry_postings(tenant: str, amount_micros: int) -> tuple[Posting, ...]:
    """An expired grant's rest: tenant grants -> promotions."""
    return (
        Posting(AccountId.tenant_grants(tenant), -amount_micros),
        Posting(AccountId.promotions(), amount_micros),
    )


# --- compute futures ------------------------------------------------------------------------------------


def contract_price_micros(unit_micros_per_gpu_hour: int, gpus: int, start_s: int, end_s: int) -> int:
    """A compute future's prepaid price: the unit price x GPUs x hours of its window (round half up)."""
    if gpus <= 0 or end_s <= start_s or unit_micros_per_gpu_hour < 0:
        raise BillingError("a contract needs GPUs > 0, a window and a unit price >= 0")
    return round_half_up(unit_micros_per_gpu_hour * gpus * (end_s - start_s), SECONDS_PER_HOUR)


def recognized_micros(price_micros: int, start_s: int, end_s: int, at_s: int) -> int:
    """How much of a prepaid contract is earned by `at_s`: pro rata over its window (round half up)."""
    if at_s <= start_s:
        return 0
    if at_s >= end_s:
        return price_micros
    return round_half_up(price_micros * (at_s - start_s), end_s - start_s)


def contract_postings(tenant: str, contract: str, price_micros: int) -> tuple[Posting, ...]:
    """Signing: the holder's cash -> the contract's prepaid account."""
    return (
        Posting(AccountId.tenant_cash(tenant), -price_micros),
        Posting(AccountId.contract_prepaid(contract), price_micros),
    )


def recognition_postings(contract: str, amount_micros: int) -> tuple[Posting, ...]:
    """Earned contract value: the contract's prepaid account -> platform revenue."""
    return (
        Posting(AccountId.contract_prepaid(contract), -amount_micros),
        Posting(AccountId.platform_revenue(), amount_micros),
    )


def transfer_postings(buyer: str, seller: str, value_micros: int) -> tuple[Posting, ...]:
    """A contract changing hands: the buyer pays the seller the contract's remaining value."""
    return (
        Posting(AccountId.tenant_cash(buyer), -value_micros),
        Posting(AccountId.tenant_cash(seller), value_micros),
    )


# --- invoice lines ---------------------------------------------------------------------------------------

_PLAN_KINDS = {
    TxKind.MEMBERSHIP: "membership fee",
    TxKind.REVENUE_SHARE: "revenue share",
    TxKind.CONTRACT: "compute future, prepaid",
    TxKind.TRANSFER: "compute future transfer",
}


def plan_lines(
    tenant: str, month_label: str, start_s: int, end_s: int, transactions: Iterable[Transaction]
) -> tuple[InvoiceLine, ...]:
    """The month's plan lines: what membership fees, revenue shares (by the month reported), contract
    prepayments and contract transfers took from (or, a transfer's seller, gave to) the tenant's cash."""
    cash = AccountId.tenant_cash(tenant)
    lines = []
    for tx in transactions:
        label = _PLAN_KINDS.get(tx.kind)
        if label is None:
            continue
        in_month = tx.ref == month_label if tx.kind is TxKind.REVENUE_SHARE else start_s <= tx.at_s < end_s
        amount = -sum(p.amount_micros for p in tx.postings if p.account == cash)
        if not in_month or amount == 0:
            continue
        lines.append(
            InvoiceLine(kind="plan", ref=tx.ref, description=f"{label}: {tx.memo}", amount_micros=amount)
        )
    return tuple(lines)


# --- payment terms ---------------------------------------------------------------------------------------


class PaymentMode(StrEnum):
    PREPAID = "prepaid"
    POSTPAID = "postpaid"


@dataclass(frozen=True, slots=True)
class PaymentTerms:
    mode: PaymentMode = PaymentMode.PREPAID
    credit_limit_micros: int = 0

    def __post_init__(self) -> None:
        if self.credit_limit_micros < 0:
            raise BillingError("credit_limit_micros must be 0 or more")
        if self.mode is PaymentMode.PREPAID and self.credit_limit_micros:
            raise BillingError("a prepaid tenant has no credit limit")

    @property
    def floor_micros(self) -> int:
        """The lowest balance (cash + grants) allowed."""
        return -self.credit_limit_micros

    def refuses(self, available_micros: int, new_charge_micros: int) -> bool:
        return available_micros - new_charge_micros < self.floor_micros


class FundsAction(StrEnum):
    OK = "ok"  # at or above the floor (a warning on record is cleared)
    WARN = "warn"  # below the floor for the first time: warn and start the grace period
    WAIT = "wait"  # warned, grace not over
    STOP = "stop"  # warned and the grace is over: stop the running rentals


def funds_action(
    terms: PaymentTerms, available_micros: int, warned_s: int | None, now_s: int, grace_s: int
) -> FundsAction:
    """What to do about a tenant's balance at `now_s`."""
    if available_micros >= terms.floor_micros:
        return FundsAction.OK
    if warned_s is None:
        return FundsAction.WARN
    return FundsAction.STOP if now_s - warned_s >= grace_s else FundsAction.WAIT
