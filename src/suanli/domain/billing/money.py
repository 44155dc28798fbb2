"""Integer money helpers: the package's single rounding rule and exact proportional splits."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

from suanli.domain.billing.errors import BillingError

SECONDS_PER_HOUR = 3600
BASIS_POINTS = 10_000


def round_half_up(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded half up, for numerator >= 0 and denominator > 0."""
    if denominator <= 0 or numerator < 0:
        raise BillingError(
            f"round_half_up needs numerator >= 0 and denominator > 0, got {numerator}/{denominator}"
        )
    return (2 * numerator + denominator) // (2 * denominator)


def charge_micros(rate_micros_per_hour: int, billable_s: int) -> int:
    """The charge for `billable_s` seconds at an hourly rate: round half up of rate * seconds / 3600."""
    return round_half_up(rate_micros_per_hour * billable_s, SECONDS_PER_HOUR)


def bp_of(amount_micros: int, bp: int) -> int:
    """`bp` basis points of an amount, rounded half up."""
    return round_half_up(amount_micros * bp, BASIS_POINTS)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_epoch_s(moment: datetime) -> int:
    """Whole UTC epoch seconds of an aware datetime (floor); naive datetimes are refused."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise BillingError(f"time must be timezone-aware UTC, got naive {moment!r}")
    delta = moment - _EPOCH  # aware datetimes subtract in UTC, whatever their zones
    return delta.days * 86_400 + delta.seconds


def money_text(amount_micros: float) -> str:
    """An amount in currency units for people, as the CLI's tables show money: four decimals, rounded half
    up, thousands separated (448_500 -> "0.4485", 1_234_500_000 -> "1,234.5000")."""
    units = Decimal(round(amount_micros)).scaleb(-6).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
    return f"{abs(units) if units == 0 else units:,}"  # never "-0.0000"


def money_pair_text(low_micros: float, high_micros: float) -> tuple[str, str]:
    """Two amounts as `money_text` shows them, or to the micro (six decimals) when four would show a
    smaller one as equal to a larger one (a bid of 1.999999 against a floor of 2), or as nothing."""
    low, high = money_text(low_micros), money_text(high_micros)
    hidden = low == high or (low == money_text(0) and round(low_micros) != 0)  # 1 micro shows as 0.0000
    if not hidden or round(low_micros) == round(high_micros):
        return low, high
    exact = (f"{Decimal(round(a)).scaleb(-6):,.6f}" for a in (low_micros, high_micros))
    return next(exact), next(exact)
