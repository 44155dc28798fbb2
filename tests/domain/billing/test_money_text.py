"""Money in messages: in currency units as the CLI's tables show it (four decimals, rounded half up)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from suanli.cli.output import micros
from suanli.domain.billing.money import money_text


def test_amounts_read_as_units() -> None:
    assert [money_text(m) for m in (448_500, 500_000_000, 50, 49, 0, -1, -2_500_000, 1_234_500_000)] == [
        "0.4485",
        "500.0000",
        "0.0001",
        "0.0000",
        "0.0000",
        "0.0000",
        "-2.5000",
        "1,234.5000",
    ]


@given(st.integers(-(10**15), 10**15))
def test_the_text_is_the_amount_to_the_ten_thousandth(amount_micros: int) -> None:
    text = money_text(amount_micros)
    assert abs(Decimal(text.replace(",", "")) * 1_000_000 - amount_micros) <= 50
    assert len(text.partition(".")[2]) == 4


@given(st.integers(0, 10**12).filter(lambda m: m % 100 != 50))
def test_messages_and_the_cli_s_tables_show_an_amount_alike(amount_micros: int) -> None:
    assert money_text(amount_micros) == micros(amount_micros)


def test_a_bid_and_a_floor_are_shown_apart_when_four_decimals_would_show_them_equal() -> None:
    from suanli.domain.billing.money import money_pair_text

    assert money_pair_text(1_999_999, 2_000_000) == ("1.999999", "2.000000")
    assert money_pair_text(1, 500_000) == ("0.000001", "0.500000")  # not a bid of 0.0000
    assert money_pair_text(1_500_000, 2_000_000) == ("1.5000", "2.0000")
    assert money_pair_text(2_000_000, 2_000_000) == ("2.0000", "2.0000")


@given(st.integers(0, 10**12), st.integers(0, 10**12))
def test_two_different_amounts_never_read_the_same(low: int, high: int) -> None:
    from suanli.domain.billing.money import money_pair_text

    shown = money_pair_text(low, high)
    assert (shown[0] == shown[1]) == (low == high)
