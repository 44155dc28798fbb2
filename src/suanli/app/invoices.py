"""Invoices: a tenant's month from its rentals, the ledger, plan and SLA lines, energy and carbon.

Amounts are what the ledger charged inside the month (`suanli.domain.billing.invoice`); energy uses measured
GPU power from agent telemetry when it covers at least half a rental's time (`energy`), else TDP x 0.7.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from suanli.app.errors import Invalid, NotFound
from suanli.app.fleet import FleetCache
from suanli.app.ports import Clock, RunEnergyReader, UnitOfWorkFactory
from suanli.app.records import BillableRental, Caller, HeldAllocation, Rental
from suanli.app.tenants import target_tenant
from suanli.app.usage import metered, rental_usage, replaced
from suanli.domain.billing.energy import average_power_per_gpu_w, blend_models, blend_regions, held_s
from suanli.domain.billing.invoice import (
    Invoice,
    InvoiceError,
    InvoiceLine,
    Month,
    RateSegment,
    RentalBilling,
    Size,
    build_invoice,
    gpu_fraction,
    size_seconds,
    without_gaps,
)
from suanli.domain.billing.ledger import AccountKind, TxKind
from suanli.domain.billing.meter import RentalUsage
from suanli.domain.billing.money import to_epoch_s
from suanli.domain.billing.plans import plan_lines
from suanli.domain.billing.sla import sla_credit_line, sla_key
from suanli.domain.catalog import Catalog

LINES_LIMIT = 1000  # the most rental lines one answer of GET /v1/invoices/{month} holds


@dataclass(frozen=True)
class InvoicePage:
    """A page of a month's rental lines, `lines`, with the whole `invoice` (its plan and SLA lines and totals
    go with every page); `more`: whether more rental lines follow."""

    invoice: Invoice
    lines: tuple[InvoiceLine, ...]
    more: bool


class InvoiceService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        clock: Clock,
        catalog: Catalog,
        cache: FleetCache,
        energy: RunEnergyReader | None = None,
    ) -> None:
        """`energy`: measured GPU energy of rentals; None: every line uses the TDP estimate."""
        self.uow, self.clock, self.catalog, self.cache, self.energy = uow, clock, catalog, cache, energy

    # --- invoices --------------------------------------------------------------------------------------

    def invoice_page(
        self,
        caller: Caller,
        month_text: str,
        tenant_id: str | None = None,
        after: str | None = None,
        limit: int = LINES_LIMIT,
    ) -> InvoicePage:
        """`invoice` with at most `limit` of its rental lines, those past the line of the rental `after` in
        the invoice's order (started, then rental id): a month of 10,000 rentals is not one answer."""
        return page_of_lines(self.invoice(caller, month_text, tenant_id), after, limit)

    def invoice(self, caller: Caller, month_text: str, tenant_id: str | None = None) -> Invoice:
        """The caller's invoice for a UTC month (`yyyy-mm`); an admin may name another tenant."""
        try:
            month = Month.parse(month_text)
        except InvoiceError as error:
            raise Invalid(str(error), field="month") from None
        target = target_tenant(caller, tenant_id)
        now_s = to_epoch_s(self.clock.now())
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            billable = [b for b in uow.rentals.billable() if b.rental.tenant_id == target]
            _, fleet = self.cache.load(uow)
            transactions = uow.ledger.transactions(target)
            resized = uow.rentals.sizes([b.rental.id for b in billable])
            placed = uow.rentals.placed_sizes([b.rental.id for b in billable if b.rental.id not in resized])
            runs = uow.rentals.run_spans([b.rental.id for b in billable if replaced(metered(b))])
            rates = uow.rentals.rate_discounts([b.rental.id for b in billable])
            ids = sorted(b.rental.id for b in billable)
            held = uow.rentals.held_allocations(first=ids[0], last=ids[-1], only=set(ids)) if ids else {}
        charged = frozenset({AccountKind.PROVIDER_PAYABLE, AccountKind.PLATFORM_REVENUE})
        charges: dict[str, list[tuple[int, int]]] = {}
        for tx in transactions:
            if tx.kind is TxKind.CHARGE:
                charges.setdefault(tx.ref, []).append((tx.at_s, tx.amount_to(charged)))
        nodes = {} if fleet is None else {node.name: node for node in fleet.nodes}
        regions = {} if fleet is None else dict(fleet.regions)
        measured = {} if self.energy is None else self.energy.measured([b.rental.id for b in billable])
        rentals = []
        for item in billable:
            usage = rental_usage(item, {}, runs=runs.get(item.rental.id, ()))
            if usage is None:
                continue
            sizes = tuple(
                Size(to_epoch_s(at), n, per_node) for at, n, per_node in resized.get(item.rental.id, ())
            ) or held_size(item.rental, usage.started_s, placed.get(item.rental.id))
            if usage.gaps:  # re-queued: no GPU-seconds (nor energy) while it waited in the queue
                sizes = without_gaps(sizes or spec_size(item.rental, usage.started_s), usage.gaps)
            power = self._measured_power_w(item.rental, usage, measured.get(item.rental.id), now_s, sizes)
            billing = self._rental_billing(item, usage, nodes, regions, power, sizes)
            billing = replace(billing, rates=rate_segments(rates.get(item.rental.id, ()), billing.discounts))
            if item.rental.id in held:
                billing = spread_over_nodes(
                    billing, held[item.rental.id], nodes, regions, self.catalog, usage, now_s
                )
            rentals.append(billing)
        sla = [sla_credit_line(tx) for tx in transactions if tx.key == sla_key(target, month)]
        plans = plan_lines(target, str(month), month.start_s, month.end_s, transactions)
        return build_invoice(target, month, rentals, charges, now_s, sla_credits=sla, plan_lines=plans)

    @staticmethod
    def _measured_power_w(
        rental: Rental,
        usage: RentalUsage,
        measured: tuple[float, float, float] | None,
        now_s: int,
        sizes: tuple[Size, ...] = (),
    ) -> float | None:
        """Measured average power per GPU over the rental's life (`suanli.domain.billing.energy`), or None
        (TDP estimate) when its runs' measured seconds cover less than half its billable node-seconds."""
        if measured is None:
            return None
        stop = now_s if usage.ended_s is None else min(now_s, usage.ended_s)
        if sizes:
            node_s = size_seconds(sizes, usage.started_s, stop)[0]
        else:
            node_s = float(max(0, stop - usage.started_s) * rental.spec.nodes)
        energy_j, measured_s, measured_gpu_s = measured
        return average_power_per_gpu_w(energy_j, measured_s, measured_gpu_s, node_s)

    def _rental_billing(
        self,
        item: BillableRental,
        usage: RentalUsage,
        nodes: dict[str, Any],
        regions: dict[str, Any],
        measured_power_w: float | None = None,
        sizes: tuple[Size, ...] = (),
    ) -> RentalBilling:
        """Energy facts from the rental's first node (model TDP, region PUE and grid intensity), and its
        measured average power per GPU when telemetry covers enough of it (else the TDP estimate is used)."""
        rental, spec = item.rental, item.rental.spec
        node = nodes.get(item.node)
        model_name = node.gpu_model if node is not None else None
        if model_name is None and rental.quote is not None:
            model_name = str(rental.quote.get("model") or "") or None
        tdp = None
        if model_name is not None and model_name in self.catalog:
            tdp = self.catalog.get(model_name).tdp_watts
        region = regions.get(node.region) if node is not None else None
        discounts: tuple[tuple[str, int], ...] = ()
        if rental.quote is not None:
            found = rental.quote.get("discounts") or []
            discounts = tuple(
                (str(d["label"]), int(d["micros_per_hour"]))  # type: ignore[index,call-overload]
                for d in found  # type: ignore[attr-defined]
            )
        return RentalBilling(
            rental_id=rental.id,
            started_s=usage.started_s,
            ended_s=usage.ended_s,
            rate_micros_per_hour=usage.rate_micros_per_hour,
            gpu_fraction=(
                sizes[-1].nodes * sizes[-1].gpus_per_node
                if sizes
                else gpu_fraction(spec.gpus, spec.nodes, spec.mig_profile, spec.share_milli)
            ),
            gpu_model=model_name,
            region=None if region is None else region.name,
            tdp_watts=tdp,
            pue=None if region is None else region.pue,
            grid_gco2_per_kwh=None if region is None else region.grid_gco2_per_kwh,
            measured_power_w=measured_power_w,
            discounts=discounts,
            sizes=sizes,
        )


def page_of_lines(invoice: Invoice, after: str | None, limit: int) -> InvoicePage:
    """`invoice` with at most `limit` (`LINES_LIMIT` at most) of its rental lines past the line whose ref is
    `after`; a ref the month has no line of is refused naming `after` (another tenant's rental as none)."""
    start = 0
    if after is not None:
        refs = [line.ref for line in invoice.lines]
        if after not in refs:
            raise Invalid(f"no line of rental {after} in {invoice.month} to list past", field="after")
        start = refs.index(after) + 1
    size = min(limit, LINES_LIMIT)
    return InvoicePage(invoice, invoice.lines[start : start + size], start + size < len(invoice.lines))


def rate_segments(
    rows: Sequence[tuple[datetime, int, list[tuple[str, int]] | None]], current: tuple[tuple[str, int], ...]
) -> tuple[RateSegment, ...]:
    """A re-priced rental's rate rows as invoice segments, each with the plan discounts that priced it (a
    row from before migration 0052, which did not keep them: `current`, its quote's); none: not re-priced."""
    by_second = {to_epoch_s(at): (rate, found) for at, rate, found in rows}  # the last row in a second wins
    return tuple(
        RateSegment(at_s, rate, current if found is None else tuple(found))
        for at_s, (rate, found) in sorted(by_second.items())
    )


def spread_over_nodes(
    billing: RentalBilling,
    held: Sequence[HeldAllocation],
    nodes: dict[str, Any],
    regions: dict[str, Any],
    catalog: Catalog,
    usage: RentalUsage,
    now_s: int,
) -> RentalBilling:
    """`billing` with the TDP of every GPU model and the PUE and grid of every region the rental's nodes had,
    by the GPU-seconds it held on each (a re-placed rental, a gang across regions), its line naming them
    all; as it was (its first node's) when a node, model or region is no longer known, or an allocation's
    times are unknown (booked before migration 0016)."""
    end_s = now_s if usage.ended_s is None else min(now_s, usage.ended_s)
    spread = []
    for allocation in held:
        node = nodes.get(allocation.node)
        region = regions.get(node.region) if node is not None else None
        if region is None or allocation.booked_at is None or node.gpu_model not in catalog:
            return billing
        released_s = None if allocation.released_at is None else to_epoch_s(allocation.released_at)
        billed_s = held_s(usage.started_s, end_s, to_epoch_s(allocation.booked_at), released_s, usage.gaps)
        tdp_w = catalog.get(node.gpu_model).tdp_watts
        spread.append((node.gpu_model, tdp_w, region, allocation.gpu_milli * billed_s))
    models = blend_models((model, tdp_w, gpu_s) for model, tdp_w, _, gpu_s in spread)
    if models is not None and len(models[0]) > 1:
        billing = replace(billing, gpu_model=", ".join(models[0]), tdp_watts=models[1])
    # a region's part of the energy is its GPU-seconds x their TDP: weighed so, PUE and grid stay exact
    blended = blend_regions(
        (region.name, region.pue, region.grid_gco2_per_kwh, tdp_w * gpu_s)
        for _, tdp_w, region, gpu_s in spread
    )
    if blended is None or len(blended[0]) < 2:
        return billing
    names, pue, grid = blended
    return replace(billing, region=", ".join(names), pue=pue, grid_gco2_per_kwh=grid)


def spec_size(rental: Rental, started_s: int) -> tuple[Size, ...]:
    """The size its spec asks for (whole GPUs, a MIG slice or a share per node), from its start."""
    spec = rental.spec
    total = gpu_fraction(spec.gpus, spec.nodes, spec.mig_profile, spec.share_milli)
    return (Size(started_s, spec.nodes, total / max(spec.nodes, 1)),)


def held_size(rental: Rental, started_s: int, placed: tuple[int, float] | None) -> tuple[Size, ...]:
    """A never-resized rental of whole GPUs whose spec asks another size than it was placed with (a resize
    requested that it never got): the size it holds, from its start; else none (its spec is its size)."""
    spec = rental.spec
    if placed is None or spec.mig_profile is not None or spec.share_milli is not None:
        return ()
    nodes, per_node = placed
    if nodes <= 0 or (nodes, per_node) == (spec.nodes, float(spec.gpus)):
        return ()
    return (Size(started_s, nodes, per_node),)
