"""Admins' price entries: validating them and layering them over the seeded price book.

An entry is a list price (tier on_demand or reserved, per GPU-hour), an explicit MIG instance price (tier
on_demand or reserved with a `mig_profile`: per hour of one instance) or a spot floor (tier spot), for one
catalogue model in one region of the fleet or in any region (`*`). It takes effect at `effective_from`
(now when not given; a future instant is allowed) and is never applied retroactively: an entry more than
`PAST_GRACE` before now is refused, so quotes already given stay valid. A later entry of the same key and
instant supersedes an earlier one (the higher id wins).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from suanli.app.errors import Invalid
from suanli.app.records import PriceEntry
from suanli.domain.billing.money import to_epoch_s
from suanli.domain.billing.pricebook import ANY_REGION, ListPrice, MigPrice, PriceBook, SpotFloor
from suanli.domain.catalog import Catalog
from suanli.domain.errors import CatalogError, SuanliError
from suanli.domain.request import Tier

PAST_GRACE = timedelta(minutes=1)
MAX_PRICE_MICROS = 10**15
TIERS = ("on_demand", "reserved", "spot")

BookEntry = ListPrice | MigPrice | SpotFloor


def checked(
    entries: Sequence[PriceEntry], catalog: Catalog, regions: Collection[str], now: datetime, who: str
) -> list[PriceEntry]:
    """The entries with canonical model names, times and sources; raises Invalid naming the field."""
    if not entries:
        raise Invalid("give at least one price entry", field="entries")
    result = []
    for index, entry in enumerate(entries):
        try:
            result.append(_checked(entry, catalog, regions, now, who))
        except Invalid as error:
            raise Invalid(f"entry {index}: {error.message}", field=error.field) from None
    seen: set[tuple[object, ...]] = set()
    for entry in result:
        assert entry.effective_from is not None
        key = (entry.gpu_model, entry.region, entry.tier, entry.mig_profile, to_epoch_s(entry.effective_from))
        if key in seen:
            raise Invalid(
                f"two entries for {entry.gpu_model} {entry.tier} in {entry.region} take effect at the "
                "same instant",
                field="effective_from",
            )
        seen.add(key)
    return result


def _checked(
    entry: PriceEntry, catalog: Catalog, regions: Collection[str], now: datetime, who: str
) -> PriceEntry:
    try:
        model = catalog.get(entry.gpu_model)
    except CatalogError as error:
        raise Invalid(str(error), field="gpu_model") from None
    if entry.tier not in TIERS:
        raise Invalid(f"unknown tier {entry.tier!r}; use {', '.join(TIERS)}", field="tier")
    if not 0 <= entry.price_micros_per_gpu_hour <= MAX_PRICE_MICROS:
        raise Invalid(
            f"price must be 0..{MAX_PRICE_MICROS} micros, got {entry.price_micros_per_gpu_hour}",
            field="price_micros_per_gpu_hour",
        )
    if entry.mig_profile is not None:
        if entry.tier == "spot":
            raise Invalid(
                "a MIG instance has no spot floor of its own (spot is priced by compute slices)",
                field="mig_profile",
            )
        if model.mig is None or not model.mig.has_profile(entry.mig_profile):
            known = ", ".join(p.name for p in model.mig.profiles) if model.mig else "none: no MIG"
            raise Invalid(
                f"{model.name} has no MIG profile {entry.mig_profile!r} (profiles: {known})",
                field="mig_profile",
            )
    if entry.region != ANY_REGION and entry.region not in regions:
        known = ", ".join(sorted(regions)) or "none loaded"
        raise Invalid(
            f"unknown region {entry.region!r}: use * (any region) or a region of the fleet ({known})",
            field="region",
        )
    effective = entry.effective_from or now
    if effective.tzinfo is None or effective.utcoffset() is None:
        effective = effective.replace(tzinfo=UTC)
    effective = effective.astimezone(UTC)
    if effective < now - PAST_GRACE:
        raise Invalid(
            f"effective_from {effective.isoformat()} is in the past: prices are not changed retroactively "
            "(quotes already given stay valid); give now or a future instant",
            field="effective_from",
        )
    source = entry.source.strip() or f"set by operator {who} at {now.isoformat(timespec='seconds')}"
    return replace(
        entry, gpu_model=model.name, effective_from=effective, source=source, id=None, created_at=now
    )


def layered(seed: PriceBook, entries: Iterable[PriceEntry]) -> PriceBook:
    """The seed book plus the stored entries; of two with one key and instant the later (higher id) wins."""
    lists: dict[tuple[object, ...], ListPrice] = {}
    migs: dict[tuple[object, ...], MigPrice] = {}
    floors: dict[tuple[object, ...], SpotFloor] = {}
    for p in seed.list_prices:
        lists[(p.model.casefold(), p.region, p.tier, p.effective_from_s)] = p
    for m in seed.mig_prices:
        migs[(m.model.casefold(), m.region, m.tier, m.profile, m.effective_from_s)] = m
    for f in seed.spot_floors:
        floors[(f.model.casefold(), f.region, f.effective_from_s)] = f
    for entry in sorted(entries, key=lambda e: e.id or 0):
        assert entry.effective_from is not None
        at_s = to_epoch_s(entry.effective_from)
        price, model = entry.price_micros_per_gpu_hour, entry.gpu_model
        try:
            if entry.tier == "spot":
                floors[(model.casefold(), entry.region, at_s)] = SpotFloor(
                    model, entry.region, price, at_s, entry.source
                )
                continue
            tier = Tier.parse(entry.tier)
            if entry.mig_profile is not None:
                migs[(model.casefold(), entry.region, tier, entry.mig_profile, at_s)] = MigPrice(
                    model, entry.region, tier, entry.mig_profile, price, at_s, entry.source
                )
            else:
                lists[(model.casefold(), entry.region, tier, at_s)] = ListPrice(
                    model, entry.region, tier, price, at_s, entry.source
                )
        except SuanliError:
            continue  # a row no longer valid (e.g. edited by hand) is skipped, not fatal to every quote
    return PriceBook(lists.values(), migs.values(), floors.values())


def in_force_or_later(book: PriceBook, at_s: int) -> list[BookEntry]:
    """Every entry in force at `at_s` and every one taking effect later, by model, region, tier, time."""
    result: list[BookEntry] = []
    for group in (book.list_prices, book.mig_prices, book.spot_floors):
        by_key: dict[tuple[object, ...], list[BookEntry]] = {}
        for entry in group:
            by_key.setdefault(_key(entry), []).append(entry)
        for entries in by_key.values():
            entries.sort(key=lambda e: e.effective_from_s)
            current = [e for e in entries if e.effective_from_s <= at_s][-1:]
            result += current + [e for e in entries if e.effective_from_s > at_s]
    return result


def _key(entry: BookEntry) -> tuple[object, ...]:
    if isinstance(entry, ListPrice):
        return (entry.model.casefold(), entry.region, entry.tier)
    if isinstance(entry, MigPrice):
        return (entry.model.casefold(), entry.region, entry.tier, entry.profile)
    return (entry.model.casefold(), entry.region)
