"""Parse what the CLI is given in its own forms: the GPU spec (`H100:8`, `A100-80GB:3g.40gb`, `L40S:0.5`,
`H100`), a bid, a duration (`90m`, `2h`, `1h30m`, `1:30:00`, seconds), a moment (`now`, `+2h`,
`2026-12-01T02:00`) and `--env`'s `NAME=VALUE`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pytimeparse2 import parse as parse_time

MIG_PROFILE = re.compile(r"^\d+g\.\d+gb(\+me)?$")


class SpecError(ValueError):
    """A GPU spec the CLI cannot read; the message says what forms are accepted."""


@dataclass(frozen=True)
class GpuSpec:
    gpu_model: str | None
    gpus: int = 1
    mig_profile: str | None = None
    share_milli: int | None = None


FORMS = "MODEL[:COUNT] (H100:8), MODEL:MIG_PROFILE (A100-80GB:3g.40gb), or MODEL:FRACTION (L40S:0.5)"


def parse_gpu_spec(text: str) -> GpuSpec:
    """Read the spec; raise SpecError naming the accepted forms."""
    text = text.strip()
    if text.lower() == "cpu":  # every rental holds a GPU, a MIG instance or a share
        raise SpecError(f"CPU-only rentals are not offered; use {FORMS}")
    model, sep, amount = text.partition(":")
    model = model.strip() or None
    if model == "any":
        model = None
    if not sep:
        if model is None:
            raise SpecError(f"empty GPU spec; use {FORMS}")
        return GpuSpec(model)
    amount = amount.strip().lower()
    if MIG_PROFILE.match(amount):
        return GpuSpec(model, mig_profile=amount)
    if amount.isdigit() or (amount.startswith("-") and amount[1:].isdigit()):
        count = int(amount)
        if not 1 <= count <= 64:
            raise SpecError(f"GPU count {count} out of range 1..64")
        return GpuSpec(model, gpus=count)
    try:
        fraction = float(amount)
    except ValueError:
        raise SpecError(f"cannot read {text!r}; use {FORMS}") from None
    if not 0 < fraction < 1:
        raise SpecError(f"a GPU share is between 0 and 1 (got {amount}); whole GPUs are counts")
    return GpuSpec(model, share_milli=max(1, round(fraction * 1000)))


def money_to_micros(text: str) -> int:
    """`1.9` (currency units per GPU-hour) -> 1_900_000 micros, exactly (no float rounding)."""
    match = re.fullmatch(r"([0-9]+)(?:\.([0-9]{1,6}))?", text.strip())
    if not match and re.fullmatch(r"-[0-9]+(?:\.[0-9]{1,6})?", text.strip()):
        raise SpecError(f"an amount is not negative (got {text!r})")
    if not match and re.fullmatch(r"-?[0-9]+\.[0-9]{7,}", text.strip()):
        raise SpecError(f"an amount has at most six decimals, a micro (got {text!r})")
    if not match:
        raise SpecError(f"not an amount: {text!r} (use e.g. 1.9)")
    whole, fraction = match.group(1), (match.group(2) or "").ljust(6, "0")
    return int(whole) * 1_000_000 + int(fraction)


def duration_s(text: str) -> int:
    """`90m`, `2h`, `1h30m`, `1:30:00`, `1d` or plain seconds -> whole seconds (at least 1)."""
    seconds = parse_time(text.strip())
    if seconds is None:
        raise SpecError(f"not a duration: {text!r} (use e.g. 90m, 2h, 1h30m, 1:30:00 or seconds)")
    if seconds < 1:
        raise SpecError(f"a duration is 1 s or more (got {text!r})")
    return round(seconds)


def moment(text: str, now: datetime | None = None) -> datetime:
    """`now`, `+2h` or `now+1d` (a duration from now, as Slurm's `--begin` takes it), or ISO 8601
    (`2026-12-01`, `2026-12-01T02:00`; UTC unless it names a zone) -> an aware time."""
    raw = text.strip()
    now = now or datetime.now(UTC)
    if raw.lower() == "now":
        return now
    if (ahead := re.fullmatch(r"(?i:now)?\s*\+\s*(\S.*)", raw)) is not None:
        return now + timedelta(seconds=duration_s(ahead.group(1)))
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise SpecError(
            f"not a time: {text!r} (use now, +2h, now+1d, 2026-12-01 or 2026-12-01T02:00; UTC unless a zone "
            "is given)"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


def env_pairs(items: Sequence[str]) -> dict[str, str]:
    """`NAME=VALUE` items -> a mapping (the value may hold `=` or be empty; a later NAME wins)."""
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SpecError(f"not NAME=VALUE: {item!r}")
        env[name] = value
    return env
