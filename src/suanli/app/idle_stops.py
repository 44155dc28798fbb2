"""Idle stop on the heartbeat: each running rental with `idle_stop_s` on the beating node is read busy, idle
or unknown from the beat's GPU telemetry (`domain/idle.py`); a busy reading moves its `last_busy_at`, and an
idle one past its limit stops it (reason `idle`), as its owner asked. Its idle time counts from the later of
its last busy reading (on any of its nodes) and when its run on this node started, so an image pull or a
restart is not idle time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from suanli.app.rentals import stop_in
from suanli.domain.idle import BUSY_PCT, Reading, idle_too_long, reading

if TYPE_CHECKING:
    from suanli.app.agent_records import AgentUnitOfWork

IDLE = "idle"  # the reason on its stop event


def stop_idle(
    uow: AgentUnitOfWork, node: str, telemetry: Sequence[Mapping[str, Any]], now: datetime
) -> list[str]:
    """Record busy readings and stop what has been idle too long; the rentals stopped."""
    utilization = {t["index"]: t.get("utilization_pct") for t in telemetry if isinstance(t.get("index"), int)}
    stopped: list[str] = []
    if not any(u is not None for u in utilization.values()):
        return stopped  # nothing read (no telemetry): every verdict would be unknown
    slices_of = uow.agents.running_slices(node)
    for rental in uow.rentals.by_ids(list(slices_of)):  # one read per beat, not one per rental
        if rental.spec.idle_stop_s is None or rental.state != "running":
            continue
        rental_id, slices = rental.id, slices_of[rental.id]
        verdict = reading(utilization.get(index) for index, _ in slices)
        if verdict is Reading.BUSY:
            uow.rentals.mark_busy(rental_id, now)
            continue
        run = uow.agents.run(rental_id, node, rental.placements)
        started = run.started_at if run is not None and run.started_at is not None else now
        if idle_too_long(verdict, rental.last_busy_at, started, now, rental.spec.idle_stop_s):
            why = (
                f"because its GPUs were idle (under {BUSY_PCT}% utilization) for {rental.spec.idle_stop_s} s "
                "(its idle stop)"
            )
            stop_in(uow, rental, now, why, IDLE)
            stopped.append(rental_id)
    return stopped
