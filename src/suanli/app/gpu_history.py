"""How a rental's GPUs were used over time (`GET /v1/rentals/{id}/gpus/history`, `suanli gpus`): each
heartbeat's readings are folded into one row per GPU and minute (mean utilization and power, most memory
used), kept `RETENTION` (a week); a rental's history is the minutes of the GPUs it held, while it held them,
whether it still runs or has ended. A MIG instance or a share reads its whole GPU, as its current reading
does."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from suanli.app.errors import Invalid
from suanli.app.ports import Clock, UnitOfWork
from suanli.app.records import Caller
from suanli.app.tenants import owned_rental
from suanli.domain.plan import NodeAllocation

RETENTION = timedelta(days=7)
MAX_MINUTES = 7 * 24 * 60


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One heartbeat's reading of one GPU (None: not read)."""

    index: int
    utilization_pct: float | None
    memory_used_mib: int | None
    power_w: float | None


@dataclass(frozen=True, slots=True)
class GpuMinute:
    """One GPU's readings in one minute: mean utilization and power, the most memory used."""

    gpu_index: int
    minute: datetime
    utilization_pct: float | None
    memory_used_mib: int | None
    power_w: float | None


@dataclass(frozen=True, slots=True)
class GpuHistory:
    """One GPU slice a rental held on `node` from `since` (or the window's start) to `until` (None: holds it),
    with its GPU's minutes in that time."""

    node: str
    gpu_index: int
    milli: int
    mig_profile: str | None
    since: datetime
    until: datetime | None
    minutes: tuple[GpuMinute, ...]

    @property
    def whole_gpu(self) -> bool:
        return self.mig_profile is None and self.milli == 1000


class GpuMinuteRepo(Protocol):
    # fold `samples` into their GPUs' rows for `minute`
    def add(self, node: str, minute: datetime, samples: Sequence[GpuSample]) -> None: ...
    def prune(self, node: str, before: datetime) -> None: ...
    # the rows of those GPUs of `node` from minute `since` to `until`, by GPU then minute
    def read(
        self, node: str, gpu_indices: Sequence[int], since: datetime, until: datetime
    ) -> list[GpuMinute]: ...
    # every allocation the rental has held, released ones too: (allocation, booked at, released at)
    def spans(self, rental_id: str) -> list[tuple[NodeAllocation, datetime | None, datetime | None]]: ...


class GpuHistoryUnitOfWork(UnitOfWork, Protocol):
    gpu_minutes: GpuMinuteRepo


def minute_of(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def samples_of(telemetry: Sequence[Mapping[str, Any]]) -> list[GpuSample]:
    """The readings of a heartbeat's telemetry that read anything (a declared probe reads nothing)."""
    found = []
    for reading in telemetry:
        index = reading.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            continue
        sample = GpuSample(
            index,
            _number(reading.get("utilization_pct")),
            _whole(reading.get("memory_used_mib")),
            _number(reading.get("power_w")),
        )
        if (sample.utilization_pct, sample.memory_used_mib, sample.power_w) != (None, None, None):
            found.append(sample)
    return found


def record(
    repo: GpuMinuteRepo,
    node: str,
    previous: datetime | None,
    now: datetime,
    telemetry: Sequence[Mapping[str, Any]],
) -> None:
    """Fold a heartbeat's readings into the node's minutes; at the first beat of each hour, drop its rows
    older than `RETENTION`."""
    samples = samples_of(telemetry)
    if samples:
        repo.add(node, minute_of(now), samples)
    if previous is None or previous.hour != now.hour or previous.date() != now.date():
        repo.prune(node, now - RETENTION)


class GpuHistoryService:
    def __init__(self, uow: Callable[[], GpuHistoryUnitOfWork], clock: Clock) -> None:
        self.uow, self.clock = uow, clock

    def history(self, caller: Caller, rental_id: str, minutes: int = 60) -> list[GpuHistory]:
        """The rental's GPU slices of the last `minutes`, each with its GPU's minutes while the rental held
        it, in node then GPU order."""
        if not 1 <= minutes <= MAX_MINUTES:
            raise Invalid(f"minutes is 1 to {MAX_MINUTES} (a week)", field="minutes")
        now = self.clock.now()
        start = minute_of(now - timedelta(minutes=minutes - 1))
        found: list[GpuHistory] = []
        with self.uow() as uow:
            owned_rental(uow, caller, rental_id)
            for allocation, booked_at, released_at in uow.gpu_minutes.spans(rental_id):
                since = max(booked_at or start, start)
                until = released_at or now
                if until < since:
                    continue
                indices = sorted({piece.gpu_index for piece in allocation.slices})
                rows = uow.gpu_minutes.read(allocation.node, indices, minute_of(since), until)
                for piece in sorted(allocation.slices, key=lambda s: (s.gpu_index, s.mig_start or 0)):
                    own = tuple(row for row in rows if row.gpu_index == piece.gpu_index)
                    found.append(
                        GpuHistory(
                            allocation.node,
                            piece.gpu_index,
                            piece.milli,
                            piece.mig_profile,
                            since,
                            released_at,
                            own,
                        )
                    )
        return found


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _whole(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
