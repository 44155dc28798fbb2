"""The agent loop: register once, then every interval poll workloads, ship logs, heartbeat, reconcile.

Guarantees:

* The node key is saved in `<work dir>/agent.json` (mode 0600) and reused on restart; the join token is spent
  only when there is no saved key for this server, or the server refuses the saved one.
* One step: (1) poll local workloads (a failure restarts under the rental's restart policy), (2) ship new log
  bytes (the server dedups by byte offset, so a retry never doubles a line), (3) heartbeat with every
  workload's state and exit code and the GPU telemetry, (4) reconcile with the answer: launch what is new,
  restart what runs on other GPUs than before (a resize), stop what says `stop` (side by side: a step waits
  one grace, not one per workload), give notice at a `notice_deadline` and kill at it (unless the answer
  withdraws it: the notice file goes, and the workload runs on), kill what the answer
  no longer lists (the server ended or forgot it, or a shrink released the node) and report it `stopped` once.
  Logs go before the heartbeat, so an end the server acknowledges has its whole output stored; an ended
  workload is forgotten only once its log is shipped to its end (more than one step's worth takes more steps).
* A server that does not answer, or answers "try again later" (5xx, 408, 429), costs retries with exponential
  backoff (tenacity in the SDK, then a growing pause here); workloads keep running meanwhile.
* A workload left behind by an earlier agent process (`orphans.py`: its `workload.json` names a live group
  whose leader has the recorded boot and start time) is adopted if the server still assigns it, else killed;
  one assigned other GPUs meanwhile (a resize) is restarted on them. One that ended while no agent ran is
  reported as its supervisor recorded its end in `exit.json` (`succeeded` at exit code 0, else `failed` with
  its code) if the server still assigns it, never started again; with no exit file (a reboot, a supervisor
  killed with it) it is `failed`, exit code unknown. Its record is removed once its end is reported (or at
  once, if the server does not assign it). An adopted workload the agent stops is reported `stopped`. A
  record whose group is now another process's counts as ended; a live group that cannot be told ours (no
  /proc, or its leader gone) is left alone, neither adopted nor killed.
* A rental over here (not assigned, its log shipped to the end, no process of its group alive) has its
  directory removed, its working directory with it (`cleanup.py`): the next workload on the host finds no
  other tenant's files, and the disk does not fill with every rental's.
* On exit the workloads keep running (they are adopted on restart) unless `stop_workloads_on_exit`; an agent
  whose node key is refused and that cannot register again (its node removed, re-owned or joined by another
  agent) stops them all before it exits, so none runs on, unbilled, beside the node's next agent's.
* Commands the answer lists (`suanli exec`) run beside their rental's workload (`execs.py`); while one runs,
  the pause between steps checks it every 0.2 s, so its end is told without waiting for the next beat.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tenacity import Retrying, retry_if_exception_type, stop_when_event_set, wait_exponential

from suanli.agent.assignment import Assignment
from suanli.agent.cleanup import sweep_rentals
from suanli.agent.execs import POLL_S as EXEC_POLL_S
from suanli.agent.execs import ExecRunner
from suanli.agent.executors import (
    Executor,
    ExecutorError,
    ProcessExecutor,
    Workload,
    WorkloadSpec,
    read_notice_deadline,
    write_nodes,
    write_notice,
)
from suanli.agent.local import Local
from suanli.agent.log_shipping import read_log_base, ship_log
from suanli.agent.orphans import (
    EXIT_UNKNOWN,
    Orphan,
    adopt,
    drop_orphan,
    ended_away,
    find_orphans,
    forget,
    moved_orphans,
)
from suanli.agent.probe import GpuProbe, HostInventory
from suanli.agent.restart import Outcome, RestartPolicy, RestartTracker
from suanli.agent.workloads import workload_spec
from suanli.client import BAD_RESPONSE, ApiError, Client, ServerUnreachable
from suanli.domain.errors import SuanliError
from suanli.domain.plan import Slice
from suanli.wire.agent_schemas import (
    AssignmentResponse,
    GpuTelemetryReport,
    HeartbeatRequest,
    MigInstanceReport,
    MigLayoutReport,
    WorkloadReportBody,
)

log = logging.getLogger(__name__)
STATE_FILE = "agent.json"
LOCK_FILE = "agent.lock"  # held by the agent that runs on this work dir
MAX_BACKOFF_S = 5.0
MIG_PROBE_S = 30.0  # how often the heartbeat probes the host's MIG instances again (made by hand meanwhile)
MIN_WAKE_S = 0.05  # the shortest pause between wakes (a deadline already passed does not spin the loop)
# how often a pause looks for a workload that has exited: its end is told then, not at the next heartbeat, so
# its billing stops and its GPUs go to the next rental (a preemptor waiting on it) within this of its exit
EXIT_POLL_S = 0.5


class AgentError(SuanliError):
    """The agent cannot go on: no saved key and no usable join token."""


class AgentRunner:
    def __init__(
        self,
        server_url: str | Sequence[str],
        probe: GpuProbe,
        work_dir: Path,
        *,
        join_token: str | None = None,
        executor: Executor | None = None,
        interval_s: float | None = None,
        grace_s: float = 5.0,
        stop_workloads_on_exit: bool = False,
        client_factory: Callable[[str, str | None], Client] | None = None,
        advertise_host: str | None = None,
        expected_node: str | None = None,
    ) -> None:
        # the platform's servers (one, or several on one database): the agent moves on when one is unreachable
        urls = [server_url] if isinstance(server_url, str) else list(server_url)
        self.server_urls = tuple(dict.fromkeys(url.rstrip("/") for url in urls))
        if not self.server_urls:
            raise AgentError("no server URL")
        self.server_index = 0
        self.probe, self.work_dir, self.join_token = probe, work_dir, join_token
        self.executor = executor or ProcessExecutor(work_dir)
        self.fixed_interval_s = interval_s
        self.interval_s = interval_s or 5.0
        self.server_offset = timedelta(0)  # the server's clock less this host's, as its last answer said
        self.grace_s, self.stop_workloads_on_exit = grace_s, stop_workloads_on_exit
        # with a server to move to, a hung one is left after one try of a few seconds, well inside the
        # heartbeat timeout (3 intervals) after which the others' leader marks this node down
        several = len(self.server_urls) > 1
        self._client_factory = client_factory or (
            lambda url, key: Client(url, key, timeout_s=4 if several else 10, retries=1 if several else 3)
        )
        self._node_key: str | None = None
        self.inventory: HostInventory = probe.inventory()
        self.mig_probed_at = time.monotonic()  # when `inventory` was last probed (its MIG instances)
        self.advertise_host = advertise_host  # registered as its host name: what peers of a rental reach
        self.node: str | None = None
        self.expected_node = expected_node  # the declared node it runs as: a work dir of another is refused
        self._lock: int | None = None  # the work dir's lock, held while `run` runs
        self.local: dict[str, Local] = {}
        self.orphans: dict[str, Orphan] = find_orphans(work_dir)
        self.unremovable: set[str] = set()  # rentals over here whose directory could not all be removed
        self._client: Client | None = None
        self.execs = ExecRunner(self.executor, work_dir)  # `suanli exec` commands in running workloads

    # --- the loop -------------------------------------------------------------------------------------

    def run(self, stopping: threading.Event) -> None:
        """Register (or reuse the saved key), then step every interval until `stopping` is set."""
        self._hold_work_dir()
        self._connect(stopping)
        failures = 0
        while not stopping.is_set():
            try:
                self.step()
                failures = 0
                pause = self.interval_s
            except ServerUnreachable as error:
                self.poll()  # the server cannot be asked: deadlines as last told
                failures += 1
                pause = 0.0 if self._next_server() else self._backoff(failures)
                log.warning("server unreachable (%s); workloads keep running; retry in %.1f s", error, pause)
            except ApiError as error:
                self.poll()  # no answer this step: deadlines as last told
                if error.status == 401:
                    log.warning("the server refused the node key; registering again")
                    self._client = None
                    self._register_or_give_up(stopping)
                    pause = 0
                elif error.code == BAD_RESPONSE:
                    failures += 1
                    pause = 0.0 if self._next_server() else self._backoff(failures)
                    log.error(UNREADABLE_ANSWER, error, pause)
                elif _transient(error):
                    failures += 1
                    pause = 0.0 if self._next_server() else self._backoff(failures)
                    log.warning("server error (%s); workloads keep running; retry in %.1f s", error, pause)
                else:
                    raise
            self._pause(stopping, pause)
        self.shutdown()

    def _pause(self, stopping: threading.Event, pause_s: float) -> None:
        """Wait `pause_s` (or until `stopping`), checking running `exec` commands meanwhile, so one's end is
        told within `execs.POLL_S`, not at the next heartbeat; ending at a notice deadline, so the next
        step asks the server (a notice withdrawn at the last moment holds) and kills then, not up to a
        heartbeat after it; and ending once a workload has exited, so the next step tells its end within
        `EXIT_POLL_S` of it (billed to then, its GPUs free for the next rental)."""
        end = time.monotonic() + pause_s
        while not stopping.is_set() and (left := end - time.monotonic()) > 0:
            watching = bool(self.execs.running or self.execs.forwards) and self._client is not None
            kill_in = self._next_kill_in_s()
            running = self._running_workloads()
            wait = min(
                left,
                EXEC_POLL_S if watching else left,
                left if kill_in is None else kill_in,
                EXIT_POLL_S if running else left,
            )
            stopping.wait(max(wait, MIN_WAKE_S))
            if kill_in is not None and kill_in <= wait:
                return  # a deadline: the step asks the server, then kills
            if any(not workload.poll().running for workload in running):
                return  # an exit: the step tells the server now
            if watching and self._client is not None:
                with contextlib.suppress(SuanliError, OSError):
                    self.execs.poll(self._client)

    def _running_workloads(self) -> list[Workload]:
        """The workloads this agent runs and has not seen end."""
        return [
            local.workload
            for local in self.local.values()
            if local.workload is not None and local.state == "running"
        ]

    def _next_kill_in_s(self) -> float | None:
        """Seconds until the earliest notice deadline of a workload running here (None: none has one)."""
        deadlines = [
            local.noticed_until
            for local in self.local.values()
            if local.noticed_until is not None and local.workload is not None and local.state == "running"
        ]
        if not deadlines:
            return None
        return max((min(deadlines) - self._server_now()).total_seconds(), 0.0)

    def _server_now(self) -> datetime:
        """Now on the server's clock (as its last answer put it): its notice deadlines are counted on it."""
        return datetime.now(UTC) + self.server_offset

    @property
    def server_url(self) -> str:
        """The server this agent talks to now."""
        return self.server_urls[self.server_index]

    def _next_server(self) -> bool:
        """Move to the next server (with the same node key), once around the list: False when the list has
        come round to the first again (the caller backs off) or there is no other."""
        if len(self.server_urls) < 2:
            return False
        self.server_index = (self.server_index + 1) % len(self.server_urls)
        if self._client is not None and self._node_key is not None:
            self._client.close()
            self._client = self._client_factory(self.server_url, self._node_key)
        log.warning("moving to server %s", self.server_url)
        return self.server_index != 0

    def _step_grace_s(self) -> float:
        """The SIGTERM-to-SIGKILL grace of stops made inside a step (a shrink, a resize, a release): at most
        one heartbeat interval (1 s at least), since no heartbeat goes out while the step waits; a longer
        `--grace` held heartbeats past the server's timeout, which marked the node down and ended every
        rental on it, the preemptor just placed there too. The agent's own shutdown gives the full grace."""
        return min(self.grace_s, max(1.0, self.interval_s))

    def _backoff(self, failures: int) -> float:
        """The pause before the next try after `failures` failed steps in a row: grows, capped."""
        return min(MAX_BACKOFF_S, 0.2 * 2**failures, self.interval_s * 2)

    def step(self) -> None:
        self.poll(kill=False)
        self.ship_logs()
        client = self._require_client()
        self.execs.poll(client)
        reports = self.reports()
        answer = client.heartbeat(
            HeartbeatRequest(
                workloads=reports,
                telemetry=self._telemetry(),
                runs_images=self.executor.runs_images,
                mig_layouts=self._mig_layouts(),  # probes the host again every MIG_PROBE_S
                gpu_models=[gpu.model_name for gpu in self.inventory.gpus],
            )
        )
        self._remove_reported_records({report.rental_id for report in reports})
        if answer.server_time is not None:  # how far this host's clock is off the server's
            self.server_offset = answer.server_time - datetime.now(UTC)
        if self.fixed_interval_s is None:
            self.interval_s = answer.heartbeat_interval_s
        self.reconcile(answer.assignments)
        self.poll()  # deadlines as the answer left them: a notice withdrawn by now is not killed
        self.execs.end_with_rentals({r for r, local in self.local.items() if local.state == "running"})
        self.execs.start(client, answer.execs, self._running_spec)

    def _running_spec(self, rental_id: str) -> WorkloadSpec | None:
        """The spec of the rental's workload running here (what an `exec` runs beside), or None; for a
        rental that holds its GPUs and runs nothing, its directories are made ready first (ExecutorError
        when this executor cannot run commands in it)."""
        local = self.local.get(rental_id)
        if local is None or local.state != "running" or local.assignment is None:
            return None
        held = local.workload is None
        if held and local.assignment.runs_workload:
            return None  # its workload has not started here
        try:
            spec = workload_spec(local.assignment, self.inventory, self.executor)
        except SuanliError:
            return None
        if held:
            self.executor.prepare(spec)
        return spec

    def shutdown(self) -> None:
        if self.stop_workloads_on_exit:
            running = [w for w in self.local.values() if w.workload is not None and w.state == "running"]
            _stop_together([local.workload for local in running], self.grace_s)
            for local in running:
                local.state = "stopped"
            with contextlib.suppress(SuanliError, ApiError, ServerUnreachable, OSError):
                self.ship_logs()
        if self._client is not None:
            self._client.close()

    # --- steps ----------------------------------------------------------------------------------------

    def poll(self, kill: bool = True) -> None:
        """Follow each workload: its exit (a restart under on-failure), and, with `kill`, its notice deadline
        reached (`step` kills only after the heartbeat, so a notice withdrawn at the last moment holds)."""
        for local in self.local.values():
            if local.workload is None or local.state != "running":
                continue
            now = self._server_now()
            if kill and local.noticed_until is not None and now >= local.noticed_until:
                local.workload.kill()
                local.state, local.exit_code, local.message = "stopped", None, "killed at the notice deadline"
                continue
            status = local.workload.poll()
            if status.running:
                continue
            if status.exit_code is None:  # adopted, and its supervisor died with it: nobody saw how it ended
                local.state = "stopped" if local.stop_requested else "failed"
                local.message = EXIT_UNKNOWN
                continue
            outcome, local.tracker = local.tracker.on_exit(status.exit_code, stopped=local.stop_requested)
            together = local.assignment is not None and local.assignment.restarts_together
            if outcome is Outcome.RESTART and together:
                outcome = Outcome.FAILED  # reported: the server restarts every node's part together
            if outcome is Outcome.RESTART and local.assignment is not None:
                log.info("%s: exit %s, restart %d", local.rental_id, status.exit_code, local.tracker.restarts)
                local.restarted_here, local.failed_exit_code = local.tracker.restarts, status.exit_code
                # restarted here alone (one node): the workload counts this agent's restarts
                self._launch(replace(local.assignment, attempt=local.tracker.restarts), local)
                continue
            local.state, local.exit_code = _REPORTED[outcome], status.exit_code
        _note_exits(self.local.values())

    def ship_logs(self) -> None:
        client = self._require_client()
        for local in self.local.values():
            if local.log_file is None or not local.log_file.is_file():
                continue
            local.log_behind = ship_log(client, local, local.log_file)

    def reports(self) -> list[WorkloadReportBody]:
        return [
            WorkloadReportBody(
                rental_id=local.rental_id,
                state=local.state,  # type: ignore[arg-type]
                exit_code=local.exit_code,
                message=local.message[:500],
                attempt=local.attempt,
                placement=local.placement,
                restarts=local.restarted_here,
                failed_exit_code=local.failed_exit_code,
                ran_s=_seconds_since(local.launched_at),
                since_exit_s=_seconds_since(local.exited_at),
            )
            for local in self.local.values()
        ]

    def reconcile(self, assignments: list[AssignmentResponse]) -> None:
        wanted = {a.rental_id: a for a in assignments}
        ending: list[Workload] = []  # no longer assigned, with no notice: SIGTERM, one grace, then SIGKILL
        for rental_id in [r for r in self.local if r not in wanted]:
            local = self.local[rental_id]
            if local.state == "running":  # a workload, or a reservation that runs nothing
                log.info("%s: no longer assigned; ending its run here", rental_id)
                noticed = local.noticed_until is not None or local.trim_noticed is not None
                if local.workload is not None and noticed:
                    local.workload.kill()  # it had its notice (and its deadline has come)
                elif local.workload is not None:  # its gang failed or lost a node, or a shrink released
                    ending.append(local.workload)  # this one: it may flush its output, as torchrun's are
                local.state, local.message = "stopped", "no longer assigned to this node"
                local.unassigned = True
                continue  # reported once more, so the server ends the run here (a shrink released the node)
            if local.log_behind:
                continue  # the rest of its log goes out first, MAX_CHUNKS_PER_STEP a step
            del self.local[rental_id]
        _stop_together(ending, self._step_grace_s())
        for rental_id in [r for r in self.orphans if r not in wanted or wanted[r].action == "stop"]:
            drop_orphan(rental_id, self.orphans.pop(rental_id), self.executor)
        pool = getattr(self.executor, "uids", None)  # each rental's own uid (process executor)
        kept = {*wanted, *self.local, *self.orphans}
        removed, failed = sweep_rentals(self.executor.rentals_dir, kept, pool)
        for rental_id in removed:
            log.info("%s: ended here; its directory is removed", rental_id)
        for rental_id in set(failed) - self.unremovable:  # said once, tried again every step
            log.warning("%s: ended here, but its directory could not all be removed", rental_id)
        self.unremovable = set(failed)
        self._stop_and_restart(assignments)
        for assignment in assignments:
            local = self.local.get(assignment.rental_id)
            if local is not None and assignment.placement > local.placement and not local.unassigned:
                self._replaced(local)
            if local is None or local.unassigned or assignment.placement > local.placement:
                local = self._start(assignment)  # new here, assigned here again, or placed here again
            if assignment.action == "stop":
                if local.state == "running":
                    local.state = "stopped"
            elif assignment.notice_deadline is not None and assignment.notice_keeps_gpus is not None:
                self._trim_notice(
                    local,
                    assignment.notice_deadline,
                    assignment.notice_keeps_gpus,
                    assignment.notice_releases_node,
                )
            elif assignment.notice_deadline is None and local.trim_noticed is not None:
                local.trim_noticed = None  # trimmed (its workload restarts on what it kept) or withdrawn
                self.executor.paths(local.rental_id).notice_file.unlink(missing_ok=True)
            elif assignment.notice_deadline is not None and local.noticed_until is None:
                if local.workload is not None and local.state == "running":
                    local.stop_requested = True
                    notice_file = self.executor.paths(local.rental_id).notice_file
                    if read_notice_deadline(notice_file) != assignment.notice_deadline:
                        # (adopted: told already)
                        local.workload.notice(assignment.notice_deadline, assignment.notice_cause)
                local.noticed_until = assignment.notice_deadline
            elif assignment.notice_deadline is None and local.noticed_until is not None:
                self._withdraw_notice(local)
            elif assignment.notice_deadline is not None and assignment.notice_deadline != local.noticed_until:
                self._move_deadline(local, assignment.notice_deadline, assignment.notice_cause)

    # --- helpers --------------------------------------------------------------------------------------

    def _replaced(self, local: Local) -> None:
        """The rental was re-queued and placed on this node again: a workload of the earlier placement still
        running here (its end not seen yet) is killed before the new placement's starts."""
        if local.workload is not None and local.state == "running":
            log.info("%s: placed here again; ending its earlier run", local.rental_id)
            local.workload.kill()
        self.executor.paths(local.rental_id).notice_file.unlink(missing_ok=True)

    def _trim_notice(self, local: Local, deadline: datetime, keeps_gpus: int, released: bool) -> None:
        """A trim's notice: the notice file says how many GPUs the rental runs on with after `deadline`, and
        whether this node is the one it gives up; no signal and no kill (the workload restarts on its new
        GPUs when the server changes its slices; a node given up is no longer assigned)."""
        if local.trim_noticed == deadline:
            return
        log.info("%s: trimmed at %s to %d GPUs", local.rental_id, deadline.isoformat(), keeps_gpus)
        path = self.executor.paths(local.rental_id).notice_file
        write_notice(path, local.rental_id, deadline, keeps_gpus, released=released)
        local.trim_noticed = deadline

    def _move_deadline(self, local: Local, deadline: datetime, cause: str | None) -> None:
        """The notice stands with another deadline (a notice given anew for another cause): the notice file
        says the new one, and the workload is killed then, not signalled again."""
        log.info("%s: notice deadline moved to %s", local.rental_id, deadline.isoformat())
        local.noticed_until = deadline
        if local.workload is not None and local.state == "running":
            write_notice(
                self.executor.paths(local.rental_id).notice_file, local.rental_id, deadline, cause=cause
            )

    def _withdraw_notice(self, local: Local) -> None:
        """The server withdrew the notice (its preemptor left): the workload is not killed at the deadline,
        its notice file goes, and, still running, it is no longer being stopped (its exits follow its
        restart policy again)."""
        log.info("%s: preemption notice withdrawn", local.rental_id)
        local.noticed_until = None
        if local.state == "running":
            local.stop_requested = False
        self.executor.paths(local.rental_id).notice_file.unlink(missing_ok=True)

    def _start(self, response: AssignmentResponse) -> Local:
        assignment = _assignment(response)
        # the restarts an earlier agent process made count: max_restarts holds across an agent's restart
        tracker = RestartTracker(assignment.restart, response.restarts)
        local = Local(response.rental_id, None, tracker, assignment, None)
        local.attempt, local.restarted_here = assignment.attempt, response.restarts
        local.placement = response.placement
        self.local[response.rental_id] = local
        if response.action == "stop":
            return local
        orphan = self.orphans.pop(response.rental_id, None)
        if orphan is not None and not orphan.alive:
            log.info("%s: its workload ended while the agent was away; reporting its end", response.rental_id)
            local.state, local.exit_code, local.message = ended_away(orphan.ended)
            local.log_file = self.executor.paths(response.rental_id).log_file
            local.log_base = read_log_base(self.executor.paths(response.rental_id))
            local.stale_record = orphan.record
            return local
        if orphan is not None:  # on its assigned devices: one moved was stopped already (_stop_and_restart)
            log.info(
                "%s: adopting the workload an earlier agent started (group %d)",
                response.rental_id,
                orphan.pgid,
            )
            local.workload = adopt(response.rental_id, orphan, self.executor)
            local.log_file = self.executor.paths(response.rental_id).log_file
            local.log_base = read_log_base(self.executor.paths(response.rental_id))
            local.log_offset = 0  # the server tells the stored size at the first upload
            self._write_nodes(assignment)  # its nodes may have changed meanwhile too
            return local
        if not assignment.runs_workload:  # a reservation: the GPUs are held, nothing runs
            local.message = "no command or image: the GPUs are held until the rental is stopped"
            return local
        self._launch(assignment, local)
        return local

    def _stop_and_restart(self, assignments: list[AssignmentResponse]) -> None:
        """Stop at once, within one grace, every workload the answer stops and every one that must restart
        on other GPUs (resized here, or while no agent ran) or because its rental restarted on all its nodes
        (a rank failed somewhere), then start the latter again."""
        again = [
            local
            for response in assignments
            if response.action == "run" and response.notice_deadline is None
            for local in [self.local.get(response.rental_id)]
            if local is not None
            and not local.unassigned
            and response.placement <= local.placement  # placed here again: started anew (reconcile)
            and response.attempt > local.attempt
        ]
        for local in again:
            local.assignment = _assignment(self._response(assignments, local.rental_id))
            local.attempt = local.assignment.attempt
            log.info("%s: restarting on all its nodes (restart %d)", local.rental_id, local.attempt)
        orphaned = [
            _assignment(response)
            for response in assignments
            if response.action != "stop" and response.rental_id in self.orphans
        ]
        moved = moved_orphans(self.orphans, orphaned, self.inventory, self.executor)
        resized = [
            local
            for response in assignments
            if response.action == "run" and response.notice_deadline is None
            for local in [self.local.get(response.rental_id)]
            if local is not None
            and not local.unassigned
            and response.placement <= local.placement
            and self._follow_resize(local, _assignment(response))
        ]
        halted = [
            local
            for response in assignments
            if response.action == "stop"
            for local in [self.local.get(response.rental_id)]
            if local is not None and local.workload is not None and local.state == "running"
        ]
        running_again = [local for local in again if local.workload is not None and local.state == "running"]
        for local in resized + halted + running_again:
            local.stop_requested = True
        workloads = [adopt(r, self.orphans.pop(r), self.executor) for r in moved]
        stopping = resized + halted + running_again
        _stop_together([*workloads, *(local.workload for local in stopping)], self._step_grace_s())
        for local in [*resized, *again]:
            local.stop_requested = False
            local.exit_code, local.message = None, ""
            self._restart(local)
        if halted:
            self.poll()

    def _restart(self, local: Local) -> None:
        """Start a rental's workload again, on its new GPUs if resized (a reservation just holds them)."""
        if local.assignment is not None and local.assignment.runs_workload:
            self._launch(local.assignment, local)
        else:
            local.workload, local.state = None, "running"

    @staticmethod
    def _response(assignments: list[AssignmentResponse], rental_id: str) -> AssignmentResponse:
        return next(response for response in assignments if response.rental_id == rental_id)

    def _remove_reported_records(self, reported: set[str]) -> None:
        """Remove the records of runs that ended while no agent ran once the server has their end, so a later
        agent process does not report them again."""
        for local in self.local.values():
            if local.stale_record is not None and local.rental_id in reported:
                forget(local.stale_record)
                local.stale_record = None

    def _follow_resize(self, local: Local, assignment: Assignment) -> bool:
        """A rental resized since it started here: new nodes are written to its nodes file; True when it has
        new GPUs on this host, so a running workload must restart with them (a process cannot gain or lose
        GPUs); one that ended stays ended."""
        before = local.assignment
        if before is None or assignment == before:
            return False
        local.assignment = assignment
        if local.workload is None or local.state != "running":
            return False
        if (assignment.peers, assignment.node_rank) != (before.peers, before.node_rank):
            self._write_nodes(assignment)
        if assignment.slices == before.slices:
            return False
        was = ", ".join(str(s.gpu_index) for s in before.slices)
        now = ", ".join(str(s.gpu_index) for s in assignment.slices)
        log.info("%s: GPUs changed from [%s] to [%s]; restarting the workload", local.rental_id, was, now)
        return True

    def _write_nodes(self, assignment: Assignment) -> None:
        if assignment.peers:
            path = self.executor.paths(assignment.rental_id).nodes_file
            write_nodes(path, assignment)

    def _launch(self, assignment: Assignment, local: Local) -> None:
        paths = self.executor.paths(assignment.rental_id)
        if paths.log_file.exists() and paths.log_file.stat().st_size > 0:
            local.log_base = read_log_base(paths)  # the file goes on from where its earlier run left it
        else:  # a new file: placed here before, the server may hold an earlier placement's output
            paths.log_base_file.unlink(missing_ok=True)
            local.log_base = None if local.placement > 1 else 0
        try:
            self._make_mig_devices(assignment)
            spec = workload_spec(assignment, self.inventory, self.executor)
            self._write_nodes(assignment)
            local.workload = self.executor.launch(spec)
            local.launched_at = time.monotonic()
            local.log_file = self.executor.paths(assignment.rental_id).log_file
            local.state = "running"
        except SuanliError as error:
            log.warning("%s: cannot start: %s", assignment.rental_id, error)
            local.workload, local.state, local.message = None, "failed", str(error)
            local.exit_code = error.exit_code if isinstance(error, ExecutorError) else None

    def _make_mig_devices(self, assignment: Assignment) -> None:
        """Make the MIG instances the placement chose that this host does not have yet (the scheduler may
        place a slice where an instance must first be created: a repartition), then probe again."""
        made = False
        for piece in assignment.slices:
            if piece.mig_profile is None or piece.mig_start is None:
                continue
            gpu = self.inventory.gpu(piece.gpu_index)
            if any(
                m.profile == piece.mig_profile and m.start_slot == piece.mig_start for m in gpu.mig_devices
            ):
                continue
            held = {
                (s.mig_start, s.mig_profile)
                for other in self.local.values()
                if other.state == "running" and other.assignment is not None
                for s in other.assignment.slices
                if s.gpu_index == piece.gpu_index and s.mig_profile is not None and s.mig_start is not None
            }
            held |= {(m.start_slot, m.profile) for m in gpu.mig_devices if m.processes}  # someone's, running
            log.info(
                "%s: making MIG %s at slot %d on GPU %d",
                assignment.rental_id,
                piece.mig_profile,
                piece.mig_start,
                piece.gpu_index,
            )
            self.probe.make_mig_device(piece.gpu_index, (piece.mig_start, piece.mig_profile), held)
            made = True
        if made:
            self.inventory = self.probe.inventory()

    def _mig_layouts(self) -> list[MigLayoutReport] | None:
        """The MIG instances of every GPU in MIG mode, probed again at most every `MIG_PROBE_S` (instances
        made by hand show up), for the scheduler to place slices on; busy: processes that none of this
        host's rentals was given run on it (not suanli's: never placed on, never destroyed). None on a host
        without MIG."""
        now = time.monotonic()
        if now - self.mig_probed_at >= MIG_PROBE_S:
            try:
                self.inventory = self.probe.inventory()
            except SuanliError as error:
                log.warning("MIG probe failed: %s", error)
            self.mig_probed_at = now
        ours = {
            (piece.gpu_index, piece.mig_start, piece.mig_profile)
            for local in self.local.values()
            if local.assignment is not None
            for piece in local.assignment.slices
        }
        layouts = [
            MigLayoutReport(
                index=gpu.index,
                instances=[
                    MigInstanceReport(
                        profile=m.profile,
                        start_slot=m.start_slot,
                        busy=m.processes > 0 and (gpu.index, m.start_slot, m.profile) not in ours,
                    )
                    for m in gpu.mig_devices
                ],
            )
            for gpu in self.inventory.gpus
            if gpu.mig_mode
        ]
        return layouts or None

    def _telemetry(self) -> list[GpuTelemetryReport]:
        try:
            readings = self.probe.telemetry()
        except SuanliError as error:
            log.warning("telemetry failed: %s", error)
            return []
        return [
            GpuTelemetryReport(
                index=r.index,
                utilization_pct=r.utilization_pct,
                memory_used_mib=r.memory_used_mib,
                power_w=r.power_w,
            )
            for r in readings
        ]

    def _hold_work_dir(self) -> None:
        """One agent per work dir: a second adopted the first's workloads, shipped their output twice and
        killed three tenants' rentals when it stopped (AgentError when another holds it)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.work_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            raise AgentError(
                f"another agent runs on {self.work_dir} (it holds {LOCK_FILE}): one agent per work dir"
            ) from None
        self._lock = descriptor

    def _connect(self, stopping: threading.Event) -> None:
        saved = self._load_state()
        if saved is not None:
            if self.expected_node is not None and saved["node"] != self.expected_node:
                raise AgentError(
                    f"{self.work_dir} holds the node key of {saved['node']}, not of {self.expected_node}: "
                    "give each node's agent a --work-dir of its own"
                )
            self.node = saved["node"]
            if (
                saved.get("server") not in self.server_urls
            ):  # another server of the platform: the key is the node's
                log.warning(
                    "the node key was saved with %s; using it with %s", saved.get("server"), self.server_url
                )
                self._save_state(saved["node"], saved["node_key"])
            self._node_key = saved["node_key"]
            self._client = self._client_factory(self.server_url, saved["node_key"])
            return
        self._register(stopping, force=False)

    def _register_or_give_up(self, stopping: threading.Event) -> None:
        """Register again after the server refused the node key; when that is refused too (the node was
        removed, re-owned or joined by another agent), stop every workload and command here before exiting:
        the node is no longer this agent's, and a workload left running would run unbilled on GPUs let to
        others, or beside its copy started by the node's new agent."""
        try:
            self._register(stopping, force=True)
        except AgentError:
            log.error("this agent no longer holds the node; stopping its workloads before exiting")
            self._give_up_workloads()
            raise

    def _give_up_workloads(self) -> None:
        """Stop the workloads, orphans and commands of this agent (the node key is gone: none is reported)."""
        running = [w for w in self.local.values() if w.workload is not None and w.state == "running"]
        _stop_together([local.workload for local in running], self.grace_s)
        for local in running:
            local.state = "stopped"
        for rental_id in list(self.orphans):
            drop_orphan(rental_id, self.orphans.pop(rental_id), self.executor)
        self.execs.end_with_rentals(())

    def _register(self, stopping: threading.Event, *, force: bool) -> None:
        if not self.join_token:
            raise AgentError("no saved node key for this server and no join token: pass --token")
        token = self.join_token
        inventory = self.inventory.to_dict()
        if self.advertise_host:
            inventory["hostname"] = self.advertise_host
        try:
            for attempt in Retrying(
                retry=retry_if_exception_type(ServerUnreachable),
                wait=wait_exponential(multiplier=0.2, max=MAX_BACKOFF_S),
                stop=stop_when_event_set(stopping),
                before_sleep=lambda _: self._next_server(),  # each try to the next server
                reraise=True,
            ):
                with attempt:
                    anonymous = self._client_factory(self.server_url, None)
                    try:
                        answer = anonymous.register_agent(token, inventory)
                    finally:
                        anonymous.close()
        except ApiError as error:
            raise AgentError(f"registration refused: {error.message}") from None
        self.node = answer.node
        if self.fixed_interval_s is None:
            self.interval_s = answer.heartbeat_interval_s
        self._save_state(answer.node, answer.node_key)
        self._node_key = answer.node_key
        self._client = self._client_factory(self.server_url, answer.node_key)
        log.info("registered as node %s", answer.node)

    def _require_client(self) -> Client:
        if self._client is None:
            raise AgentError("not registered")
        return self._client

    def _load_state(self) -> dict[str, str] | None:
        path = self.work_dir / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not data.get("node_key") or not data.get("node"):
            return None
        return data

    def _save_state(self, node: str, node_key: str) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        path = self.work_dir / STATE_FILE
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"server": self.server_url, "node": node, "node_key": node_key}, handle)


def _stop_together(workloads: Sequence[Workload | None], grace_s: float) -> None:
    """Stop workloads side by side (SIGTERM to all, one grace, SIGKILL to what is left), so a step waits one
    grace, not the sum of them: a heartbeat held that long gets the node marked down."""
    present = [workload for workload in workloads if workload is not None]
    if len(present) <= 1:
        for workload in present:
            workload.stop(grace_s)
        return
    with ThreadPoolExecutor(max_workers=len(present)) as pool:
        list(pool.map(lambda workload: workload.stop(grace_s), present))


TRANSIENT_STATUSES = frozenset({408, 429})
# an answer this agent cannot read is no passing fault: retrying keeps the workloads running, but nothing the
# server asks (new rentals, stops, notices) is done until the agent is upgraded, so each try says so loudly
UNREADABLE_ANSWER = (
    "cannot read the server's answer (%s): this agent is too old for the server (more than one release "
    "behind) or the server is not suanli; upgrade the agent. Workloads keep running, but no new rental, stop "
    "or notice is carried out until then; retry in %.1f s"
)


def _note_exits(locals_: Iterable[Local]) -> None:
    """Stamp when each workload was first seen ended (cleared when it runs again: a restart): its reports
    say how long ago that was (`since_exit_s`), so a run whose end reaches the server late is billed to its
    exit; every path that ends a workload is followed by a poll, which calls this."""
    for local in locals_:
        if local.state == "running":
            local.exited_at = None
        elif local.exited_at is None:
            local.exited_at = time.monotonic()


def _seconds_since(monotonic_s: float | None) -> float | None:
    """Seconds (to the millisecond) since a moment on this host's monotonic clock; None for none."""
    return None if monotonic_s is None else round(time.monotonic() - monotonic_s, 3)


def _transient(error: ApiError) -> bool:
    """Whether an answer says "try again later" (a server fault, a timeout, a rate limit), not "never"."""
    return error.status >= 500 or error.status in TRANSIENT_STATUSES


_REPORTED = {Outcome.SUCCEEDED: "succeeded", Outcome.FAILED: "failed", Outcome.STOPPED: "stopped"}


def _assignment(response: AssignmentResponse) -> Assignment:
    policy = (
        RestartPolicy.on_failure(response.max_restarts)
        if response.restart == "on-failure" and response.max_restarts > 0
        else RestartPolicy.never()
    )
    return Assignment(
        rental_id=response.rental_id,
        slices=tuple(
            Slice(s.gpu_index, s.milli, s.memory_mib, s.mig_profile, s.mig_start) for s in response.slices
        ),
        command=tuple(response.command),
        env=dict(response.env),
        image=response.image,
        restart=policy,
        peers=tuple(response.peers),
        node_rank=response.node_rank,
        attempt=response.attempt,
        placement=max(response.placement, 1),
        master_port=response.master_port,
    )
