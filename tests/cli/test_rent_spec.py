"""`suanli rent` GPU specs and money amounts: what is accepted and how bad input is named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from suanli.cli.rent_spec import (
    GpuSpec,
    SpecError,
    duration_s,
    env_pairs,
    moment,
    money_to_micros,
    parse_gpu_spec,
)


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("H100:8", GpuSpec("H100", gpus=8)),
        ("H100", GpuSpec("H100", gpus=1)),
        ("A100-80GB:3g.40gb", GpuSpec("A100-80GB", mig_profile="3g.40gb")),
        ("L40S:0.5", GpuSpec("L40S", share_milli=500)),
        ("any:2", GpuSpec(None, gpus=2)),
    ],
    ids=["count", "model-only", "mig", "share", "any-model"],
)
def test_accepted_specs(text: str, spec: GpuSpec) -> None:
    assert parse_gpu_spec(text) == spec


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("H100:x", "cannot read"),
        ("H100:0", "GPU count 0 out of range"),
        ("H100:-1", "GPU count -1 out of range"),  # a count, not a share
        ("H100:65", "GPU count 65 out of range"),
        ("L40S:1.5", "a GPU share is between 0 and 1"),
        ("", "empty GPU spec"),
        ("cpu", "CPU-only rentals are not offered"),
    ],
    ids=str,
)
def test_rejected_specs_say_what_is_accepted(text: str, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        parse_gpu_spec(text)


@pytest.mark.parametrize(
    ("text", "micros"), [("1.9", 1_900_000), ("0.000001", 1), ("12", 12_000_000), ("2.50", 2_500_000)]
)
def test_money_is_exact(text: str, micros: int) -> None:
    assert money_to_micros(text) == micros


@pytest.mark.parametrize("text", ["-1", "1.2345678", "abc", "1e3"])
def test_bad_money_is_refused(text: str) -> None:
    with pytest.raises(SpecError):
        money_to_micros(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3600", 3600),
        ("90m", 5400),
        ("2h", 7200),
        ("1h30m", 5400),
        ("1:30:00", 5400),
        ("1.5h", 5400),
        ("1d", 86400),
    ],
)
def test_durations_read_as_people_write_them(text: str, seconds: int) -> None:
    assert duration_s(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "0", "-5m"], ids=str)
def test_a_duration_that_is_not_one_says_what_is(text: str) -> None:
    with pytest.raises(SpecError, match="duration"):
        duration_s(text)


def test_env_items_are_name_equals_value() -> None:
    assert env_pairs(["A=1", "B=x=y", "C=", "A=2"]) == {"A": "2", "B": "x=y", "C": ""}
    for bad in ("A", "=1"):
        with pytest.raises(SpecError, match="NAME=VALUE"):
            env_pairs([bad])


NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("now", NOW),
        ("NOW", NOW),
        ("+2h", NOW + timedelta(hours=2)),
        ("now+1d", NOW + timedelta(days=1)),
        ("now + 90m", NOW + timedelta(minutes=90)),
        ("2026-12-24", datetime(2026, 12, 24, tzinfo=UTC)),
        ("2026-12-24T02:00", datetime(2026, 12, 24, 2, tzinfo=UTC)),
        ("2026-12-24T10:00+08:00", datetime(2026, 12, 24, 2, tzinfo=UTC)),
    ],
)
def test_moments_read_as_slurm_and_iso_8601_write_them(text: str, at: datetime) -> None:
    assert moment(text, NOW) == at and moment(text, NOW).tzinfo is not None


@pytest.mark.parametrize("text", ["tomorrow", "", "+soon", "now-1h", "12/24/2026"], ids=str)
def test_a_moment_that_is_not_one_says_what_is(text: str) -> None:
    with pytest.raises(SpecError, match=r"not a time|not a duration"):
        moment(text, NOW)
