"""Offers: what a tenant can rent now per (model, region, interconnect), tier and unit (a whole GPU, a share
of one, or one MIG instance of a profile), at the price a rental placed now is charged, filtered by a query.

Query language, terms separated by spaces, all must hold::

    gpu=H100 count>=8 region=eu tier=spot price<2.5 interconnect=ib profile=3g.40gb

`gpu` matches a model or family; `profile` a MIG profile (`profile=whole`: whole GPUs only, `profile=share`:
shares only); `count` compares with the most free units on one node (what one node of a rental can get);
`region` matches a region name, its first part (`eu` for `eu-west`) or its jurisdiction; `price` is in
currency units per hour of one unit (a GPU, or one instance). A bad term raises `Invalid` naming its column
and token.

Prices come from the price book in force now (the operators' entries over the list prices): on-demand its
list price, spot the pool's spot price at its current utilization with one unit more (what a one-unit spot
rental placed now pays, never above its bid: the leader counts a rental's own GPUs, so a larger one pays
more), a MIG instance its explicit entry or its share of the GPU's compute. A tenant searching sees its
plan's discount taken off the tiers the plan discounts (`plan_discount_bp`), as a one-unit rental is quoted;
contracts are left to the rental's quote (covered capacity is paid for up front).

A MIG row counts the instances of its profile that could run at once now (idle ones reused or
repartitioned, busy ones kept), each profile on its own: a GPU that can host seven 1g or two 3g instances
counts in both rows; a profile is listed where at least one instance can run. A share row (nodes in
`shared` mode) counts the GPUs with room for a share (some compute and memory free) and gives the largest
share one of them has free, with the memory free on that GPU (the most, among GPUs with as much compute
free); its price is per GPU-hour, of which a share pays its fraction.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from threading import Lock

from suanli.app.booking import SHARE_UNIT_MILLI
from suanli.app.downtime import out_of_service
from suanli.app.errors import Invalid
from suanli.app.fleet import FleetCache, MigInstanceView, host_mig_layouts, mig_instances
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.domain.billing.money import bp_of, to_epoch_s
from suanli.domain.billing.plans import Plan, plan_in_force
from suanli.domain.billing.pricebook import PriceBook, shape_rate, utilization_milli
from suanli.domain.capacity import instance_milli
from suanli.domain.catalog import Catalog, GpuModel
from suanli.domain.inventory import Fleet, GpuMode, Node
from suanli.domain.mig import MigInstance, placeable_count
from suanli.domain.request import MigSlice, Tier

MICROS = 1_000_000
FULL_MILLI = 1000
LARGEST_SHARE_MILLI = (
    FULL_MILLI - SHARE_UNIT_MILLI
)  # the most a share may be: a whole GPU is rented as a count
TIERS = ("on_demand", "spot")
WHOLE = "whole"  # `profile=whole`: rows of whole GPUs
SHARE = "share"  # `profile=share`: rows of GPUs with room for a share
TEXT_KEYS = ("gpu", "region", "tier", "interconnect", "profile")
NUMBER_KEYS = ("count", "price")
NAMED_KEYS = ("gpu", "region")  # an `=` that names nothing in the fleet is refused, not an empty list
OPERATORS = (">=", "<=", "!=", "=", "<", ">")
_TERM = re.compile(r"^([A-Za-z_]+)(>=|<=|!=|=|<|>)(.+)$")

Group = tuple[str, str, str | None]  # (model, region, interconnect)


@dataclass(frozen=True, slots=True)
class Term:
    key: str
    op: str
    value: str | float
    column: int
    token: str


@dataclass(frozen=True, slots=True)
class Offer:
    """One row: `free_gpus`, `max_gpus_per_node` and `nodes_with_free_gpus` count whole idle GPUs, or, on a
    row with a `mig_profile`, instances of it that could run now; prices are micros per hour."""

    gpu_model: str
    region: str
    jurisdiction: str
    tier: str
    interconnect: str | None
    free_gpus: int
    max_gpus_per_node: int
    nodes_with_free_gpus: int
    price_micros_per_gpu_hour: int  # one whole GPU of the model in this region and tier, now
    mig_profile: str | None = None
    unit_price_micros_per_hour: int = 0  # a whole GPU (a share pays its fraction), or one `mig_profile`
    shares: bool = False  # the row counts GPUs with room for a share (`GpuMode.SHARED` nodes)
    largest_share_milli: int | None = None  # on a `shares` row: the largest share one GPU can take
    share_memory_mib: int | None = None  # on a `shares` row: the memory free on that GPU
    plan_discount_bp: int = 0  # the searching tenant's plan discount, taken off the prices above


@dataclass(frozen=True, slots=True)
class _Computed:
    stamp: object
    valid_until_s: float  # the next price book entry takes effect then
    offers: list[Offer]


def parse_query(text: str) -> list[Term]:
    """The terms of a query; `Invalid(field="q")` names the column (1-based) and token at fault."""
    terms: list[Term] = []
    for match in re.finditer(r"\S+", text):
        token, column = match.group(), match.start() + 1
        parsed = _TERM.match(token)
        if parsed is None:
            raise _bad(column, token, "expected key<op>value, e.g. gpu=H100 or price<2.5")
        key, op, raw = parsed.group(1).lower(), parsed.group(2), parsed.group(3)
        if key in TEXT_KEYS:
            if op not in ("=", "!="):
                raise _bad(column, token, f"{key} takes = or !=, not {op}")
            if key == "tier" and raw.lower().replace("-", "_") not in TIERS:
                raise _bad(column, token, f"tier is one of {', '.join(TIERS)}")
            terms.append(
                Term(key, op, raw.lower().replace("-", "_") if key == "tier" else raw, column, token)
            )
        elif key in NUMBER_KEYS:
            try:
                number = float(raw)
            except ValueError:
                raise _bad(column, token, f"{key} needs a number, not {raw!r}") from None
            if number != number or number in (float("inf"), float("-inf")):
                raise _bad(column, token, f"{key} needs a finite number")
            terms.append(Term(key, op, number, column, token))
        else:
            known = ", ".join(TEXT_KEYS + NUMBER_KEYS)
            raise _bad(column, token, f"unknown key {key!r}; known keys: {known}")
    return terms


def _names_nothing(term: Term, fleet: Fleet, catalog: Catalog) -> str | None:
    """Why a `gpu=` or `region=` term names nothing the fleet has (a typo), with what it has; None when it
    names something, free now or not (a node in maintenance offers nothing, but its model is no typo)."""
    wanted = str(term.value).casefold()
    if term.key == "gpu":
        models = sorted({node.gpu_model for node in fleet.nodes})
        if any(catalog.get(model).matches(wanted) for model in models):
            return None
        return f"no GPU in this fleet is {term.value}; it has {', '.join(models)}"
    regions = fleet.regions.values()
    if any(_names_region(wanted, r.name, r.jurisdiction) for r in regions):
        return None
    listed = sorted({r.name for r in regions} | {r.jurisdiction for r in regions})
    return f"no region or jurisdiction {term.value} in this fleet; it has {', '.join(listed)}"


def _bad(column: int, token: str, message: str) -> Invalid:
    return Invalid(f"column {column}, {token!r}: {message}", field="q")


class OfferService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        clock: Clock,
        cache: FleetCache,
        catalog: Catalog,
        price_book: Callable[[UnitOfWork], PriceBook],
        notice_horizon_s: float = 0.0,
    ) -> None:
        """`price_book`: the book in force (`BillingService.price_book`); `notice_horizon_s`: how long before
        a maintenance window the leader stops placing on its node."""
        self.uow, self.clock, self.cache, self.catalog = uow, clock, cache, catalog
        self.price_book = price_book
        self.notice_horizon_s = notice_horizon_s
        self._lock = Lock()
        self._computed: _Computed | None = None
        self._mig_fleet = (-1, False)  # (fleet version, whether a node of it is in MIG mode)

    def search(self, query: str, tenant_id: str | None = None) -> list[Offer]:
        """The offers `query` keeps, priced for `tenant_id` (its plan's discount taken off) when given."""
        terms = parse_query(query)
        offers, plan, fleet = self._offers(tenant_id)
        named = [t for t in terms if t.key in NAMED_KEYS and t.op == "="] if fleet is not None else []
        for term in named:
            if (why := _names_nothing(term, fleet, self.catalog)) is not None:  # type: ignore[arg-type]
                raise _bad(term.column, term.token, why)
        if plan is not None and plan.discount_bp:
            offers = [_with_plan(offer, plan) for offer in offers]
        return [offer for offer in offers if all(_holds(term, offer, self.catalog) for term in terms)]

    def _offers(self, tenant_id: str | None) -> tuple[list[Offer], Plan | None, Fleet | None]:
        """Every offer before filtering, recomputed only when what it shows may have changed: the fleet, an
        allocation (the newest id grows with each, the live count falls with each release), the drained
        nodes (those in or about to enter a maintenance window count, as the leader treats them), the price
        book, a host's MIG layout, or the instant the next price entry takes effect."""
        with self.uow() as uow:
            version, fleet = self.cache.load(uow)
            if fleet is None:
                return [], None, None
            now = self.clock.now()
            now_s = to_epoch_s(now)
            plan = None if tenant_id is None else plan_in_force(uow.terms.plans(tenant_id), now_s)
            cordoned = uow.fleet.cordoned() | out_of_service(
                uow.maintenance.list(now), now, self.notice_horizon_s
            )
            prices = uow.prices.stamp()
            stamp = (
                version,
                uow.rentals.allocations_stamp(),
                frozenset(cordoned),
                prices,
                uow.fleet.mig_layouts_revision() if self._has_mig(version, fleet) else None,
            )
            with self._lock:
                computed = self._computed
                if computed is not None and computed.stamp == stamp and now_s < computed.valid_until_s:
                    return computed.offers, plan, fleet
            book = self.price_book(uow)
            taken = uow.rentals.busy_by_gpu()  # every GPU a live allocation has a slice of
            carved = self._mig_instances(uow, fleet)
        load = _pool_load(fleet, taken)
        open_nodes = [node for node in fleet.nodes if node.name not in cordoned]
        # (group, unit) -> free units per node; unit: None (whole GPUs), a MIG profile, or SHARE
        units: dict[tuple[Group, str | None], list[int]] = {}
        largest_share: dict[Group, tuple[int, int]] = {}  # (compute milli, memory MiB) free on one GPU
        for node in open_nodes:
            group = (node.gpu_model, node.region, node.labels.get("interconnect"))
            if node.gpu_mode is GpuMode.MIG:
                for profile, count in self._mig_units(node, carved.get(node.name, ())).items():
                    units.setdefault((group, profile), []).append(count)
                continue
            free = sum(1 for index in range(node.gpu_count) if (node.name, index) not in taken)
            units.setdefault((group, None), []).append(free)
            if node.gpu_mode is GpuMode.SHARED:
                room = self._share_room(node, taken)
                units.setdefault((group, SHARE), []).append(len(room))
                largest_share[group] = max([largest_share.get(group, (0, 0)), *room])
        offers = [
            offer
            for (group, unit), frees in sorted(units.items(), key=lambda item: self._row_order(*item[0]))
            if unit is None or sum(frees)
            for offer in self._priced(fleet, group, unit, frees, book, load, now_s, largest_share.get(group))
        ]
        with self._lock:
            self._computed = _Computed(stamp, _next_entry_s(book, now_s), offers)
        return offers, plan, fleet

    def _has_mig(self, version: int, fleet: Fleet) -> bool:
        """Whether a node of the fleet is in MIG mode: a fleet without one needs no host layouts read."""
        known_version, has_mig = self._mig_fleet
        if known_version != version:
            has_mig = any(node.gpu_mode is GpuMode.MIG for node in fleet.nodes)
            self._mig_fleet = (version, has_mig)
        return has_mig

    def _row_order(self, group: Group, unit: str | None) -> tuple[str, str, str, int, str]:
        """By model, region and interconnect; whole GPUs first, then shares, then MIG profiles, smallest
        first."""
        model, region, interconnect = group
        geometry = self.catalog.get(model).mig
        if unit is None or unit == SHARE or geometry is None:
            size = 0 if unit is None else 1
        else:
            size = geometry.profile(unit).placement_slots
        return (model, region, interconnect or "", size, unit or "")

    def _share_room(
        self, node: Node, taken: Mapping[tuple[str, int], tuple[int, int]]
    ) -> list[tuple[int, int]]:
        """The largest share (compute milli) and the memory MiB free on each of a shared node's GPUs that has
        room for a share (some of both free); a wholly free GPU's largest share is LARGEST_SHARE_MILLI."""
        memory_mib = self.catalog.get(node.gpu_model).memory_mib
        room = []
        for index in range(node.gpu_count):
            milli, mib = taken.get((node.name, index), (0, 0))
            if milli < FULL_MILLI and mib < memory_mib:
                room.append((min(FULL_MILLI - milli, LARGEST_SHARE_MILLI), memory_mib - mib))
        return room

    def _mig_instances(self, uow: UnitOfWork, fleet: Fleet) -> Mapping[str, tuple[MigInstanceView, ...]]:
        """Each MIG node's instances as the scheduler lays them out (its host's report, else declared)."""
        mig_nodes = [node.name for node in fleet.nodes if node.gpu_mode is GpuMode.MIG]
        if not mig_nodes:
            return {}
        live = [a for allocations in uow.rentals.live_allocations_on(mig_nodes).values() for a in allocations]
        on_host, _ = host_mig_layouts(fleet, self.catalog, uow.fleet.mig_layouts(), live)
        return mig_instances(fleet, self.catalog, on_host, live)

    def _mig_units(self, node: Node, instances: tuple[MigInstanceView, ...]) -> dict[str, int]:
        """Per profile of the node's model, the instances of it its GPUs could run at once now."""
        geometry = self.catalog.get(node.gpu_model).mig
        if geometry is None:
            return {}
        layouts: dict[int, list[MigInstance]] = {index: [] for index in range(node.gpu_count)}
        for view in instances:
            layouts.setdefault(view.gpu_index, []).append((view.start_slot, view.profile, view.busy))
        return {
            profile.name: sum(
                placeable_count(geometry, tuple(sorted(layout)), profile.name) for layout in layouts.values()
            )
            for profile in geometry.profiles
        }

    def _priced(
        self,
        fleet: Fleet,
        group: Group,
        unit: str | None,
        frees: list[int],
        book: PriceBook,
        load: Mapping[tuple[str, str], tuple[int, int]],
        now_s: int,
        largest_share: tuple[int, int] | None = None,
    ) -> list[Offer]:
        model_name, region_name, interconnect = group
        model = self.catalog.get(model_name)
        region = fleet.regions[region_name]
        busy_milli, total_milli = load.get((model_name, region_name), (0, 0))
        with_unit = busy_milli + _unit_milli(model, unit, largest_share)  # a spot rental pays with its own
        utilization = utilization_milli(
            [((model_name, region_name), total_milli, min(with_unit, total_milli))]
        )
        offers = []
        for tier in TIERS:
            per_gpu = _gpu_hour_price(book, model, region_name, tier, utilization, now_s)
            mig_profile = None if unit in (None, SHARE) else unit
            unit_price = (
                per_gpu
                if mig_profile is None
                else shape_rate(
                    book, model, region_name, Tier.parse(tier), MigSlice(mig_profile), per_gpu, now_s
                )
            )
            offers.append(
                Offer(
                    model.name,
                    region_name,
                    region.jurisdiction,
                    tier,
                    interconnect,
                    sum(frees),
                    max(frees),
                    sum(1 for free in frees if free),
                    per_gpu,
                    mig_profile,
                    unit_price,
                    unit == SHARE,
                    *(largest_share if unit == SHARE and largest_share else (None, None)),
                )
            )
        return offers


def _with_plan(offer: Offer, plan: Plan) -> Offer:
    """The offer at the tenant's price: its plan's discount off each unit, as a one-unit rental is quoted."""
    if Tier.parse(offer.tier) not in plan.discounted_tiers:
        return offer
    per_gpu, per_unit = offer.price_micros_per_gpu_hour, offer.unit_price_micros_per_hour
    return replace(
        offer,
        price_micros_per_gpu_hour=per_gpu - bp_of(per_gpu, plan.discount_bp),
        unit_price_micros_per_hour=per_unit - bp_of(per_unit, plan.discount_bp),
        plan_discount_bp=plan.discount_bp,
    )


def _gpu_hour_price(
    book: PriceBook,
    model: GpuModel,
    region: str,
    tier: str,
    utilization: Mapping[tuple[str, str], int],
    now_s: int,
) -> int:
    """What one whole GPU costs per hour if placed now: on-demand its list price; spot the pool's spot price
    at its utilization with the rental's own unit counted, as the leader prices a spot rental it places."""
    if tier == "spot":
        return book.spot_price(model.name, region, utilization.get((model.name, region), 0), now_s)
    return book.list_price(model.name, region, Tier.ON_DEMAND, now_s).price_micros_per_gpu_hour


def _pool_load(
    fleet: Fleet, taken: Mapping[tuple[str, int], tuple[int, int]]
) -> dict[tuple[str, str], tuple[int, int]]:
    """Busy and total GPU milli of each (model, region) pool, drained nodes counted, as spot prices follow."""
    load: dict[tuple[str, str], tuple[int, int]] = {}
    for node in fleet.nodes:
        pool = (node.gpu_model, node.region)
        busy_milli, total_milli = load.get(pool, (0, 0))
        busy_milli += sum(taken.get((node.name, index), (0, 0))[0] for index in range(node.gpu_count))
        load[pool] = (busy_milli, total_milli + node.gpu_count * FULL_MILLI)
    return load


def _unit_milli(model: GpuModel, unit: str | None, largest_share: tuple[int, int] | None) -> int:
    """The GPU milli one unit of an offer takes: a whole GPU, one MIG instance of its profile, or the largest
    share on offer (a smaller share pays a little less)."""
    if unit is None:
        return FULL_MILLI
    if unit == SHARE:
        return largest_share[0] if largest_share else 0
    geometry = model.mig
    assert geometry is not None
    return instance_milli(geometry, geometry.profile(unit))


def _next_entry_s(book: PriceBook, now_s: int) -> float:
    """When the book's next entry takes effect (offers priced now are stale from then); inf: none later."""
    later = [
        entry.effective_from_s
        for entries in (book.list_prices, book.mig_prices, book.spot_floors)
        for entry in entries
        if entry.effective_from_s > now_s
    ]
    return min(later, default=math.inf)


def _holds(term: Term, offer: Offer, catalog: Catalog) -> bool:
    if term.key == "gpu":
        return _text(term, catalog.get(offer.gpu_model).matches(str(term.value)))
    if term.key == "region":
        return _text(term, _names_region(str(term.value).casefold(), offer.region, offer.jurisdiction))
    if term.key == "tier":
        return _text(term, offer.tier == term.value)
    if term.key == "profile":
        unit = SHARE if offer.shares else offer.mig_profile or WHOLE
        return _text(term, unit.casefold() == str(term.value).casefold())
    if term.key == "interconnect":
        return _text(term, (offer.interconnect or "").casefold() == str(term.value).casefold())
    if term.key == "count":
        return _compare(term.op, offer.max_gpus_per_node, float(term.value))
    return _compare(term.op, offer.unit_price_micros_per_hour, float(term.value) * MICROS)


def _names_region(wanted: str, region: str, jurisdiction: str) -> bool:
    """Whether `wanted` (casefolded) is the region's name, its first part (`eu` for `eu-west`) or its
    jurisdiction."""
    return wanted in {region.casefold(), region.split("-")[0].casefold(), jurisdiction.casefold()}


def _text(term: Term, equal: bool) -> bool:
    return equal if term.op == "=" else not equal


_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
}


def _compare(op: str, left: float, right: float) -> bool:
    return _COMPARE[op](left, right)
