"""Request and response bodies of the billing routes: prices, balances, credits, the ledger."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from suanli.wire.schemas import TierName, WireModel


class PriceResponse(WireModel):
    """One entry of the price book: a list price (on-demand, reserved) or a spot floor."""

    gpu_model: str
    region: str
    tier: TierName
    kind: Literal["list", "spot_floor"]
    price_micros_per_gpu_hour: int
    effective_from_s: int
    source: str


class BalanceResponse(WireModel):
    tenant_id: str
    cash_micros: int
    grants_micros: int
    available_micros: int


class CreditRequest(WireModel):
    amount_micros: int = Field(gt=0, le=10**15)
    grant: bool = Field(default=False, description="A grant (promotions -> grants) instead of a top-up.")
    memo: str = Field(default="", max_length=200)


class PostingResponse(WireModel):
    account_kind: str
    owner: str
    amount_micros: int


class LedgerTransactionResponse(WireModel):
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
    payable_micros: int = Field(description="The provider payable account's balance: the lines' sum.")
    lines: list[PayoutLineResponse] = Field(default_factory=list)


class LedgerVerifyResponse(WireModel):
    ok: bool
    transactions: int
    head_hash: str
    problems: list[str] = Field(default_factory=list, description="Admins only; others see the count.")
    problem_count: int = 0


class InvoiceDiscountResponse(WireModel):
    label: str
    micros_per_hour: int


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


class InvoiceResponse(WireModel):
    tenant_id: str
    month: str = Field(description="yyyy-mm, UTC.")
    lines: list[InvoiceLineResponse]
    plan_lines: list[InvoiceLineResponse]
    sla_credit_lines: list[InvoiceLineResponse]
    total_micros: int = Field(description="The exact sum of every line's amount_micros.")
    total_energy_kwh: float
    total_co2_kg: float
    notes: list[str]
