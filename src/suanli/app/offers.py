"""Offers: free whole GPUs per (model, region, interconnect) and tier, with list price, filtered by a query.

Query language, terms separated by spaces, all must hold::

    gpu=H100 count>=8 region=eu tier=spot price<2.5 interconnect=ib

`gpu` matches a model or family; `count` compares with the most free GPUs on one node (what one node of a
rental can get); `region` matches a region name, its first part (`eu` for `eu-west`) or its jurisdiction;
`price` is in currency units per GPU-hour. A bad term raises `Invalid` naming its column and token.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from threading import Lock

from suanli.app.downtime import out_of_service
from suanli.app.errors import Invalid
from suanli.app.fleet import FleetCache
from suanli.app.list_prices import MICROS, list_price
from suanli.app.ports import Clock, UnitOfWorkFactory
from suanli.domain.catalog import Catalog
from suanli.domain.inventory import GpuMode

TIERS = ("on_demand", "spot")
TEXT_KEYS = ("gpu", "region", "tier", "interconnect")
NUMBER_KEYS = ("count", "price")
OPERATORS = (">=", "<=", "!=", "=", "<", ">")
_TERM = re.compile(r"^([A-Za-z_]+)(>=|<=|!=|=|<|>)(.+)$")


@dataclass(frozen=True, slots=True)
class Term:
    key: str
    op: str
    value: str | float
    column: int
    token: str


@dataclass(frozen=True, slots=True)
class Offer:
    gpu_model: str
    region: str
    jurisdiction: str
    tier: str
    interconnect: str | None
    free_gpus: int
    max_gpus_per_node: int
    nodes_with_free_gpus: int
    price_micros_per_gpu_hour: int


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


def _bad(column: int, token: str, message: str) -> Invalid:
    return Invalid(f"column {column}, {token!r}: {message}", field="q")


class OfferService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        clock: Clock,
        cache: FleetCache,
        catalog: Catalog,
        notice_horizon_s: float = 0.0,
    ) -> None:
        """`notice_horizon_s`: how long before a maintenance window the leader stops placing on its node."""
        self.uow, self.clock, self.cache, self.catalog = uow, clock, cache, catalog
        self.notice_horizon_s = notice_horizon_s
        self._lock = Lock()
        self._computed: tuple[object, list[Offer]] | None = None

    def search(self, query: str) -> list[Offer]:
        terms = parse_query(query)
        offers = self._offers()
        return [offer for offer in offers if all(_holds(term, offer, self.catalog) for term in terms)]

    def _offers(self) -> list[Offer]:
        """Every offer before filtering, recomputed only when the fleet, a drain or an allocation changed:
        each booking comes with a new allocation (the newest id grows) or goes with a released one (fewer
        live ones), so (fleet version, newest allocation id, live allocations, drained nodes) names it; nodes
        in (or about to enter) a maintenance window count as drained, as the leader treats them."""
        with self.uow() as uow:
            version, fleet = self.cache.load(uow)
            if fleet is None:
                return []
            now = self.clock.now()
            cordoned = uow.fleet.cordoned() | out_of_service(
                uow.maintenance.list(now), now, self.notice_horizon_s
            )
            stamp = (version, uow.rentals.allocations_stamp(), frozenset(cordoned))
            with self._lock:
                if self._computed is not None and self._computed[0] == stamp:
                    return self._computed[1]
            busy = uow.rentals.busy_gpus()  # every GPU with a booked slice position
        groups: dict[tuple[str, str, str | None], list[int]] = {}
        for node in fleet.nodes:
            if node.gpu_mode is GpuMode.MIG or node.name in cordoned:
                continue
            free = sum(1 for index in range(node.gpu_count) if (node.name, index) not in busy)
            key = (node.gpu_model, node.region, node.labels.get("interconnect"))
            groups.setdefault(key, []).append(free)
        offers = []
        for (model_name, region_name, interconnect), frees in sorted(groups.items(), key=lambda i: str(i[0])):
            model = self.catalog.get(model_name)
            region = fleet.regions[region_name]
            for tier in TIERS:
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
                        list_price(model, tier),
                    )
                )
        with self._lock:
            self._computed = (stamp, offers)
        return offers


def _holds(term: Term, offer: Offer, catalog: Catalog) -> bool:
    if term.key == "gpu":
        return _text(term, catalog.get(offer.gpu_model).matches(str(term.value)))
    if term.key == "region":
        wanted = str(term.value).casefold()
        names = {
            offer.region.casefold(),
            offer.region.split("-")[0].casefold(),
            offer.jurisdiction.casefold(),
        }
        return _text(term, wanted in names)
    if term.key == "tier":
        return _text(term, offer.tier == term.value)
    if term.key == "interconnect":
        return _text(term, (offer.interconnect or "").casefold() == str(term.value).casefold())
    if term.key == "count":
        return _compare(term.op, offer.max_gpus_per_node, float(term.value))
    return _compare(term.op, offer.price_micros_per_gpu_hour, float(term.value) * MICROS)


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
