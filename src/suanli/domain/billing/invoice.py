"""Invoices: one tenant's month (UTC) as lines per rental, plan lines and SLA credit lines, and a total.

Rules:

* A month is `[first second of the month, first second of the next)` in UTC epoch seconds (`Month`).
* A rental's usage in the month is its billable interval `[started_s, ended_s or now_s)` clipped to the month;
  a rental spanning two months shows its seconds in each. GPU-seconds = seconds x the rental's GPU fraction
  (whole GPUs x nodes, a MIG instance's compute slices / 7, a share's milli / 1000), rounded to 3 decimals;
  a resized rental's follow its sizes (`Size`, one per resize, the first from its placement), each second at
  the size in force.
* Money: a line's `amount_micros` is what the ledger charged the rental inside the month: the sum of its
  charge transactions with `at_s` in the month (the meter posts cumulatively, one charge per UTC day it
  covers, an earlier day's dated its last second: a charge posted just after midnight on the 1st for
  seconds of the month before belongs to that month, `RentalUsage.charge_by_day`). The total is the exact
  integer sum of every line's amount (rental lines, plan lines, SLA credit lines). An SLA credit line is
  the month's posted credit (key `sla:{tenant}:{yyyy-mm}`) as a negative amount, its description the
  credit's memo (availability, tier, the outage ids as evidence).
* Plans per rate: a rental re-priced while it ran (a plan's or a contract's window, a spot price, a resize)
  carries its rates (`RateSegment`, each with the plan discounts that priced it); its line lists the ones
  in the month (`InvoiceLine.segments`: each `[from_s, to_s)` with its rate and the plan, or none, that
  priced it), and its line's rate and discounts are those of its last segment in the month. The CSV adds a
  `rental_segment` row per segment (no amount) under a line re-priced in the month.
* Energy (kWh) = power per GPU (W) x GPU-hours x the region's PUE / 1000, where the power is the
  measured average power per GPU from agent telemetry when known (`suanli.domain.billing.energy`: only when
  the measurements cover at least half the rental's billable time), else TDP x `UTILIZATION_ESTIMATE` (0.7).
  A rental line's `energy_source` says which: `measured` or `tdp_estimate` (None when there is no energy).
  CO2 (kg) = kWh x the region's grid intensity (g/kWh) / 1000, computed from the unrounded kWh. Both are
  floats rounded half-even to `ENERGY_DECIMALS` (3) with `round`; invoice totals are the rounded sum of the
  rounded lines. Unknown model or region: energy and CO2 are None and the totals leave them out. A rental
  that held nodes in several regions carries the PUE and grid that weigh each by its GPU-seconds there
  (`suanli.domain.billing.energy.blend_regions`), and its line names them all; one re-placed on another GPU
  model carries the TDP that weighs each model by its GPU-seconds (`blend_models`), its line naming them all.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.meter import DEFAULT_MINIMUM_S
from suanli.domain.billing.money import SECONDS_PER_HOUR, to_epoch_s

UTILIZATION_ESTIMATE = 0.7
ENERGY_MEASURED = "measured"
ENERGY_TDP_ESTIMATE = "tdp_estimate"
ENERGY_DECIMALS = 3
MIG_COMPUTE_SLICES = 7
_MONTH = re.compile(r"^([0-9]{4})-([0-9]{2})$")


class InvoiceError(BillingError):
    """A bad invoice input (e.g. a month that is not yyyy-mm)."""


@dataclass(frozen=True, slots=True, order=True)
class Month:
    year: int
    month: int

    @classmethod
    def parse(cls, text: str) -> Month:
        match = _MONTH.match(text)
        if match is None or not 1 <= int(match.group(2)) <= 12 or not 1970 <= int(match.group(1)) <= 9998:
            raise InvoiceError(f"month must be yyyy-mm from 1970-01 to 9998-12 (e.g. 2026-11), got {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"

    @property
    def start_s(self) -> int:
        return to_epoch_s(datetime(self.year, self.month, 1, tzinfo=UTC))

    @property
    def end_s(self) -> int:
        following = (self.year + 1, 1) if self.month == 12 else (self.year, self.month + 1)
        return to_epoch_s(datetime(following[0], following[1], 1, tzinfo=UTC))


def gpu_fraction(
    gpus: int, nodes: int = 1, mig_profile: str | None = None, share_milli: int | None = None
) -> float:
    """GPUs a rental holds: a share's milli / 1000, a MIG instance's compute slices / 7, else gpus x nodes."""
    if share_milli is not None:
        return share_milli / 1000 * nodes
    if mig_profile is not None:
        match = re.match(r"^(\d+)g\.", mig_profile)
        slices = int(match.group(1)) if match else 1
        return slices / MIG_COMPUTE_SLICES * nodes
    return float(gpus * nodes)


@dataclass(frozen=True, slots=True)
class Size:
    """A resized rental's size from `from_s` on."""

    from_s: int
    nodes: int
    gpus_per_node: float


def without_gaps(sizes: Sequence[Size], gaps: Sequence[tuple[int, int]]) -> tuple[Size, ...]:
    """`sizes` (at least one) with nothing held inside each gap `[from_s, to_s)` (a re-queued rental waiting
    in the queue): a size of 0 nodes from its start, and the size then in force again from its end."""

    def in_force(at_s: int) -> Size:
        found = sizes[0]
        for size in sizes:
            if size.from_s <= at_s:
                found = size
        return found

    changes = [s for s in sizes if not any(a <= s.from_s < b for a, b in gaps)]
    for a, b in gaps:
        held = in_force(b)
        changes += [Size(a, 0, 0.0), Size(b, held.nodes, held.gpus_per_node)]
    return tuple(sorted(changes, key=lambda size: size.from_s))


def size_seconds(sizes: Sequence[Size], start_s: int, end_s: int) -> tuple[float, float]:
    """(node-seconds, GPU-seconds) of `[start_s, end_s)` at the sizes in force; the first size also covers
    any time before its `from_s`."""
    node_s = gpu_s = 0.0
    for index, size in enumerate(sizes):
        lo = start_s if index == 0 else max(start_s, size.from_s)
        hi = end_s if index + 1 == len(sizes) else min(end_s, sizes[index + 1].from_s)
        if hi > lo:
            node_s += (hi - lo) * size.nodes
            gpu_s += (hi - lo) * size.nodes * size.gpus_per_node
    return node_s, gpu_s


@dataclass(frozen=True, slots=True)
class RateSegment:
    """A rental's rate from `from_s` on, and the plan discounts (label, micros per hour) that priced it."""

    from_s: int
    rate_micros_per_hour: int
    discounts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class InvoiceSegment:
    """Part of a rental line, `[from_s, to_s)` inside the month, at one rate and the plan that priced it."""

    from_s: int
    to_s: int
    rate_micros_per_hour: int
    discounts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class RentalBilling:
    """What an invoice needs of one rental: its interval, rate, size and the energy facts of where it ran."""

    rental_id: str
    started_s: int
    ended_s: int | None
    rate_micros_per_hour: int
    gpu_fraction: float
    gpu_model: str | None = None
    region: str | None = None
    tdp_watts: float | None = None  # a mean by GPU-seconds for a rental re-placed on another model
    pue: float | None = None
    grid_gco2_per_kwh: float | None = None
    measured_power_w: float | None = None  # average per GPU from telemetry, when known
    discounts: tuple[tuple[str, int], ...] = ()  # (label, micros per hour) from the rental's quote
    sizes: tuple[Size, ...] = ()  # a resized rental's sizes (else `gpu_fraction` throughout)
    rates: tuple[RateSegment, ...] = ()  # a re-priced rental's rates (else its rate and discounts throughout)

    def seconds_in(self, start_s: int, end_s: int, now_s: int) -> int:
        """Seconds of [started_s, ended_s or now_s) inside [start_s, end_s)."""
        stop = now_s if self.ended_s is None else min(now_s, self.ended_s)
        return max(0, min(stop, end_s) - max(self.started_s, start_s))

    def gpu_seconds_in(self, start_s: int, end_s: int, now_s: int) -> float:
        """GPU-seconds of [started_s, ended_s or now_s) inside [start_s, end_s), at the sizes in force."""
        if not self.sizes:
            return self.seconds_in(start_s, end_s, now_s) * self.gpu_fraction
        stop = now_s if self.ended_s is None else min(now_s, self.ended_s)
        return size_seconds(self.sizes, max(self.started_s, start_s), min(stop, end_s))[1]

    def segments_in(self, start_s: int, end_s: int, now_s: int) -> tuple[InvoiceSegment, ...]:
        """Its rate segments clipped to [started_s, ended_s or now_s) inside [start_s, end_s); the first
        rate also covers any time before its `from_s`; one segment at its rate when it was never re-priced."""
        stop = min(end_s, now_s if self.ended_s is None else min(now_s, self.ended_s))
        rates = self.rates or (RateSegment(self.started_s, self.rate_micros_per_hour, self.discounts),)
        found = []
        for index, rate in enumerate(rates):
            lo = max(self.started_s, start_s) if index == 0 else max(self.started_s, start_s, rate.from_s)
            hi = stop if index + 1 == len(rates) else min(stop, rates[index + 1].from_s)
            if hi > lo:
                found.append(InvoiceSegment(lo, hi, rate.rate_micros_per_hour, rate.discounts))
        return tuple(found)


@dataclass(frozen=True, slots=True)
class InvoiceLine:
    kind: str  # "rental", "plan", "sla_credit"
    ref: str
    description: str
    amount_micros: int
    gpu_seconds: float = 0.0
    rate_micros_per_hour: int = 0
    discounts: tuple[tuple[str, int], ...] = ()
    energy_kwh: float | None = None
    co2_kg: float | None = None
    energy_source: str | None = None  # ENERGY_MEASURED or ENERGY_TDP_ESTIMATE; None: no energy
    segments: tuple[InvoiceSegment, ...] = ()  # a rental line's rates in the month, each with its plan


@dataclass(frozen=True, slots=True)
class Invoice:
    tenant_id: str
    month: Month
    lines: tuple[InvoiceLine, ...]
    plan_lines: tuple[InvoiceLine, ...] = ()
    sla_credit_lines: tuple[InvoiceLine, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def all_lines(self) -> tuple[InvoiceLine, ...]:
        return (*self.lines, *self.plan_lines, *self.sla_credit_lines)

    @property
    def total_micros(self) -> int:
        return sum(line.amount_micros for line in self.all_lines)

    @property
    def total_energy_kwh(self) -> float:
        return round(sum(x.energy_kwh for x in self.all_lines if x.energy_kwh is not None), ENERGY_DECIMALS)

    @property
    def total_co2_kg(self) -> float:
        return round(sum(x.co2_kg for x in self.all_lines if x.co2_kg is not None), ENERGY_DECIMALS)


def energy_kwh(rental: RentalBilling, gpu_seconds: float) -> float | None:
    """Unrounded kWh of `gpu_seconds` of the rental; None when neither measured power nor TDP, or no PUE."""
    if rental.pue is None:
        return None
    if rental.measured_power_w is not None:
        power_w = rental.measured_power_w
    elif rental.tdp_watts is not None:
        power_w = rental.tdp_watts * UTILIZATION_ESTIMATE
    else:
        return None
    return power_w * (gpu_seconds / SECONDS_PER_HOUR) * rental.pue / 1000


def energy_source(rental: RentalBilling, kwh: float | None) -> str | None:
    """Which power an energy figure used: measured telemetry or the TDP estimate; None without energy."""
    if kwh is None:
        return None
    return ENERGY_MEASURED if rental.measured_power_w is not None else ENERGY_TDP_ESTIMATE


def co2_kg(kwh: float | None, grid_gco2_per_kwh: float | None) -> float | None:
    if kwh is None or grid_gco2_per_kwh is None:
        return None
    return kwh * grid_gco2_per_kwh / 1000


def charged_in(charges: Iterable[tuple[int, int]], start_s: int, end_s: int) -> int:
    """Sum of (at_s, micros) charges with start_s <= at_s < end_s."""
    return sum(micros for at_s, micros in charges if start_s <= at_s < end_s)


def build_invoice(
    tenant_id: str,
    month: Month,
    rentals: Sequence[RentalBilling],
    charges: Mapping[str, Sequence[tuple[int, int]]],
    now_s: int,
    sla_credits: Sequence[InvoiceLine] = (),
    plan_lines: Sequence[InvoiceLine] = (),
) -> Invoice:
    """The month's invoice: one line per rental used or charged in the month, ordered by start then id;
    `plan_lines`: the month's plan charges (`suanli.domain.billing.plans.plan_lines`); `sla_credits`: the
    month's posted SLA credit lines (negative amounts, `suanli.domain.billing.sla`)."""
    start_s, end_s = month.start_s, month.end_s
    lines = []
    for rental in sorted(rentals, key=lambda r: (r.started_s, r.rental_id)):
        seconds = rental.seconds_in(start_s, end_s, now_s)
        amount = charged_in(charges.get(rental.rental_id, ()), start_s, end_s)
        if seconds == 0 and amount == 0:
            continue
        gpu_seconds = rental.gpu_seconds_in(start_s, end_s, now_s)
        kwh = energy_kwh(rental, gpu_seconds)
        kg = co2_kg(kwh, rental.grid_gco2_per_kwh)
        where = f" in {rental.region}" if rental.region else ""
        segments = rental.segments_in(start_s, end_s, now_s)
        last = segments[-1] if segments else None
        lines.append(
            InvoiceLine(
                kind="rental",
                ref=rental.rental_id,
                description=f"{rental.gpu_model or 'GPU'} x {rental.gpu_fraction:g}{where}",
                amount_micros=amount,
                gpu_seconds=round(gpu_seconds, ENERGY_DECIMALS),
                rate_micros_per_hour=rental.rate_micros_per_hour
                if last is None
                else last.rate_micros_per_hour,
                discounts=rental.discounts if last is None else last.discounts,
                energy_kwh=None if kwh is None else round(kwh, ENERGY_DECIMALS),
                co2_kg=None if kg is None else round(kg, ENERGY_DECIMALS),
                energy_source=energy_source(rental, kwh),
                segments=segments,
            )
        )
    notes = (
        f"energy: measured GPU power when reported, else TDP x {UTILIZATION_ESTIMATE}, x GPU fraction x "
        "hours x PUE; CO2 = kWh x grid g/kWh / 1000; both rounded to 3 decimals",
        "energy source per rental line: measured (agent telemetry covering at least half of the rental's "
        "billable time) or tdp_estimate",
        "amounts: what the ledger charged each rental inside the month (UTC): per second while placed (not "
        f"while waiting after a re-queue), at least {DEFAULT_MINIMUM_S} s a rental its tenant ended (none "
        "for one the platform preempted or lost); GPU-s: GPU-seconds held",
    )
    if sla_credits:
        notes = (*notes, "SLA credits: posted after the month for the outages named in each line")
    return Invoice(
        tenant_id,
        month,
        tuple(lines),
        plan_lines=tuple(plan_lines),
        sla_credit_lines=tuple(sla_credits),
        notes=notes,
    )


CSV_COLUMNS = (
    "section",
    "ref",
    "description",
    "gpu_seconds",
    "rate_micros_per_hour",
    "discounts",
    "amount_micros",
    "energy_kwh",
    "co2_kg",
    "energy_source",
)


def invoice_csv(invoice: Invoice) -> str:
    """The invoice as CSV: a header, one row per line, and a total row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for line in invoice.all_lines:
        writer.writerow(
            (
                line.kind,
                line.ref,
                line.description,
                line.gpu_seconds,
                line.rate_micros_per_hour,
                _discounts_text(line.discounts),
                line.amount_micros,
                "" if line.energy_kwh is None else line.energy_kwh,
                "" if line.co2_kg is None else line.co2_kg,
                line.energy_source or "",
            )
        )
        if len(line.segments) > 1:  # re-priced in the month: each rate with the plan that priced it
            for segment in line.segments:
                writer.writerow(
                    (
                        "rental_segment",
                        line.ref,
                        f"{_utc(segment.from_s)} to {_utc(segment.to_s)}",
                        "",
                        segment.rate_micros_per_hour,
                        _discounts_text(segment.discounts) or "none",
                        "",
                        "",
                        "",
                        "",
                    )
                )
    writer.writerow(
        (
            "total",
            f"{invoice.tenant_id} {invoice.month}",
            "",
            round(sum(x.gpu_seconds for x in invoice.all_lines), ENERGY_DECIMALS),
            "",
            "",
            invoice.total_micros,
            invoice.total_energy_kwh,
            invoice.total_co2_kg,
            "",
        )
    )
    return out.getvalue()


def _discounts_text(discounts: Sequence[tuple[str, int]]) -> str:
    return "; ".join(f"{label}: {micros}" for label, micros in discounts)


def _utc(at_s: int) -> str:
    return datetime.fromtimestamp(at_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
