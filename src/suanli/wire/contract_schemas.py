"""Request and response bodies of contracts: creating, quoting, offering and transferring them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from suanli.wire.base import Moment, RequestModel, WireModel


class ContractCreateRequest(RequestModel):
    gpu_model: str
    count: int = Field(ge=1, le=100_000)
    region: str
    starts_at: Moment
    ends_at: Moment
    tenant_id: str | None = Field(default=None, description="Admins may sign for a tenant; else the caller.")


class ContractTransferRequest(RequestModel):
    to_tenant_id: str


class ContractResponse(WireModel):
    id: str
    tenant_id: str
    gpu_model: str
    count: int
    region: str
    starts_at: datetime
    ends_at: datetime
    created_at: datetime
    price_micros: int = Field(
        default=0, description="Prepaid at signing: the reserved list price x GPUs x window hours."
    )


class ContractQuoteResponse(WireModel):
    tenant_id: str
    gpu_model: str
    count: int
    region: str
    starts_at: datetime
    ends_at: datetime
    price_micros_per_gpu_hour: int = Field(description="The reserved list price at the window's start.")
    price_micros: int = Field(description="Prepaid at signing: that price x GPUs x window hours.")
    payable: bool = Field(description="Whether the holder's cash and payment terms cover the price now.")


class ContractOfferRequest(ContractCreateRequest):
    """Admin: offer a tenant a contract at a negotiated prepaid price."""

    tenant_id: str = Field(max_length=40, description="The tenant the offer is for.")  # type: ignore[assignment]
    price_micros: int = Field(ge=0, le=10**15, description="The whole contract's prepaid price.")
    expires_at: Moment | None = Field(
        default=None, description="Open until then: a week from now when not given, never past ends_at."
    )


class ContractOfferResponse(ContractResponse):
    price_micros: int = Field(description="The negotiated price, prepaid when the tenant accepts.")
    expires_at: datetime
    state: Literal["open", "accepted", "declined", "expired"]
    contract_id: str | None = Field(default=None, description="The contract its acceptance signed.")
    decided_at: datetime | None = None
