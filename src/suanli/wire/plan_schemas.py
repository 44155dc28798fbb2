"""Request and response bodies of plans, revenue reports, grants and payment terms."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator

from suanli.wire.base import MONTH_PATTERN, Moment, RequestModel, WireModel

MAX_MICROS = 10**15


MIN_WEIGHT = 0.001  # a fair-share weight's range is 1/1000 to 1000 times the default's


class PlanRequest(RequestModel):
    """Admin: put a tenant on a plan. A membership's fee is posted from its cash when the plan is made."""

    kind: Literal["membership", "revenue_share"]
    discount_bp: int = Field(
        default=0, ge=0, le=10_000, description="Off on-demand (membership) or on-demand and reserved prices."
    )
    fee_micros: int = Field(default=0, ge=0, le=MAX_MICROS, description="A membership's annual fee.")
    revenue_share_bp: int = Field(
        default=0, ge=0, le=10_000, description="Revenue share: the part of reported revenue owed."
    )
    starts_at: Moment | None = Field(default=None, description="Now when not given.")
    ends_at: Moment | None = Field(default=None, description="A year after the start when not given.")


class PlanResponse(WireModel):
    id: str
    tenant_id: str
    kind: str
    discount_bp: int
    fee_micros: int
    revenue_share_bp: int
    starts_at: datetime
    ends_at: datetime


class RevenueReportRequest(RequestModel):
    month: str = Field(pattern=MONTH_PATTERN, description="yyyy-mm (UTC)")
    revenue_micros: int = Field(ge=0, le=MAX_MICROS)


class RevenueReportResponse(WireModel):
    tenant_id: str
    month: str
    revenue_micros: int
    share_micros: int
    ledger_key: str


class GrantResponse(WireModel):
    id: str
    tenant_id: str
    amount_micros: int
    left_micros: int
    granted_at: datetime
    expires_at: datetime | None


class PaymentTermsRequest(RequestModel):
    mode: Literal["prepaid", "postpaid"]
    credit_limit_micros: int = Field(default=0, ge=0, le=MAX_MICROS, description="Postpaid only.")


class PaymentTermsResponse(WireModel):
    tenant_id: str
    mode: str
    credit_limit_micros: int
    floor_micros: int
    warned_at: datetime | None = Field(description="When the balance went below the floor (None: it is not).")
    stops_at: datetime | None = Field(description="When running rentals stop unless credit arrives.")


class LimitsRequest(RequestModel):
    gpu_quota: dict[str, int] = Field(
        default_factory=dict,
        description=(
            'Most GPUs held at once per catalogue model or family name, or "*" for every GPU, '
            'e.g. {"*": 16, "H100": 8}.'
        ),
    )
    daily_cap_micros: int | None = Field(default=None, ge=0, le=MAX_MICROS, description="Per UTC day.")
    monthly_cap_micros: int | None = Field(default=None, ge=0, le=MAX_MICROS, description="Per month.")
    fair_share_weight: float = Field(
        default=1.0,
        ge=MIN_WEIGHT,
        le=1000,
        allow_inf_nan=False,
        description="Share of the fleet under contention, relative to others (1): 0.001 to 1000.",
    )


class LimitsPatch(RequestModel):
    """A change to a tenant's limits: only the fields given change (JSON merge patch); null removes a quota
    or a cap."""

    gpu_quota: dict[str, int | None] = Field(
        default_factory=dict,
        description='Quotas to set or, with null, remove, e.g. {"H100": 8, "*": null}; the others stay.',
    )
    daily_cap_micros: int | None = Field(default=None, ge=0, le=MAX_MICROS, description="Per UTC day.")
    monthly_cap_micros: int | None = Field(default=None, ge=0, le=MAX_MICROS, description="Per month.")
    fair_share_weight: float | None = Field(
        default=None,
        ge=MIN_WEIGHT,
        le=1000,
        allow_inf_nan=False,
        description="Share of the fleet under contention, relative to others: 0.001 to 1000.",
    )

    @field_validator("gpu_quota", mode="before")
    @classmethod
    def _quota_map_not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError('null would remove every quota: name each ({"H100": null}), or PUT the limits')
        return value

    @field_validator("fair_share_weight")
    @classmethod
    def _weight_not_null(cls, value: float | None) -> float:
        if value is None:  # only a weight given as null: one left out is not validated
            raise ValueError("a number from 0.001 to 1000 (1 is the default), not null")
        return value


class BudgetRequest(RequestModel):
    """A tenant's own spend budget: a rental that would take its spend past it waits (`spend_cap`), as past
    the operator's caps; null: no budget."""

    daily_micros: int | None = Field(default=None, ge=0, le=MAX_MICROS, description="Per UTC day.")
    monthly_micros: int | None = Field(default=None, ge=0, le=MAX_MICROS, description="Per calendar month.")
    stop_running: bool = Field(
        default=False,
        description="Also stop your running rentals once a budget is spent (checked at each meter charge). "
        "Whatever you set, you get a `budget` event at 80% and 100% of each budget and cap.",
    )


class BudgetPatch(RequestModel):
    """A change to a tenant's own budget: only the fields given change (JSON merge patch); null removes a
    daily or monthly budget."""

    daily_micros: int | None = Field(default=None, ge=0, le=MAX_MICROS, description="Per UTC day.")
    monthly_micros: int | None = Field(default=None, ge=0, le=MAX_MICROS, description="Per calendar month.")
    stop_running: bool | None = Field(
        default=None, description="Whether your running rentals stop once a budget is spent."
    )

    @field_validator("stop_running")
    @classmethod
    def _stop_running_not_null(cls, value: bool | None) -> bool:
        if value is None:  # only one given as null: one left out is not validated
            raise ValueError("true or false, not null")
        return value


class LimitsResponse(WireModel):
    tenant_id: str
    gpu_quota: dict[str, int]
    daily_cap_micros: int | None
    monthly_cap_micros: int | None
    budget_daily_micros: int | None = Field(default=None, description="The tenant's own daily budget.")
    budget_monthly_micros: int | None = Field(default=None, description="The tenant's own monthly budget.")
    budget_stops_running: bool = Field(
        default=False, description="Running rentals stop once the tenant's own budget is spent."
    )
    spent_today_micros: int = Field(
        default=0,
        description="Spent so far this UTC day (cash and grants): charged, and run up but not yet metered.",
    )
    spent_month_micros: int = Field(
        default=0, description="Spent so far this calendar month: charged, and run up but not yet metered."
    )
    fair_share_weight: float
    fair_share_usage_gpu_hours: float = Field(
        default=0.0,
        description="GPU-hours held, decayed with a 7-day half-life: the backfill queue serves lower usage / "
        "weight first among tenants of one tier. As its leader last saved it (each minute).",
    )
    fair_share_as_of: datetime | None = None
