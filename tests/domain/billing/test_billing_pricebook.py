"""Price book: effective dates, MIG and share pricing, the spot formula and its bounds, quotes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from suanli.domain.billing.errors import BillingError, PriceNotFoundError
from suanli.domain.billing.pricebook import (
    Discount,
    ListPrice,
    MigPrice,
    PriceBook,
    SpotFloor,
    gpu_milli,
    quote,
    resized_rate,
    spot_formula,
    utilization_milli,
)
from suanli.domain.capacity import instance_milli
from suanli.domain.catalog import GpuModel
from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import SuanliError
from suanli.domain.request import GpuShare, MigSlice, Shape, Tier, WholeGpus

H100 = CATALOG.get("H100-SXM-80GB")
A100 = CATALOG.get("A100-80GB")
A30 = CATALOG.get("A30-24GB")
NOV = 1_793_491_200  # 2026-11-01T00:00:00Z
DEC = 1_796_083_200  # 2026-12-01T00:00:00Z


def _book() -> PriceBook:
    return PriceBook(
        list_prices=[
            ListPrice("H100-SXM-80GB", "eu-west", Tier.ON_DEMAND, 2_500_000, NOV, "launch list"),
            ListPrice("H100-SXM-80GB", "eu-west", Tier.ON_DEMAND, 2_000_000, DEC, "December cut"),
            ListPrice("H100-SXM-80GB", "eu-west", Tier.RESERVED, 1_800_000, NOV, "reserved list"),
            ListPrice("A100-80GB", "eu-west", Tier.ON_DEMAND, 1_400_000, NOV, "launch list"),
            ListPrice("A30-24GB", "eu-west", Tier.ON_DEMAND, 600_000, NOV, "launch list"),
        ],
        mig_prices=[MigPrice("A100-80GB", "eu-west", Tier.ON_DEMAND, "1g.10gb", 250_000, NOV, "promo slice")],
        spot_floors=[
            SpotFloor("H100-SXM-80GB", "eu-west", 800_000, NOV, "floor: energy + depreciation"),
            SpotFloor("A100-80GB", "eu-west", 400_000, NOV, "floor"),
        ],
    )


@pytest.mark.parametrize(
    ("at_s", "expected", "source"),
    [
        pytest.param(NOV, 2_500_000, "launch list", id="first-instant"),
        pytest.param(DEC - 1, 2_500_000, "launch list", id="last-second-before-cut"),
        pytest.param(DEC, 2_000_000, "December cut", id="cut-takes-effect"),
        pytest.param(DEC + 86_400 * 400, 2_000_000, "December cut", id="long-after"),
    ],
)
def test_the_price_in_force_is_the_latest_effective_entry(at_s: int, expected: int, source: str) -> None:
    price = _book().list_price("H100-SXM-80GB", "eu-west", Tier.ON_DEMAND, at_s)
    assert (price.price_micros_per_gpu_hour, price.source) == (expected, source)


def test_no_price_before_the_first_entry_or_for_an_unknown_key() -> None:
    book = _book()
    with pytest.raises(PriceNotFoundError):
        book.list_price("H100-SXM-80GB", "eu-west", Tier.ON_DEMAND, NOV - 1)
    with pytest.raises(PriceNotFoundError):
        book.list_price("H100-SXM-80GB", "cn-north", Tier.ON_DEMAND, DEC)
    with pytest.raises(SuanliError):  # BillingError is part of the domain's tree
        book.list_price("T4", "eu-west", Tier.ON_DEMAND, DEC)


def test_two_entries_for_one_key_and_instant_are_refused() -> None:
    with pytest.raises(BillingError, match="same instant"):
        PriceBook(
            [
                ListPrice("T4", "r", Tier.ON_DEMAND, 1, NOV, "a"),
                ListPrice("T4", "r", Tier.ON_DEMAND, 2, NOV, "b"),
            ]
        )


@pytest.mark.parametrize(
    ("model", "shape", "expected"),
    [
        pytest.param(H100, WholeGpus(2), 5_000_000, id="two-whole-h100"),
        pytest.param(H100, GpuShare(milli=250), 625_000, id="quarter-share"),
        pytest.param(H100, MigSlice("3g.40gb"), 1_071_429, id="mig-3-of-7-slices"),
        pytest.param(A100, MigSlice("1g.10gb"), 250_000, id="mig-explicit-entry"),
        pytest.param(A100, MigSlice("2g.20gb"), 400_000, id="mig-2-of-7-slices"),
        pytest.param(A30, MigSlice("2g.12gb"), 300_000, id="a30-2-of-4-slices"),
    ],
)
def test_shapes_priced_by_gpus_milli_or_slices(model: GpuModel, shape: Shape, expected: int) -> None:
    got = quote(_book(), model=model, region="eu-west", tier=Tier.ON_DEMAND, shape=shape, at_s=NOV)
    assert got.base_micros_per_hour == expected
    assert got.final_micros_per_hour == expected


def test_a_quote_breaks_down_discounts_and_contract_coverage() -> None:
    got = quote(
        _book(),
        model=H100,
        region="eu-west",
        tier=Tier.ON_DEMAND,
        shape=WholeGpus(2),
        node_count=2,
        at_s=DEC,
        discounts=[Discount("membership", 1000)],
        contract_covered_gpu_milli=1000,
    )
    assert got.base_micros_per_hour == 8_000_000
    assert got.discounts == (("membership", 800_000),)
    assert got.contract_coverage_micros_per_hour == 1_800_000  # one of four GPUs covered
    assert got.final_micros_per_hour == 5_400_000
    assert got.source == "December cut"


@pytest.mark.parametrize("model", [m for m in CATALOG.models if m.mig is not None], ids=lambda m: m.name)
def test_a_gpu_filled_with_its_smallest_instances_fits_a_one_gpu_contract(model: GpuModel) -> None:
    """Each instance counts what the scheduler holds (slices of the GPU, rounded down): as many of the
    smallest profile as a GPU has slices never take more than one contracted GPU, so each is covered whole
    (rounded half up, seven 1g instances counted 1001 milli and the seventh paid for the one it lacked)."""
    assert model.mig is not None
    for profile in model.mig.profiles:
        milli = gpu_milli(model, MigSlice(profile.name))
        assert milli == instance_milli(model.mig, profile)
        assert milli * (model.mig.compute_slice_count // profile.compute_slices) <= 1000
    smallest = min(model.mig.profiles, key=lambda p: p.compute_slices)
    shape = MigSlice(smallest.name)
    book = PriceBook(list_prices=[ListPrice(model.name, "r", Tier.RESERVED, 2_100_000, NOV, "l")])
    room = 1000
    for _ in range(model.mig.compute_slice_count // smallest.compute_slices):
        wanted = gpu_milli(model, shape)
        got = quote(
            book,
            model=model,
            region="r",
            tier=Tier.RESERVED,
            shape=shape,
            at_s=NOV,
            contract_covered_gpu_milli=min(room, wanted),
        )
        assert got.final_micros_per_hour == 0 and got.contract_coverage_micros_per_hour > 0
        room -= wanted


@given(
    floor=st.integers(0, 10_000_000),
    on_demand=st.integers(0, 10_000_000),
    utilization=st.integers(0, 1000),
    bid=st.none() | st.integers(0, 12_000_000),
)
def test_spot_rate_stays_between_floor_bid_and_on_demand(
    floor: int, on_demand: int, utilization: int, bid: int | None
) -> None:
    book = PriceBook(
        [ListPrice("H100-SXM-80GB", "r", Tier.ON_DEMAND, on_demand, 0, "l")],
        spot_floors=[SpotFloor("H100-SXM-80GB", "r", floor, 0, "f")],
    )
    effective_floor = min(floor, on_demand)
    if bid is not None and bid < effective_floor:
        with pytest.raises(BillingError, match="spot floor"):
            book.spot_rate("H100-SXM-80GB", "r", utilization, bid, 10)
        return
    rate = book.spot_rate("H100-SXM-80GB", "r", utilization, bid, 10)
    assert effective_floor <= rate <= on_demand
    if bid is not None:
        assert rate <= bid
    assert rate == min(spot_formula(floor, on_demand, utilization), bid if bid is not None else on_demand)


@given(
    floor=st.integers(0, 5_000_000),
    extra=st.integers(0, 5_000_000),
    u1=st.integers(0, 1000),
    u2=st.integers(0, 1000),
)
def test_spot_price_rises_with_utilization_from_floor_to_on_demand(
    floor: int, extra: int, u1: int, u2: int
) -> None:
    on_demand = floor + extra
    low, high = sorted((u1, u2))
    assert spot_formula(floor, on_demand, 0) == floor
    assert spot_formula(floor, on_demand, 1000) == on_demand
    assert spot_formula(floor, on_demand, low) <= spot_formula(floor, on_demand, high)


def test_pool_utilization_sums_each_pools_nodes_and_rounds_down() -> None:
    h100_eu, h100_us, a100_eu = ("H100", "eu-west"), ("H100", "us-east"), ("A100", "eu-west")
    nodes = [
        (h100_eu, 8_000, 8_000),  # a full node
        (h100_eu, 8_000, 500),  # one GPU half shared
        (h100_us, 8_000, 0),
        (a100_eu, 3_000, 1_000),  # 1/3: 333.33 rounds down
        (("L4", "eu-west"), 0, 0),  # a node without GPUs is no pool
    ]
    assert utilization_milli(nodes) == {h100_eu: 531, h100_us: 0, a100_eu: 333}
    assert utilization_milli([]) == {}


def test_spot_quote_uses_the_formula_and_the_bid() -> None:
    book = _book()
    half = quote(
        book,
        model=H100,
        region="eu-west",
        tier=Tier.SPOT,
        shape=WholeGpus(1),
        at_s=NOV,
        utilization_milli=500,
    )
    assert half.unit_micros_per_gpu_hour == 800_000 + (2_500_000 - 800_000) // 4
    capped = quote(
        book,
        model=H100,
        region="eu-west",
        tier=Tier.SPOT,
        shape=MigSlice("1g.10gb"),
        at_s=NOV,
        utilization_milli=1000,
        bid_micros_per_gpu_hour=1_000_000,
    )
    assert capped.unit_micros_per_gpu_hour == 1_000_000
    assert capped.base_micros_per_hour == 142_857  # 1 of 7 slices, rounded half up


def test_a_resized_rate_is_in_proportion_from_its_reference_less_the_covered_part() -> None:
    assert resized_rate(2_990_000, 1000, 4000, 1000) == (3 * 2_990_000, 2_990_000)  # 1 of 4 GPUs covered
    assert resized_rate(1000, 3000, 2000, 0) == (667, 0)  # rounded half up, from the reference each time
    assert resized_rate(1000, 3000, 3000, 0) == (1000, 0)  # so back at the placement size, its rate
    assert resized_rate(1000, 1000, 500, 2000) == (0, 500)  # coverage never above the size
