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

`AgentRunner` here holds the loop and each step (poll, ship logs, reports, heartbeat, reconcile); its parts
live beside it, each a mixin over it: `server_link.py` (the work dir's lock, the node key, registering, the
servers), `workload_control.py` (starting, stopping and restarting workloads, their notice files) and
`host_gpus.py` (MIG instances made, MIG layouts and telemetry for the heartbeat).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from suanli.agent.cleanup import sweep_rentals
from suanli.agent.execs import POLL_S as EXEC_POLL_S
from suanli.agent.execs import ExecRunner
from suanli.agent.executors import Executor, ProcessExecutor, Workload, WorkloadSpec, read_notice_deadline
from suanli.agent.host_gpus import HostGpus
from suanli.agent.local import Local
from suanli.agent.log_shipping import ship_log
from suanli.agent.orphans import EXIT_UNKNOWN, Orphan, drop_orphan, find_orphans
from suanli.agent.probe import GpuProbe, HostInventory
from suanli.agent.restart import Outcome
from suanli.agent.server_link import MAX_BACKOFF_S, AgentError, ServerLink
from suanli.agent.workload_control import WorkloadControl, stop_together
from suanli.agent.workloads import workload_spec
from suanli.client import BAD_RESPONSE, ApiError, Client, ServerUnreachable
from suanli.domain.errors import SuanliError
from suanli.wire.agent_schemas import AssignmentResponse, HeartbeatRequest, WorkloadReportBody

log = logging.getLogger(__name__)
MIN_WAKE_S = 0.05  # the shortest pause between wakes (a deadline already passed does not spin the loop)
# how often a pause looks for a workload that has exited: its end is told then, not at the next heartbeat, so
# its billing stops and its GPUs go to the next rental (a preemptor waiting on it) within this of its exit
EXIT_POLL_S = 0.5


class AgentRunner(ServerLink, HostGpus, WorkloadControl):
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
            stop_together([local.workload for local in running], self.grace_s)
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
        stop_together(ending, self._step_grace_s())
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
