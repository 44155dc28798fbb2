"""Workloads an earlier agent process left here: found from their records, adopted, killed or reported."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from suanli.agent.assignment import Assignment
from suanli.agent.executors import (
    Executor,
    WorkloadState,
    WorkloadStatus,
    group_alive,
    record_describes_process,
    write_notice,
)
from suanli.agent.probe import HostInventory
from suanli.agent.workloads import workload_spec
from suanli.domain.errors import SuanliError

log = logging.getLogger(__name__)
ENDED_AWAY = "ended while the agent was away; exit code unknown"


@dataclass(frozen=True, slots=True)
class Orphan:
    """A workload an earlier agent process started here: its process group, the devices it was started with
    (None in records written before they were kept), its record, and whether it still runs (else it ended
    while no agent ran, and nobody saw how)."""

    pgid: int
    devices: tuple[str, ...] | None
    record: Path
    alive: bool = True


class AdoptedWorkload:
    """A process group an earlier agent process started: signalled by group id; its exit code is unknown. A
    notice goes to its notice file first, as for a workload this process started."""

    def __init__(self, pgid: int, rental_id: str, notice_file: Path) -> None:
        self._pgid, self._rental_id, self._notice_file = pgid, rental_id, notice_file

    @property
    def pid(self) -> int:
        return self._pgid

    def poll(self) -> WorkloadStatus:
        if group_alive(self._pgid):
            return WorkloadStatus(WorkloadState.RUNNING)
        return WorkloadStatus(WorkloadState.EXITED, exit_code=None)

    def notice(self, deadline: datetime) -> None:
        write_notice(self._notice_file, self._rental_id, deadline)
        self._signal(signal.SIGTERM)

    def stop(self, grace_s: float) -> WorkloadStatus:
        self._signal(signal.SIGTERM)
        end = time.monotonic() + grace_s
        while group_alive(self._pgid) and time.monotonic() < end:
            time.sleep(0.05)
        return self.kill()

    def kill(self) -> WorkloadStatus:
        self._signal(signal.SIGKILL)
        return WorkloadStatus(WorkloadState.SIGNALED, exit_code=128 + signal.SIGKILL, signal=signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pgid, signum)


def find_orphans(work_dir: Path) -> dict[str, Orphan]:
    """The workloads earlier agent processes started here, by rental: still running or ended meanwhile."""
    found: dict[str, Orphan] = {}
    for record in sorted((work_dir / "rentals").glob("*/workload.json")):
        try:
            data = json.loads(record.read_text())
            pgid = int(data["pgid"])
            devices = data.get("devices")
            seen = None if devices is None else tuple(str(d) for d in devices)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        rental_id = str(data.get("rental_id", record.parent.name))
        alive = _still_running(rental_id, data, pgid)
        if alive is not None:
            found[rental_id] = Orphan(pgid, seen, record, alive)
    return found


def adopt(rental_id: str, orphan: Orphan, executor: Executor) -> AdoptedWorkload:
    """A handle on an orphan's process group, with the notice file its workload reads."""
    return AdoptedWorkload(orphan.pgid, rental_id, executor.paths(rental_id).notice_file)


def drop_orphan(rental_id: str, orphan: Orphan, executor: Executor) -> None:
    """Kill an orphan the server no longer assigns here; one that ended already only leaves its record."""
    if orphan.alive:
        log.info("%s: left by an earlier agent and not assigned; killing it", rental_id)
        adopt(rental_id, orphan, executor).kill()
        return
    orphan.record.unlink(missing_ok=True)


def moved_orphans(
    orphans: dict[str, Orphan],
    assignments: Iterable[Assignment],
    inventory: HostInventory,
    executor: Executor,
) -> list[str]:
    """The rentals whose live orphan the server now assigns other devices (a resize while no agent ran):
    they are stopped and started afresh on them."""
    moved = [
        assignment.rental_id
        for assignment in assignments
        if (orphan := orphans.get(assignment.rental_id)) is not None
        and orphan.alive
        and not _same_devices(assignment, orphan, inventory, executor)
    ]
    for rental_id in moved:
        log.info("%s: its GPUs changed while the agent was away; restarting the workload", rental_id)
    return moved


def _same_devices(
    assignment: Assignment, orphan: Orphan, inventory: HostInventory, executor: Executor
) -> bool:
    """Whether an orphan runs on the devices its assignment gives it now (unknown: assumed so)."""
    if orphan.devices is None:
        return True
    try:
        return workload_spec(assignment, inventory, executor).devices == orphan.devices
    except SuanliError:
        return True  # cannot tell here; the launch path would refuse it the same way


def _still_running(rental_id: str, record: dict[str, object], pgid: int) -> bool | None:
    """Whether a recorded workload still runs: False when its group is gone or now holds another process (a
    reboot or a reused pid: never to be signalled); None when a live group cannot be told ours or not."""
    if not group_alive(pgid):
        return False
    matches = record_describes_process(record, pgid)
    if matches is None:
        log.warning(
            "%s: cannot tell whether process group %d is its workload; leaving it alone", rental_id, pgid
        )
    elif not matches:
        log.info("%s: process group %d is no longer its workload (a reboot or a reused pid)", rental_id, pgid)
    return matches
