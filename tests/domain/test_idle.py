"""Idle stop: a beat reads a rental's GPUs busy, idle or unknown; only idle time since the last busy reading
(or its start) counts, and only an idle beat ends it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from suanli.domain.idle import BUSY_PCT, Reading, idle_too_long, reading

T0 = datetime(2026, 12, 3, 12, tzinfo=UTC)


def test_a_beat_is_busy_if_any_gpu_is_idle_if_all_were_read_idle_and_else_unknown() -> None:
    assert reading([0, BUSY_PCT]) is Reading.BUSY
    assert reading([None, 90]) is Reading.BUSY  # one busy GPU is enough, read or not the others
    assert reading([0, BUSY_PCT - 1]) is Reading.IDLE
    assert reading([0, None]) is Reading.UNKNOWN  # an unread GPU might be the busy one
    assert reading([]) is Reading.UNKNOWN


def test_idle_time_counts_from_the_later_of_the_last_busy_reading_and_the_start() -> None:
    limit = 1800
    started = T0
    assert not idle_too_long(Reading.IDLE, None, started, T0 + timedelta(seconds=limit - 1), limit)
    assert idle_too_long(Reading.IDLE, None, started, T0 + timedelta(seconds=limit), limit)
    busy = T0 + timedelta(minutes=20)
    assert not idle_too_long(Reading.IDLE, busy, started, T0 + timedelta(seconds=limit), limit)
    assert idle_too_long(Reading.IDLE, busy, started, busy + timedelta(seconds=limit), limit)
    restarted = T0 + timedelta(hours=2)  # a busy reading before a restart does not count against it
    assert not idle_too_long(Reading.IDLE, busy, restarted, restarted + timedelta(seconds=60), limit)
    late = T0 + timedelta(hours=5)
    assert not idle_too_long(Reading.UNKNOWN, None, started, late, limit)  # never on an unknown beat


@given(st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=100)), max_size=8))
def test_a_busy_gpu_is_never_read_idle(utilizations: list[int | None]) -> None:
    verdict = reading(utilizations)
    if any(u is not None and u >= BUSY_PCT for u in utilizations):
        assert verdict is Reading.BUSY
    elif verdict is Reading.IDLE:
        assert utilizations and all(u is not None and u < BUSY_PCT for u in utilizations)
