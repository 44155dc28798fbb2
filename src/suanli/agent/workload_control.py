"""Workloads started, stopped and restarted as the server's answer says: a launch (its log file carried on,
its nodes file written), an adopted orphan, a resize or a restart on all nodes (stopped side by side,
started again), the notice file written, moved or withdrawn, and the workloads given up with the node."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING

from suanli.agent.assignment import Assignment
from suanli.agent.executors import ExecutorError, Workload, write_nodes, write_notice
from suanli.agent.local import Local
from suanli.agent.log_shipping import read_log_base
from suanli.agent.orphans import adopt, drop_orphan, ended_away, forget, moved_orphans
from suanli.agent.restart import RestartPolicy, RestartTracker
from suanli.agent.workloads import workload_spec
from suanli.domain.errors import SuanliError
from suanli.domain.plan import Slice
from suanli.wire.agent_schemas import AssignmentResponse

if TYPE_CHECKING:
    from suanli.agent.runner import AgentRunner

log = logging.getLogger(__name__)


class WorkloadControl:
    """Starting, stopping and noticing workloads, a part of an `AgentRunner`."""

    def _replaced(self: AgentRunner, local: Local) -> None:
        """The rental was re-queued and placed on this node again: a workload of the earlier placement still
        running here (its end not seen yet) is killed before the new placement's starts."""
        if local.workload is not None and local.state == "running":
            log.info("%s: placed here again; ending its earlier run", local.rental_id)
            local.workload.kill()
        self.executor.paths(local.rental_id).notice_file.unlink(missing_ok=True)

    def _trim_notice(
        self: AgentRunner, local: Local, deadline: datetime, keeps_gpus: int, released: bool
    ) -> None:
        """A trim's notice: the notice file says how many GPUs the rental runs on with after `deadline`, and
        whether this node is the one it gives up; no signal and no kill (the workload restarts on its new
        GPUs when the server changes its slices; a node given up is no longer assigned)."""
        if local.trim_noticed == deadline:
            return
        log.info("%s: trimmed at %s to %d GPUs", local.rental_id, deadline.isoformat(), keeps_gpus)
        path = self.executor.paths(local.rental_id).notice_file
        write_notice(path, local.rental_id, deadline, keeps_gpus, released=released)
        local.trim_noticed = deadline

    def _move_deadline(self: AgentRunner, local: Local, deadline: datetime, cause: str | None) -> None:
        """The notice stands with another deadline (a notice given anew for another cause): the notice file
        says the new one, and the workload is killed then, not signalled again."""
        log.info("%s: notice deadline moved to %s", local.rental_id, deadline.isoformat())
        local.noticed_until = deadline
        if local.workload is not None and local.state == "running":
            write_notice(
                self.executor.paths(local.rental_id).notice_file, local.rental_id, deadline, cause=cause
            )

    def _withdraw_notice(self: AgentRunner, local: Local) -> None:
        """The server withdrew the notice (its preemptor left): the workload is not killed at the deadline,
        its notice file goes, and, still running, it is no longer being stopped (its exits follow its
        restart policy again)."""
        log.info("%s: preemption notice withdrawn", local.rental_id)
        local.noticed_until = None
        if local.state == "running":
            local.stop_requested = False
        self.executor.paths(local.rental_id).notice_file.unlink(missing_ok=True)

    def _start(self: AgentRunner, response: AssignmentResponse) -> Local:
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

    def _stop_and_restart(self: AgentRunner, assignments: list[AssignmentResponse]) -> None:
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
        stop_together([*workloads, *(local.workload for local in stopping)], self._step_grace_s())
        for local in [*resized, *again]:
            local.stop_requested = False
            local.exit_code, local.message = None, ""
            self._restart(local)
        if halted:
            self.poll()

    def _restart(self: AgentRunner, local: Local) -> None:
        """Start a rental's workload again, on its new GPUs if resized (a reservation just holds them)."""
        if local.assignment is not None and local.assignment.runs_workload:
            self._launch(local.assignment, local)
        else:
            local.workload, local.state = None, "running"

    @staticmethod
    def _response(assignments: list[AssignmentResponse], rental_id: str) -> AssignmentResponse:
        return next(response for response in assignments if response.rental_id == rental_id)

    def _remove_reported_records(self: AgentRunner, reported: set[str]) -> None:
        """Remove the records of runs that ended while no agent ran once the server has their end, so a later
        agent process does not report them again."""
        for local in self.local.values():
            if local.stale_record is not None and local.rental_id in reported:
                forget(local.stale_record)
                local.stale_record = None

    def _follow_resize(self: AgentRunner, local: Local, assignment: Assignment) -> bool:
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

    def _write_nodes(self: AgentRunner, assignment: Assignment) -> None:
        if assignment.peers:
            path = self.executor.paths(assignment.rental_id).nodes_file
            write_nodes(path, assignment)

    def _launch(self: AgentRunner, assignment: Assignment, local: Local) -> None:
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

    def _give_up_workloads(self: AgentRunner) -> None:
        """Stop the workloads, orphans and commands of this agent (the node key is gone: none is reported)."""
        running = [w for w in self.local.values() if w.workload is not None and w.state == "running"]
        stop_together([local.workload for local in running], self.grace_s)
        for local in running:
            local.state = "stopped"
        for rental_id in list(self.orphans):
            drop_orphan(rental_id, self.orphans.pop(rental_id), self.executor)
        self.execs.end_with_rentals(())


def stop_together(workloads: Sequence[Workload | None], grace_s: float) -> None:
    """Stop workloads side by side (SIGTERM to all, one grace, SIGKILL to what is left), so a step waits one
    grace, not the sum of them: a heartbeat held that long gets the node marked down."""
    present = [workload for workload in workloads if workload is not None]
    if len(present) <= 1:
        for workload in present:
            workload.stop(grace_s)
        return
    with ThreadPoolExecutor(max_workers=len(present)) as pool:
        list(pool.map(lambda workload: workload.stop(grace_s), present))


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
