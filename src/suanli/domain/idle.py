"""Idle stop: a rental that asked for it (`idle_stop_s`) is stopped once every one of its GPUs has been idle
that long, as a notebook left open would otherwise be charged all night (SageMaker and Colab stop idle
sessions the same way).

Pure: the utilization readings and times are arguments. A GPU is busy at `BUSY_PCT` or more; a node's
beat is `busy` when any of the rental's GPUs there is, `idle` when each of them was read and none is, and
`unknown` when one was not read (no telemetry): an unknown beat neither refreshes nor ends the idle time.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from enum import StrEnum

BUSY_PCT = 5


class Reading(StrEnum):
    BUSY = "busy"
    IDLE = "idle"
    UNKNOWN = "unknown"


def reading(utilizations_pct: Iterable[int | None]) -> Reading:
    """One beat's verdict on a rental's GPUs on one node, from their utilization in % (None: not read)."""
    values = list(utilizations_pct)
    if any(v is not None and v >= BUSY_PCT for v in values):
        return Reading.BUSY
    if not values or any(v is None for v in values):
        return Reading.UNKNOWN
    return Reading.IDLE


def idle_since(last_busy_at: datetime | None, running_since: datetime) -> datetime:
    """Since when the rental has been idle: its last busy reading, or when it started running."""
    return running_since if last_busy_at is None else max(last_busy_at, running_since)


def idle_too_long(
    verdict: Reading, last_busy_at: datetime | None, running_since: datetime, now: datetime, idle_stop_s: int
) -> bool:
    """Whether an `idle` beat at `now` ends the rental: idle for at least `idle_stop_s`."""
    since = idle_since(last_busy_at, running_since)
    return verdict is Reading.IDLE and now - since >= timedelta(seconds=idle_stop_s)
