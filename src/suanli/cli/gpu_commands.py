"""`suanli gpus RENTAL`: how a rental's GPUs were used, minute by minute (utilization as a sparkline, its
mean, the most memory used and the mean power), while it runs or after it has ended; kept a week."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from suanli.cli.output import emit, logged_in, table
from suanli.wire.agent_schemas import GpuMinuteResponse, RentalGpuHistoryResponse

BARS = "▁▂▃▄▅▆▇█"
WIDTH = 60  # characters of sparkline at most: longer windows put several minutes in one


def sparkline(
    minutes: Sequence[GpuMinuteResponse], start: datetime, end: datetime, width: int = WIDTH
) -> str:
    """Utilization from `start` to `end`, one character per bucket of minutes (their mean; a space where
    nothing was read): ▁ is idle, █ full."""
    span = max(math.ceil((end - start).total_seconds() / 60), 1)
    per = max(math.ceil(span / width), 1)
    buckets: list[list[float]] = [[] for _ in range(math.ceil(span / per))]
    for minute in minutes:
        if minute.utilization_pct is None:
            continue
        at = int((minute.minute - start).total_seconds() // 60) // per
        if 0 <= at < len(buckets):
            buckets[at].append(minute.utilization_pct)
    return "".join(_bar(sum(b) / len(b)) if b else " " for b in buckets)


def _bar(pct: float) -> str:
    return BARS[min(int(max(pct, 0.0) / 100 * len(BARS)), len(BARS) - 1)]


def history_rows(found: list[RentalGpuHistoryResponse], start: datetime, end: datetime) -> list[tuple]:
    rows = []
    for gpu in found:
        read = [m for m in gpu.minutes if m.utilization_pct is not None]
        memory = [m.memory_used_mib for m in gpu.minutes if m.memory_used_mib is not None]
        power = [m.power_w for m in gpu.minutes if m.power_w is not None]
        rows.append(
            (
                gpu.node,
                gpu.gpu_index
                if gpu.whole_gpu
                else f"{gpu.gpu_index} ({gpu.mig_profile or f'{gpu.milli / 1000:g} share'}; whole GPU read)",
                sparkline(gpu.minutes, start, end),
                f"{sum(m.utilization_pct or 0 for m in read) / len(read):.0f}%" if read else "",
                f"{max(memory):,}" if memory else "",
                f"{sum(power) / len(power):.0f}" if power else "",
            )
        )
    return rows


def gpus(
    rental_id: Annotated[
        str, typer.Argument(metavar="RENTAL", help="A rental of yours, running or ended (kept a week).")
    ],
    minutes: Annotated[
        int, typer.Option("--minutes", min=1, max=7 * 24 * 60, help="How far back (a week at most).")
    ] = 60,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")
    ] = False,
) -> None:
    """How the rental's GPUs were used in the last --minutes: utilization minute by minute (▁ idle, █ full),
    its mean, the most memory used and the mean power; for a MIG instance or a share, its whole GPU's."""
    with logged_in({"minutes": "--minutes"}) as client:
        found = client.rental_gpu_history(rental_id, minutes)
    end = datetime.now(UTC)
    start = (end - timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)

    def shown(history: list[RentalGpuHistoryResponse]):
        if not any(g.minutes for g in history):
            return (
                f"no GPU readings for {rental_id} in the last {minutes} min (a host without NVML reads none)"
            )
        columns = ("node", "GPU", f"util, last {minutes} min", "mean", "max memory MiB", "mean power W")
        return table(f"GPUs of {rental_id}", columns, history_rows(history, start, end))

    emit(found, as_json, shown)
