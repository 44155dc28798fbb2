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
from suanli.agent.containers import ContainerControl, ContainerExecutor, container_name
from suanli.agent.executors import (
    EXIT_FILE,
    Executor,
    RentalPaths,
    WorkloadState,
    WorkloadStatus,
    group_alive,
    record_describes_process,
    rentals_dir,
    write_notice,
)
from suanli.agent.probe import HostInventory
from suanli.agent.supervisor import ExitRecord, read_exit
from suanli.agent.workloads import workload_spec
from suanli.domain.errors import SuanliError

log = logging.getLogger(__name__)
ENDED_AWAY = "ended while the agent was away; exit code unknown"
EXIT_UNKNOWN = "ended with its supervisor; exit code unknown"


@dataclass(frozen=True, slots=True)
class Orphan:
    """A workload an earlier agent process started here: its process group, the devices it was started with
    (None in records written before they were kept), its record, whether it still runs, and for one that
    ended while no agent ran, how (as its supervisor wrote it; None when nobody saw it: a reboot, a record
    older than supervisors, or a supervisor killed with it), and the container runtime that runs it (None for
    a host process, or a record older than the field)."""

    pgid: int
    devices: tuple[str, ...] | None
    record: Path
    alive: bool = True
    ended: ExitRecord | None = None
    container_runtime: str | None = None


KILL_WAIT_S = 5.0  # how long a killed group may take to be gone before the agent goes on


class AdoptedWorkload:
    """A process group an earlier agent process started: signalled by group id, and a container workload's
    container through its runtime as well (its client passes no SIGKILL on, and the container outlives it);
    its end is read from the exit file its supervisor (the group leader) writes, else unknown. A notice goes
    to its notice file first, as for a workload this process started."""

    def __init__(
        self, pgid: int, rental_id: str, paths: RentalPaths, container: ContainerControl | None = None
    ) -> None:
        self._pgid, self._rental_id, self._paths = pgid, rental_id, paths
        self._container = container

    @property
    def pid(self) -> int:
        return self._pgid

    def poll(self) -> WorkloadStatus:
        running = group_alive(self._pgid)
        ended = read_exit(self._paths.exit_file, self._pgid)  # after: written before its supervisor ends
        if ended is not None:
            return exit_status(ended)
        if running:
            return WorkloadStatus(WorkloadState.RUNNING)
        return WorkloadStatus(WorkloadState.EXITED, exit_code=None)

    def notice(self, deadline: datetime, cause: str | None = None) -> None:
        write_notice(self._paths.notice_file, self._rental_id, deadline, cause=cause)
        if self._container is not None:
            self._container.signal("TERM")
            return
        self._signal(signal.SIGTERM)

    def stop(self, grace_s: float) -> WorkloadStatus:
        if self._container is not None:
            self._container.stop(grace_s)
            return self.kill()
        self._signal(signal.SIGTERM)
        self._wait_gone(grace_s)
        return self.kill()

    def kill(self) -> WorkloadStatus:
        """SIGKILL to the group, then a short wait until the kernel has ended it (a loaded host may not have
        run the kill yet), so that what is reported killed is gone."""
        if self._container is not None:
            self._container.kill()
        self._signal(signal.SIGKILL)
        self._wait_gone(KILL_WAIT_S)
        return WorkloadStatus(WorkloadState.SIGNALED, exit_code=128 + signal.SIGKILL, signal=signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pgid, signum)

    def _wait_gone(self, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while group_alive(self._pgid) and time.monotonic() < end:
            time.sleep(0.05)


def find_orphans(work_dir: Path) -> dict[str, Orphan]:
    """The workloads earlier agent processes started here, by rental: still running or ended meanwhile."""
    found: dict[str, Orphan] = {}
    for record in sorted(rentals_dir(work_dir).glob("*/workload.json")):
        try:
            data = json.loads(record.read_text())
            pgid = int(data["pgid"])
            devices = data.get("devices")
            seen = None if devices is None else tuple(str(d) for d in devices)
            runtime = data.get("container_runtime")
            container_runtime = None if runtime is None else str(runtime)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        rental_id = str(data.get("rental_id", record.parent.name))
        ended = read_exit(record.with_name(EXIT_FILE), _leader(data, pgid))
        if ended is not None:  # its group may linger (the workload's own children): never signalled
            found[rental_id] = Orphan(
                pgid, seen, record, alive=False, ended=ended, container_runtime=container_runtime
            )
            continue
        alive = _still_running(rental_id, data, pgid)
        if alive is not None:
            found[rental_id] = Orphan(pgid, seen, record, alive, container_runtime=container_runtime)
    return found


def adopt(rental_id: str, orphan: Orphan, executor: Executor) -> AdoptedWorkload:
    """A handle on an orphan's process group, with the notice file its workload reads and its exit file, and
    its container when a container runtime runs it (as its record says; a record older than that field, under
    a container executor, is taken for one of its containers)."""
    runtime = orphan.container_runtime
    if runtime is None and isinstance(executor, ContainerExecutor):
        runtime = executor.runtime
    container = None if runtime is None else ContainerControl(runtime, container_name(rental_id))
    return AdoptedWorkload(orphan.pgid, rental_id, executor.paths(rental_id), container)


def drop_orphan(rental_id: str, orphan: Orphan, executor: Executor) -> None:
    """Kill an orphan the server no longer assigns here; one that ended already only leaves its record."""
    if orphan.alive:
        log.info("%s: left by an earlier agent and not assigned; killing it", rental_id)
        adopt(rental_id, orphan, executor).kill()
        return
    forget(orphan.record)


def forget(record: Path) -> None:
    """Remove the record of a run that ended and its exit file, so no later agent process reports it again."""
    record.unlink(missing_ok=True)
    record.with_name(EXIT_FILE).unlink(missing_ok=True)


def ended_away(ended: ExitRecord | None) -> tuple[str, int | None, str]:
    """The state, exit code and message to report for a workload that ended while no agent ran."""
    if ended is None:
        return "failed", None, ENDED_AWAY
    if ended.signal is not None:
        return "failed", ended.exit_code, f"killed by signal {ended.signal} while the agent was away"
    if ended.exit_code == 0:
        return "succeeded", 0, "exited with code 0 while the agent was away"
    return "failed", ended.exit_code, f"exited with code {ended.exit_code} while the agent was away"


def exit_status(ended: ExitRecord) -> WorkloadStatus:
    """A supervisor's record of an end as a workload status."""
    if ended.signal is not None:
        return WorkloadStatus(WorkloadState.SIGNALED, exit_code=ended.exit_code, signal=ended.signal)
    return WorkloadStatus(WorkloadState.EXITED, exit_code=ended.exit_code)


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


def _leader(record: dict[str, object], pgid: int) -> int:
    """The recorded group leader's pid: the supervisor, whose pid its exit file names."""
    pid = record.get("pid", pgid)
    return pid if isinstance(pid, int) else pgid


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
