"""Money in messages: in currency units, exact to the micro, at least two decimals."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from suanli.domain.billing.money import money_text


def test_amounts_read_as_units() -> None:
    assert [money_text(m) for m in (448_500, 500_000_000, 1, 0, -2_500_000)] == [
        "0.4485",
        "500.00",
        "0.000001",
        "0.00",
        "-2.50",
    ]


@given(st.integers(-(10**15), 10**15))
def test_the_text_is_the_amount_exactly(amount_micros: int) -> None:
    text = money_text(amount_micros)
    assert Decimal(text) * 1_000_000 == amount_micros
    assert len(text.partition(".")[2]) >= 2
