"""Price book regions: an entry for the asked region wins; otherwise the one for any region (`*`) applies."""

from __future__ import annotations

import pytest

from suanli.domain.billing.errors import PriceNotFoundError
from suanli.domain.billing.pricebook import ANY_REGION, ListPrice, MigPrice, PriceBook, SpotFloor
from suanli.domain.request import Tier

H100 = "H100-SXM-80GB"


def _book() -> PriceBook:
    return PriceBook(
        [
            ListPrice(H100, ANY_REGION, Tier.ON_DEMAND, 3_000_000, 0, "global list"),
            ListPrice(H100, "eu-west", Tier.ON_DEMAND, 2_500_000, 100, "EU list"),
            ListPrice(H100, "cn-north", Tier.RESERVED, 2_000_000, 0, "CN reserved"),
        ],
        [MigPrice("A100-80GB", ANY_REGION, Tier.ON_DEMAND, "1g.10gb", 200_000, 0, "slice")],
        [SpotFloor(H100, ANY_REGION, 1_000_000, 0, "global floor")],
    )


def test_a_regional_entry_wins_once_in_force_and_any_region_fills_in() -> None:
    book = _book()
    assert book.list_price(H100, "eu-west", Tier.ON_DEMAND, 100).source == "EU list"
    assert book.list_price(H100, "eu-west", Tier.ON_DEMAND, 99).source == "global list"
    assert book.list_price(H100, "cn-north", Tier.ON_DEMAND, 100).source == "global list"
    assert book.spot_floor(H100, "ap-southeast", 5).source == "global floor"
    found = book.mig_price("A100-80GB", "eu-west", Tier.ON_DEMAND, "1g.10gb", 5)
    assert found is not None and found.source == "slice"


def test_a_regional_only_entry_is_not_found_for_other_regions() -> None:
    with pytest.raises(PriceNotFoundError):
        _book().list_price(H100, "eu-west", Tier.RESERVED, 5)
    with pytest.raises(PriceNotFoundError):
        _book().list_price(H100, ANY_REGION, Tier.RESERVED, 5)
