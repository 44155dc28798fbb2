"""What a tenant sees of its rental's GPUs as they run (`GET /v1/rentals/{id}/gpus`, `suanli show`): each
slice it holds with the last reading its node's agent sent of that GPU (utilization, memory used, power) and
when. A MIG instance or a share reads its whole GPU: NVML reports per GPU, so the figures include any other
tenant's part of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from suanli.domain.plan import NodeAllocation


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU slice a rental holds, with its GPU's last reading (None where the agent sent none)."""

    node: str
    gpu_index: int
    milli: int
    mig_profile: str | None
    utilization_pct: int | None
    memory_used_mib: int | None
    power_w: float | None
    read_at: datetime | None  # the heartbeat that carried the reading

    @property
    def whole_gpu(self) -> bool:
        """The reading is the slice's own (a whole GPU), not a GPU it shares."""
        return self.mig_profile is None and self.milli == 1000


def gpu_readings(
    allocation: Sequence[NodeAllocation],
    telemetry: Mapping[str, tuple[datetime | None, Sequence[Mapping[str, Any]]]],
) -> list[GpuReading]:
    """Each slice of `allocation`, in node then GPU order, with its GPU's reading from `telemetry` (node ->
    (the heartbeat's time, its readings by GPU index))."""
    found: list[GpuReading] = []
    for part in allocation:
        beat_at, readings = telemetry.get(part.node, (None, ()))
        by_index = {r.get("index"): r for r in readings}
        for piece in sorted(part.slices, key=lambda s: (s.gpu_index, s.mig_start or 0)):
            reading = by_index.get(piece.gpu_index) or {}
            utilization = _int(reading.get("utilization_pct"))
            memory, power = _int(reading.get("memory_used_mib")), _float(reading.get("power_w"))
            read = any(value is not None for value in (utilization, memory, power))
            found.append(
                GpuReading(
                    part.node,
                    piece.gpu_index,
                    piece.milli,
                    piece.mig_profile,
                    utilization,
                    memory,
                    power,
                    beat_at if read else None,  # a host without NVML (a declared probe) reads nothing
                )
            )
    return found


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
