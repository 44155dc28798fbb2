"""Price book: list prices with effective dates, MIG and share pricing, the spot formula and rental quotes.

Guarantees: every price is integer micros; a lookup returns the entry in force at the instant asked (the
latest `effective_from_s` not after it; an entry for the region first, else one for any region, `*`) or
raises PriceNotFoundError; a spot rate is never below the pool's floor, never above the on-demand list price
and never above the rental's bid.

Spot formula, with pool utilization u in milli (0..1000) and the floor capped at the on-demand price:

    spot = floor + round_half_up((on_demand - floor) * u^2, 1000^2)

A spot rental pays its pool's current spot price, capped at its bid (`running_spot_rate`): it is quoted at
placement and re-priced by the scheduler as the pool's utilization moves; a new rate is taken only when it
differs from the one paid by at least `REPRICE_HYSTERESIS_BP` (1%) of it (`rate_moved`), so that a pool
hovering around a utilization does not write a rate change every cycle. A running rental whose bid is below
a (raised) floor keeps paying its bid; preempting it is a separate decision.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from suanli.domain.billing.errors import BidBelowFloorError, BillingError, PriceNotFoundError
from suanli.domain.billing.money import BASIS_POINTS, bp_of, money_text, round_half_up
from suanli.domain.catalog import GpuModel
from suanli.domain.request import MILLI_PER_GPU, GpuShare, MigSlice, Shape, Tier, WholeGpus

UTILIZATION_MILLI_MAX = 1000
ANY_REGION = "*"
REPRICE_HYSTERESIS_BP = 100  # a running spot rental's rate changes only when the price moved >= 1%


class _Dated(Protocol):
    @property
    def effective_from_s(self) -> int: ...


_E = TypeVar("_E", bound=_Dated)


@dataclass(frozen=True, slots=True)
class ListPrice:
    """Price of one whole GPU per hour of `model` in `region` at `tier`, from `effective_from_s` on."""

    model: str
    region: str
    tier: Tier
    price_micros_per_gpu_hour: int
    effective_from_s: int
    source: str

    def __post_init__(self) -> None:
        _check_non_negative(self.price_micros_per_gpu_hour, "price_micros_per_gpu_hour")


@dataclass(frozen=True, slots=True)
class MigPrice:
    """An explicit price per hour of one MIG instance of `profile`, overriding the slice-fraction rule."""

    model: str
    region: str
    tier: Tier
    profile: str
    price_micros_per_hour: int
    effective_from_s: int
    source: str

    def __post_init__(self) -> None:
        _check_non_negative(self.price_micros_per_hour, "price_micros_per_hour")


@dataclass(frozen=True, slots=True)
class SpotFloor:
    """The lowest spot price per GPU-hour of `model` in `region`, from `effective_from_s` on."""

    model: str
    region: str
    floor_micros_per_gpu_hour: int
    effective_from_s: int
    source: str

    def __post_init__(self) -> None:
        _check_non_negative(self.floor_micros_per_gpu_hour, "floor_micros_per_gpu_hour")


@dataclass(frozen=True, slots=True)
class Discount:
    """A named discount of `bp` basis points (1/100 of a percent) off the base rate, e.g. a membership."""

    label: str
    bp: int

    def __post_init__(self) -> None:
        if not 0 <= self.bp <= BASIS_POINTS:
            raise BillingError(f"discount {self.label!r}: bp must be 0..10000, got {self.bp}")


@dataclass(frozen=True, slots=True)
class Quote:
    """A rental's price breakdown per hour: base, discounts, contract coverage and the final rate charged.

    `final_micros_per_hour` = base - sum(discount amounts) - contract coverage, never below 0.
    """

    model: str
    region: str
    tier: Tier
    at_s: int
    unit_micros_per_gpu_hour: int
    base_micros_per_hour: int
    discounts: tuple[tuple[str, int], ...]
    contract_coverage_micros_per_hour: int
    final_micros_per_hour: int
    source: str


class PriceBook:
    """All list prices, explicit MIG prices and spot floors, looked up by key and instant."""

    def __init__(
        self,
        list_prices: Iterable[ListPrice] = (),
        mig_prices: Iterable[MigPrice] = (),
        spot_floors: Iterable[SpotFloor] = (),
    ) -> None:
        self.list_prices = tuple(list_prices)
        self.mig_prices = tuple(mig_prices)
        self.spot_floors = tuple(spot_floors)
        self._list = _index(self.list_prices, lambda p: (p.model.casefold(), p.region, p.tier))
        self._mig = _index(self.mig_prices, lambda p: (p.model.casefold(), p.region, p.tier, p.profile))
        self._floor = _index(self.spot_floors, lambda p: (p.model.casefold(), p.region))

    def list_price(self, model: str, region: str, tier: Tier, at_s: int) -> ListPrice:
        """The list price in force at `at_s`; raises PriceNotFoundError."""
        found = _regional(self._list, lambda r: (model.casefold(), r, tier), region, at_s)
        if found is None:
            raise PriceNotFoundError(f"no {tier.label} list price for {model} in {region} at {at_s}")
        return found

    def mig_price(self, model: str, region: str, tier: Tier, profile: str, at_s: int) -> MigPrice | None:
        """The explicit MIG entry in force at `at_s`, or None when the slice-fraction rule applies."""
        return _regional(self._mig, lambda r: (model.casefold(), r, tier, profile), region, at_s)

    def spot_floor(self, model: str, region: str, at_s: int) -> SpotFloor:
        found = _regional(self._floor, lambda r: (model.casefold(), r), region, at_s)
        if found is None:
            raise PriceNotFoundError(f"no spot floor for {model} in {region} at {at_s}")
        return found

    def spot_price(self, model: str, region: str, utilization_milli: int, at_s: int) -> int:
        """Spot micros per GPU-hour for a pool at `utilization_milli` (see the module formula)."""
        on_demand = self.list_price(model, region, Tier.ON_DEMAND, at_s).price_micros_per_gpu_hour
        floor = self.spot_floor(model, region, at_s).floor_micros_per_gpu_hour
        return spot_formula(floor, on_demand, utilization_milli)

    def spot_rate(
        self, model: str, region: str, utilization_milli: int, bid_micros_per_gpu_hour: int | None, at_s: int
    ) -> int:
        """What a spot rental pays per GPU-hour now: the spot price, capped at its bid.

        A bid below the floor can never be served and raises BillingError.
        """
        price = self.spot_price(model, region, utilization_milli, at_s)
        if bid_micros_per_gpu_hour is None:
            return price
        floor = min(
            self.spot_floor(model, region, at_s).floor_micros_per_gpu_hour,
            self.list_price(model, region, Tier.ON_DEMAND, at_s).price_micros_per_gpu_hour,
        )
        if bid_micros_per_gpu_hour < floor:
            raise BidBelowFloorError(
                f"bid {money_text(bid_micros_per_gpu_hour)}/GPU-h is below {model}'s spot floor "
                f"{money_text(floor)}/GPU-h"
            )
        return min(price, bid_micros_per_gpu_hour)


def running_spot_rate(
    book: PriceBook,
    model: str,
    region: str,
    utilization_milli: int,
    bid_micros_per_gpu_hour: int | None,
    at_s: int,
) -> int:
    """What a running spot rental pays per GPU-hour now: the spot price, capped at its bid (a bid below the
    floor pays the bid: unlike `PriceBook.spot_rate` it does not raise)."""
    price = book.spot_price(model, region, utilization_milli, at_s)
    return price if bid_micros_per_gpu_hour is None else min(price, bid_micros_per_gpu_hour)


def rate_moved(current_micros: int, new_micros: int, hysteresis_bp: int = REPRICE_HYSTERESIS_BP) -> bool:
    """A re-priced rate replaces the current one only when it differs by at least `hysteresis_bp` of it
    (from a current rate of 0: any new rate above 0)."""
    if new_micros == current_micros:
        return False
    return abs(new_micros - current_micros) * BASIS_POINTS >= hysteresis_bp * current_micros


def utilization_milli(
    nodes: Iterable[tuple[tuple[str, str], int, int]],
) -> dict[tuple[str, str], int]:
    """Busy GPU milli per 1000 of each (model, region) pool, from each node's (pool, GPU milli, busy GPU
    milli): the `u` of the spot formula, rounded down."""
    total: dict[tuple[str, str], int] = {}
    busy: dict[tuple[str, str], int] = {}
    for pool, total_milli, busy_milli in nodes:
        total[pool] = total.get(pool, 0) + total_milli
        busy[pool] = busy.get(pool, 0) + busy_milli
    return {pool: busy[pool] * UTILIZATION_MILLI_MAX // total[pool] for pool in total if total[pool]}


def spot_formula(floor_micros: int, on_demand_micros: int, utilization_milli: int) -> int:
    """floor + (on_demand - floor) * u^2, u in milli, rounded half up; the floor is capped at on-demand."""
    if not 0 <= utilization_milli <= UTILIZATION_MILLI_MAX:
        raise BillingError(f"utilization must be 0..1000 milli, got {utilization_milli}")
    floor = min(floor_micros, on_demand_micros)
    span = on_demand_micros - floor
    return floor + round_half_up(span * utilization_milli**2, UTILIZATION_MILLI_MAX**2)


def shape_rate(
    book: PriceBook, model: GpuModel, region: str, tier: Tier, shape: Shape, unit_micros: int, at_s: int
) -> int:
    """Micros per hour of one node's `shape` given the per-GPU-hour `unit_micros`.

    Whole GPUs: count x unit. A share: unit x milli / 1000. A MIG instance: its explicit entry when the
    book has one (not for spot), else unit x compute slices / the geometry's compute slice count.
    Rounded half up.
    """
    if isinstance(shape, WholeGpus):
        return shape.count * unit_micros
    if isinstance(shape, GpuShare):
        return round_half_up(unit_micros * shape.milli, MILLI_PER_GPU)
    if isinstance(shape, MigSlice):
        if model.mig is None:
            raise BillingError(f"{model.name} has no MIG; cannot price {shape.profile}")
        profile = model.mig.profile(shape.profile)
        if tier is not Tier.SPOT:
            explicit = book.mig_price(model.name, region, tier, shape.profile, at_s)
            if explicit is not None:
                return explicit.price_micros_per_hour
        return round_half_up(unit_micros * profile.compute_slices, model.mig.compute_slice_count)
    raise BillingError(f"unknown shape {shape!r}")


def gpu_milli(model: GpuModel, shape: Shape) -> int:
    """Thousandths of a GPU that one node's shape takes: a MIG instance's as the scheduler holds it
    (`MigGeometry.instance_milli`, rounded down: rounded half up, seven 1g instances took 1001 of a
    one-GPU contract and the seventh paid for the milli it lacked)."""
    if isinstance(shape, WholeGpus):
        return shape.count * MILLI_PER_GPU
    if isinstance(shape, GpuShare):
        return shape.milli
    if isinstance(shape, MigSlice) and model.mig is not None:
        return model.mig.instance_milli(model.mig.profile(shape.profile))
    raise BillingError(f"cannot size shape {shape!r} on {model.name}")


def quote(
    book: PriceBook,
    *,
    model: GpuModel,
    region: str,
    tier: Tier,
    shape: Shape,
    at_s: int,
    node_count: int = 1,
    utilization_milli: int = 0,
    bid_micros_per_gpu_hour: int | None = None,
    discounts: Iterable[Discount] = (),
    contract_covered_gpu_milli: int = 0,
) -> Quote:
    """Price a rental at `at_s`: base for its shape and node count, discounts, then contract coverage.

    Each discount is its bp of the base (rounded half up). `contract_covered_gpu_milli` of the rental's GPU
    milli is drawn from a compute future at 0 marginal price: that fraction of the discounted rate is covered.
    """
    if node_count < 1:
        raise BillingError(f"node_count must be 1 or more, got {node_count}")
    if tier is Tier.SPOT:
        unit = book.spot_rate(model.name, region, utilization_milli, bid_micros_per_gpu_hour, at_s)
        source = f"spot formula at utilization {utilization_milli} milli; " + (
            book.spot_floor(model.name, region, at_s).source
        )
    else:
        entry = book.list_price(model.name, region, tier, at_s)
        unit, source = entry.price_micros_per_gpu_hour, entry.source
    base = shape_rate(book, model, region, tier, shape, unit, at_s) * node_count
    lines = tuple((d.label, bp_of(base, d.bp)) for d in discounts)
    discounted = max(0, base - sum(amount for _, amount in lines))
    total_milli = gpu_milli(model, shape) * node_count
    covered_milli = min(max(0, contract_covered_gpu_milli), total_milli)
    coverage = round_half_up(discounted * covered_milli, total_milli) if total_milli else 0
    return Quote(
        model=model.name,
        region=region,
        tier=tier,
        at_s=at_s,
        unit_micros_per_gpu_hour=unit,
        base_micros_per_hour=base,
        discounts=lines,
        contract_coverage_micros_per_hour=coverage,
        final_micros_per_hour=discounted - coverage,
        source=source,
    )


def _check_non_negative(value: int, name: str) -> None:
    if value < 0:
        raise BillingError(f"{name} must be 0 or more, got {value}")


def _index(entries: Iterable[_E], key: Callable[[_E], Hashable]) -> dict[Hashable, tuple[_E, ...]]:
    """Group entries by key, each group sorted by effective_from_s; duplicates of key and instant raise."""
    groups: dict[Hashable, list[_E]] = {}
    for entry in entries:
        groups.setdefault(key(entry), []).append(entry)
    for group_key, group in groups.items():
        group.sort(key=lambda e: e.effective_from_s)
        starts = [e.effective_from_s for e in group]
        if len(set(starts)) != len(starts):
            raise BillingError(f"two prices for {group_key} take effect at the same instant")
    return {k: tuple(v) for k, v in groups.items()}


def _regional(
    index: dict[Hashable, tuple[_E, ...]], key: Callable[[str], Hashable], region: str, at_s: int
) -> _E | None:
    """The entry in force for `region`, else the one for any region."""
    found = _in_force(index.get(key(region), ()), at_s)
    if found is None and region != ANY_REGION:
        found = _in_force(index.get(key(ANY_REGION), ()), at_s)
    return found


def _in_force(entries: tuple[_E, ...], at_s: int) -> _E | None:
    """The entry with the latest effective_from_s <= at_s, or None."""
    found = None
    for entry in entries:
        if entry.effective_from_s > at_s:
            break
        found = entry
    return found


def resized_rate(
    reference_micros_per_hour: int, reference_milli: int, milli: int, covered_milli: int
) -> tuple[int, int]:
    """(rate, contract coverage) of a rental resized to `milli` GPU milli: its discounted rate at
    `reference_milli` in proportion, less the covered part; rounded once from the reference, so resizes do
    not drift."""
    if reference_milli <= 0 or milli <= 0:
        raise BillingError("a resized rental's GPU milli must be more than 0")
    discounted = round_half_up(reference_micros_per_hour * milli, reference_milli)
    coverage = round_half_up(discounted * min(max(0, covered_milli), milli), milli)
    return discounted - coverage, coverage
