"""Plan commands: plans, revenue reports, grants, payment terms and limits (admins set them; tenants read
theirs)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from pydantic import ValidationError

from suanli.cli.output import (
    emit,
    logged_in,
    micros,
    micros_option,
    moment_option,
    month_argument,
    table,
    usage_error,
)
from suanli.client.client import BudgetChanges, LimitsChanges
from suanli.wire.plan_schemas import (
    GrantResponse,
    LimitsResponse,
    PaymentTermsResponse,
    PlanRequest,
    PlanResponse,
    RevenueReportResponse,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]
TenantOption = Annotated[str | None, typer.Option("--tenant", help="Admins: another tenant.")]


def _bp(percent: float, option: str) -> int:
    if not 0 <= percent <= 100:
        raise usage_error(f"{option}: a percent from 0 to 100, got {percent:g}")
    return round(percent * 100)


def admin_plan(
    tenant_id: str,
    kind: Annotated[str, typer.Option("--kind", help="membership or revenue_share.")],
    discount_pct: Annotated[
        float, typer.Option("--discount-pct", help="Off on-demand (membership) or on-demand and reserved.")
    ] = 0.0,
    fee: Annotated[str, typer.Option("--fee", help="A membership's annual fee, currency units.")] = "0",
    share_pct: Annotated[
        float, typer.Option("--share-pct", help="Revenue share: percent of reported monthly revenue.")
    ] = 0.0,
    starts: Annotated[
        datetime | None,
        typer.Option(
            "--starts", parser=moment_option, metavar="TIME", help="now, +1d or ISO 8601 (UTC); default now."
        ),
    ] = None,
    ends: Annotated[
        datetime | None,
        typer.Option(
            "--ends",
            parser=moment_option,
            metavar="TIME",
            help="+90d or ISO 8601 (UTC); default a year after the start.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Put a tenant on a plan (admin key); a membership's fee is posted at once."""
    try:
        request = PlanRequest(
            kind=kind,  # type: ignore[arg-type]
            discount_bp=_bp(discount_pct, "--discount-pct"),
            fee_micros=micros_option(fee, "--fee"),
            revenue_share_bp=_bp(share_pct, "--share-pct"),
            starts_at=starts,
            ends_at=ends,
        )
    except ValidationError as error:
        first = error.errors()[0]
        raise usage_error(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None
    options = {
        "kind": "--kind",
        "discount_bp": "--discount-pct",
        "fee_micros": "--fee",
        "revenue_share_bp": "--share-pct",
        "starts_at": "--starts",
        "ends_at": "--ends",
    }
    with logged_in(options) as client:
        plan = client.create_plan(tenant_id, request)
    emit([plan], as_json, _plans_table)


def plans(tenant: TenantOption = None, as_json: JsonFlag = False) -> None:
    """Your plans (memberships, revenue shares), past and current."""
    with logged_in() as client:
        found = client.plans(tenant)
    emit(found, as_json, _plans_table)


def report_revenue(
    month: Annotated[str, typer.Argument(help="yyyy-mm", callback=month_argument)],
    revenue: Annotated[str, typer.Argument(help="The month's revenue, currency units.")],
    tenant: TenantOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Report a month's revenue (revenue-share plans); the share is posted on that month's invoice."""
    amount = micros_option(revenue, "REVENUE")
    with logged_in() as client:
        found = client.report_revenue(month, amount, tenant)
    emit(found, as_json, _report_table)


def grants(tenant: TenantOption = None, as_json: JsonFlag = False) -> None:
    """Your grants and what is left of each (spent before cash, the soonest to expire first)."""
    with logged_in() as client:
        found = client.grants(tenant)
    emit(found, as_json, _grants_table)


def admin_terms(
    tenant_id: str,
    mode: Annotated[str, typer.Option("--mode", help="prepaid or postpaid.")],
    credit_limit: Annotated[
        str, typer.Option("--credit-limit", help="Postpaid: how far below 0 it may go, currency units.")
    ] = "0",
    as_json: JsonFlag = False,
) -> None:
    """Set how a tenant pays (admin key)."""
    if mode not in ("prepaid", "postpaid"):
        raise usage_error(f"--mode: prepaid or postpaid, got {mode!r}")
    limit = micros_option(credit_limit, "--credit-limit")
    with logged_in() as client:
        found = client.set_payment_terms(tenant_id, mode, limit)
    emit(found, as_json, _terms_table)


def terms(tenant: TenantOption = None, as_json: JsonFlag = False) -> None:
    """How you pay, and when running rentals stop if the balance stays below the floor."""
    with logged_in() as client:
        found = client.payment_terms(tenant)
    emit(found, as_json, _terms_table)


NONE_WORDS = ("none", "-")  # an option's value that removes a quota or a cap


def admin_limits(
    tenant_id: str,
    quota: Annotated[
        list[str] | None,
        typer.Option(
            "--quota",
            help=(
                "MODEL=GPUS or FAMILY=GPUS, repeatable; * for every GPU (e.g. '*=16', H100=8); "
                "GROUP=none removes one."
            ),
        ),
    ] = None,
    daily: Annotated[
        str | None, typer.Option("--daily", help="Spend cap per UTC day, in units; none removes it.")
    ] = None,
    monthly: Annotated[
        str | None, typer.Option("--monthly", help="Spend cap per month, in units; none removes it.")
    ] = None,
    weight: Annotated[
        float | None,
        typer.Option("--weight", help="Fair-share weight (every queue), relative to 1: 0.001 to 1000."),
    ] = None,
    replace_all: Annotated[
        bool,
        typer.Option("--replace", help="Replace every quota, cap and the weight with the options given."),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Change a tenant's GPU quotas, spend caps or fair-share weight; what is not given stays (admin key)."""
    gpu_quota: dict[str, int | None] = {}
    for item in quota or []:
        group, _, count = item.partition("=")
        if not group or not (count.isdigit() or count.lower() in NONE_WORDS):
            raise usage_error(f"--quota: MODEL=GPUS, FAMILY=GPUS or GROUP=none, got {item!r}")
        gpu_quota[group] = int(count) if count.isdigit() else None
    changes: LimitsChanges = {}
    if gpu_quota:
        changes["gpu_quota"] = gpu_quota
    if daily is not None:
        changes["daily_cap_micros"] = _cap_option(daily, "--daily")
    if monthly is not None:
        changes["monthly_cap_micros"] = _cap_option(monthly, "--monthly")
    if weight is not None:
        changes["fair_share_weight"] = weight
    options = {
        "gpu_quota": "--quota",
        "daily_cap_micros": "--daily",
        "monthly_cap_micros": "--monthly",
        "fair_share_weight": "--weight",
    }
    with logged_in(options) as client:
        if replace_all:
            removed = sorted(group for group, gpus in gpu_quota.items() if gpus is None)
            if removed:
                raise usage_error(f"--quota: {removed[0]}=none with --replace: leave it out instead")
            kept = {group: gpus for group, gpus in gpu_quota.items() if gpus is not None}
            daily_micros, monthly_micros = changes.get("daily_cap_micros"), changes.get("monthly_cap_micros")
            found = client.set_limits(tenant_id, kept, daily_micros, monthly_micros, weight or 1.0)
        elif changes:
            found = client.change_limits(tenant_id, **changes)
        else:
            found = client.limits(tenant_id)
    emit(found, as_json, _limits_table)


def _cap_option(text: str, option: str) -> int | None:
    """A spend cap option's micros, or None for `none` (the cap is removed)."""
    return None if text.lower() in NONE_WORDS else micros_option(text, option)


def limits(tenant: TenantOption = None, as_json: JsonFlag = False) -> None:
    """Your GPU quotas, spend caps and own budget: a rental past them waits with reason quota or spend_cap."""
    with logged_in() as client:
        found = client.limits(tenant)
    emit(found, as_json, _limits_table)


def budget(
    daily: Annotated[
        str | None, typer.Option("--daily", help="Most to spend per UTC day, in units; none removes it.")
    ] = None,
    monthly: Annotated[
        str | None,
        typer.Option("--monthly", help="Most to spend per calendar month, in units; none removes it."),
    ] = None,
    stop_running: Annotated[
        bool | None,
        typer.Option(
            "--stop-running/--keep-running",
            help="Stop your running rentals once the budget is spent, or (the default) only hold new ones.",
        ),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove your budget.")] = False,
    tenant: TenantOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show your spend against your budget, or change it (only what you give; the rest stays): a rental that
    would take your spend past it waits with reason spend_cap, your rentals get a budget event at 80% and
    100% of it, and with --stop-running the running ones stop once it is spent."""
    changes: BudgetChanges = {}
    if daily is not None:
        changes["daily_micros"] = _cap_option(daily, "--daily")
    if monthly is not None:
        changes["monthly_micros"] = _cap_option(monthly, "--monthly")
    if stop_running is not None:
        changes["stop_running"] = stop_running
    if clear and changes:
        raise usage_error("--clear removes the budget: give it alone")
    options = {"daily_micros": "--daily", "monthly_micros": "--monthly", "stop_running": "--stop-running"}
    with logged_in(options) as client:
        if clear:
            found = client.set_budget(None, None, tenant)
        elif changes:
            found = client.change_budget(tenant, **changes)
        else:
            found = client.limits(tenant)
    emit(found, as_json, _budget_table)


def _budget_table(found: LimitsResponse):
    """Each spend limit with what was spent against it this day or month, and the share used."""
    rows = []
    for name, limit, spent in (
        ("own daily budget", found.budget_daily_micros, found.spent_today_micros),
        ("own monthly budget", found.budget_monthly_micros, found.spent_month_micros),
        ("daily cap (operator)", found.daily_cap_micros, found.spent_today_micros),
        ("monthly cap (operator)", found.monthly_cap_micros, found.spent_month_micros),
    ):
        if limit is None:
            continue
        rows.append((name, micros(limit), micros(spent), used_percent(spent, limit)))
    if not rows:
        rows.append(("none (this month)", "", micros(found.spent_month_micros), ""))
    shown = table(f"budget: {found.tenant_id}", ["limit", "amount", "spent", "used"], rows)
    shown.caption = "at 80% and 100% of a limit your rentals get a budget event (webhooks get it too)"
    if found.budget_stops_running:
        shown.caption += "; running rentals stop once the budget is spent"
    return shown


def used_percent(spent_micros: int, limit_micros: int) -> str:
    """The share of a limit spent, floored to a tenth of a percent: 100% only once it is reached (99.99% is
    99.9%, not a rounded-up 100% that says the limit is hit while rentals still start)."""
    if not limit_micros:
        return "100%"  # a limit of 0 is reached: it holds every rental back
    tenths = spent_micros * 1000 // limit_micros
    return f"{tenths / 10:.1f}".removesuffix(".0") + "%"


def _limits_table(found: LimitsResponse):
    quota = ", ".join(f"{group}: {gpus}" for group, gpus in sorted(found.gpu_quota.items())) or "none"

    def amount(value: int | None) -> str:
        return "none" if value is None else micros(value)

    rows = [
        (
            found.tenant_id,
            quota,
            amount(found.daily_cap_micros),
            amount(found.monthly_cap_micros),
            amount(found.budget_daily_micros),
            amount(found.budget_monthly_micros),
            f"{found.fair_share_weight:g}",
            f"{found.fair_share_usage_gpu_hours:,.1f}",
        )
    ]
    columns = [
        "tenant",
        "GPU quota",
        "daily cap",
        "monthly cap",
        "own daily budget",
        "own monthly budget",
        "fair-share weight",
        "usage (GPU-h)",
    ]
    return table("limits", columns, rows)


def _plans_table(found: list[PlanResponse]):
    rows = [
        (
            p.id,
            p.tenant_id,
            p.kind,
            f"{p.discount_bp / 100:g}%",
            micros(p.fee_micros),
            f"{p.revenue_share_bp / 100:g}%",
            f"{p.starts_at:%Y-%m-%d}",
            f"{p.ends_at:%Y-%m-%d}",
        )
        for p in found
    ]
    return table("plans", ["id", "tenant", "kind", "discount", "fee", "share", "from", "until"], rows)


def _report_table(found: RevenueReportResponse):
    rows = [(found.tenant_id, found.month, micros(found.revenue_micros), micros(found.share_micros))]
    return table("revenue report", ["tenant", "month", "revenue", "share posted"], rows)


def _grants_table(found: list[GrantResponse]):
    rows = [
        (
            g.id,
            micros(g.amount_micros),
            micros(g.left_micros),
            f"{g.granted_at:%Y-%m-%d %H:%M}",
            "" if g.expires_at is None else f"{g.expires_at:%Y-%m-%d %H:%M}",
        )
        for g in found
    ]
    return table("grants", ["id", "granted", "left", "on", "expires"], rows)


def _terms_table(found: PaymentTermsResponse):
    rows = [
        (
            found.tenant_id,
            found.mode,
            micros(found.credit_limit_micros),
            micros(found.floor_micros),
            "" if found.warned_at is None else f"{found.warned_at:%Y-%m-%d %H:%M:%S}",
            "" if found.stops_at is None else f"{found.stops_at:%Y-%m-%d %H:%M:%S}",
        )
    ]
    return table(
        "payment terms", ["tenant", "mode", "credit limit", "floor", "below floor since", "stops at"], rows
    )
