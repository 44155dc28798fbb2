"""/v1/sla/{yyyy-mm} (a tenant's availability and credit), /v1/admin/sla/{yyyy-mm} (admin: post credits)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query

from suanli.api.deps import CallerDep, ServicesDep
from suanli.api.errors import ERROR_RESPONSES
from suanli.api.wiring import Services
from suanli.app.sla import SlaService, SlaStatement
from suanli.domain.billing.sla import format_ppm
from suanli.wire.billing_schemas import OutageResponse, SlaPostResponse, SlaResponse

router = APIRouter(prefix="/v1", tags=["billing"], responses=ERROR_RESPONSES)
MonthPath = Annotated[str, Path(max_length=7, description="A UTC month, yyyy-mm.")]


def _sla(services: Services) -> SlaService:
    assert services.sla is not None
    return services.sla


def _at(epoch_s: int | None) -> datetime | None:
    return None if epoch_s is None else datetime.fromtimestamp(epoch_s, tz=UTC)


def _response(statement: SlaStatement) -> SlaResponse:
    report = statement.report
    return SlaResponse(
        tenant_id=report.tenant_id,
        month=str(report.month),
        ended=statement.ended,
        availability_ppm=report.availability_ppm,
        availability_percent=format_ppm(report.availability_ppm),
        rental_seconds=report.total_s,
        down_seconds=report.down_s,
        outages=[
            OutageResponse(
                id=o.id,
                node=o.node,
                started_at=datetime.fromtimestamp(o.started_s, tz=UTC),
                ended_at=_at(o.ended_s),
                cause=o.cause,
            )
            for o in report.outages
        ],
        affected_micros=report.affected_micros,
        credit_bp=report.credit_bp,
        credit_micros=report.credit_micros,
        posted_key=None if statement.posted is None else statement.posted.key,
        posted_micros=statement.posted_micros,
    )


@router.get("/sla/{month}")
def get_sla(
    month: MonthPath,
    caller: CallerDep,
    services: ServicesDep,
    tenant: Annotated[str | None, Query(max_length=40, description="Admins: another tenant.")] = None,
) -> SlaResponse:
    """The caller's availability in a month, the outages that hit its rentals, affected charges and credit."""
    return _response(_sla(services).report(caller, month, tenant))


@router.post("/admin/sla/{month}")
def post_sla(month: MonthPath, caller: CallerDep, services: ServicesDep) -> SlaPostResponse:
    """Admin: post the SLA credits of an ended month (idempotent: each tenant's credit is posted once)."""
    done = _sla(services).post_month(caller, month)
    return SlaPostResponse(
        month=month, posted=sum(1 for s in done if s.new), tenants=[_response(s) for s in done]
    )
