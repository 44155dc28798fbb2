"""Request and response bodies of the billing routes: prices, balances, credits, the ledger."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, RootModel

from suanli.wire.base import Moment, RequestModel, TierName, WireModel


class PriceResponse(WireModel):
    """One entry of the price book: a list price (on-demand, reserved), an explicit MIG instance price
    (`kind` mig, per hour of one instance of `mig_profile`) or a spot floor."""

    gpu_model: str
    region: str
    tier: TierName
    kind: Literal["list", "spot_floor", "mig"]
    price_micros_per_gpu_hour: int
    effective_from_s: int
    source: str
    mig_profile: str | None = None


class PriceEntryRequest(RequestModel):
    """Admin: one price book entry. Tier on_demand/reserved: a list price per GPU-hour, or with
    `mig_profile` the price per hour of one MIG instance; tier spot: the spot floor per GPU-hour."""

    gpu_model: str = Field(min_length=1, max_length=60, description="A catalogue model or family.")
    region: str = Field(default="*", min_length=1, max_length=100, description="A fleet region or * (any).")
    tier: TierName
    mig_profile: str | None = Field(default=None, min_length=1, max_length=20)
    price_micros_per_gpu_hour: int = Field(ge=0, le=10**15)
    effective_from: Moment | None = Field(
        default=None, description="When it takes effect (UTC); now when not given; never in the past."
    )
    source: str = Field(default="", max_length=500, description="Where the price comes from.")


class PriceEntryList(RootModel[list[PriceEntryRequest]]):
    """The body of PUT /v1/prices: the entries to add."""


class PriceEntryResponse(WireModel):
    id: int
    gpu_model: str
    region: str
    tier: TierName
    mig_profile: str | None = None
    price_micros_per_gpu_hour: int
    effective_from: datetime
    effective_from_s: int
    source: str
    created_at: datetime


class BalanceResponse(WireModel):
    tenant_id: str
    cash_micros: int
    grants_micros: int
    available_micros: int


class CreditRequest(RequestModel):
    amount_micros: int = Field(gt=0, le=10**15)
    grant: bool = Field(default=False, description="A grant (promotions -> grants) instead of a top-up.")
    memo: str = Field(default="", max_length=200)
    expires_at: Moment | None = Field(
        default=None, description="A grant's expiry: what is left of it then goes back to promotions."
    )


class PostingResponse(WireModel):
    account_kind: str
    owner: str
    amount_micros: int


class LedgerTransactionResponse(WireModel):
    seq: int | None = Field(
        None, description="Its place in the chain (in `GET /v1/ledger`): `?after=` it gives the next page."
    )
    key: str
    kind: str
    at_s: int
    ref: str
    memo: str
    prev_hash: str
    hash: str
    postings: list[PostingResponse]


class PayoutLineResponse(WireModel):
    ref: str = Field(description="The rental whose charges built this part of the payable.")
    amount_micros: int
    transactions: int


class PayoutResponse(WireModel):
    provider: str
    payable_micros: int = Field(
        description="The provider payable account's balance: the sum of its lines over every page."
    )
    lines: list[PayoutLineResponse] = Field(
        default_factory=list, description="This page's lines of the provider, one per rental, by rental id."
    )


class LedgerVerifyResponse(WireModel):
    ok: bool
    transactions: int
    head_hash: str
    problems: list[str] = Field(default_factory=list, description="Admins only; others see the count.")
    problem_count: int = 0


class InvoiceDiscountResponse(WireModel):
    label: str
    micros_per_hour: int


class InvoiceSegmentResponse(WireModel):
    """A rental line's time in the month at one rate, with the plan discounts (none: []) that priced it."""

    from_at: datetime
    to_at: datetime
    rate_micros_per_hour: int
    discounts: list[InvoiceDiscountResponse]


class InvoiceLineResponse(WireModel):
    kind: Literal["rental", "plan", "sla_credit"]
    ref: str
    description: str
    gpu_seconds: float
    rate_micros_per_hour: int
    discounts: list[InvoiceDiscountResponse]
    amount_micros: int = Field(description="What the ledger charged inside the month.")
    energy_kwh: float | None = None
    co2_kg: float | None = None
    energy_source: Literal["measured", "tdp_estimate"] | None = Field(
        default=None,
        description="Rental lines: measured (agent power telemetry) or tdp_estimate (TDP x 0.7).",
    )
    segments: list[InvoiceSegmentResponse] = Field(
        default_factory=list,
        description="Rental lines: each rate in the month with the plan (discounts) that priced it; the "
        "line's rate and discounts are its last segment's.",
    )


class InvoiceResponse(WireModel):
    tenant_id: str
    month: str = Field(description="yyyy-mm, UTC.")
    lines: list[InvoiceLineResponse] = Field(
        description="Rental lines: a page of them (`limit` past `after`; the Link header names the next)."
    )
    line_count: int | None = Field(
        default=None, description="How many rental lines the month has (absent from servers before paging)."
    )
    plan_lines: list[InvoiceLineResponse]
    sla_credit_lines: list[InvoiceLineResponse]
    total_micros: int = Field(description="The exact sum of every line's amount_micros.")
    total_energy_kwh: float
    total_co2_kg: float
    notes: list[str]


class OutageResponse(WireModel):
    """A node out of service over [started_at, ended_at) (open while ended_at is null): SLA evidence."""

    id: int
    node: str
    started_at: datetime
    ended_at: datetime | None = None
    cause: str = ""


class SlaResponse(WireModel):
    """A tenant's SLA month: availability from the outages that hit its rentals, and the credit it earns."""

    tenant_id: str
    month: str = Field(description="yyyy-mm, UTC.")
    ended: bool = Field(description="The month is over; credits are posted only then.")
    availability_ppm: int = Field(description="Parts per million, floored; 1000000 with no outage.")
    availability_percent: str = Field(description="The same as a percentage with 4 decimals, truncated.")
    rental_seconds: int = Field(description="Rental-seconds in the month, down time included.")
    down_seconds: int = Field(description="Rental-seconds during outages of the nodes the rentals held.")
    outages: list[OutageResponse] = Field(description="The outages that hit the tenant's rentals (evidence).")
    affected_micros: int = Field(description="The month's charges of the rentals an outage hit.")
    credit_bp: int = Field(description="Basis points of affected charges credited (0, 1000, 2500, 10000).")
    credit_micros: int
    posted_key: str | None = Field(default=None, description="The ledger key of the posted credit.")
    posted_micros: int = Field(default=0, description="What the ledger credited (0 until posted).")


class SlaPostResponse(WireModel):
    month: str
    posted: int = Field(description="Credits newly posted by this call.")
    tenants: list[SlaResponse] = Field(description="Every tenant an outage hit in the month.")
