"""Node agents: join tokens, registration, heartbeats (reports in, assignments out), logs, and the reaper.

Guarantees:

* A join token names one node, is shown once, is stored as a SHA-256 digest, expires, and registers at most
  once (a conditional update decides between two agents racing with one token). Registering gives the node a
  new key (`nk_...`, stored as a digest); the node's earlier key stops working. It is refused while the
  node's agent is alive (up, heartbeating within the timeout): one node, one agent.
* A rental's state moves only along `TRANSITIONS` as its agent reports: placed -> starting -> running ->
  stopped / failed; `stopping` (asked by the API) -> stopped once the agent has stopped the workload. A
  multi-node rental fails when its workload fails on any node (the others are then stopped: SIGTERM, a
  grace, SIGKILL), and ends
  `stopped` only once it has succeeded on every node: a rank that finishes first does not end the others.
  Under `on-failure`, a failure on one node of a multi-node rental restarts the workload on all of its nodes
  together (a distributed job's ranks rendezvous again), up to the restart limit: the rental's `attempt`
  goes up, each agent restarts its part when its assignment shows it, and the ends an earlier attempt
  reports are ignored. A one-node rental's agent restarts it alone.
  A report for a rental that is not on the reporting node is ignored.
* The heartbeat answer lists every live rental placed on the node (what to run; `stop` for a stopping one):
  a workload the answer does not list is one the agent must end (reconciliation after an outage): SIGTERM
  and a grace first, unless it had a notice whose deadline came (then SIGKILL at once).
* `reap(now)`: a node whose last heartbeat is older than `missed_heartbeats` x interval is marked down and
  cordoned; each live rental on it is re-queued when its restart policy allows, else ends `lost`, its run's
  `ended_at` set to the last heartbeat (billing stops there). A node that heartbeats again is up again.
* A node whose host's GPUs, as its agent reports them (at registration, and on heartbeats that say them),
  are not the fleet's (`domain.host_check`) is cordoned with the reason kept (`gpu_mismatch`), unless it is
  cordoned already; a later report that matches lifts that cordon only.
* Outages (SLA evidence, `suanli.app.sla`): a node marked down opens an outage from its last heartbeat,
  closed when it heartbeats again; a node an operator had cordoned (maintenance) opens none.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from suanli.app.agent_records import (
    AgentNode,
    AgentUnitOfWork,
    AgentUnitOfWorkFactory,
    HeartbeatAnswer,
    JoinToken,
    NodeAssignment,
    RentalRun,
    WorkloadReport,
)
from suanli.app.coverage import pass_on_coverage
from suanli.app.errors import Conflict, Forbidden, Invalid, NotFound, Unauthorized
from suanli.app.execs import ExecService
from suanli.app.fleet import FleetCache
from suanli.app.gpu_history import record as record_gpu_minutes
from suanli.app.gpu_readings import GpuReading, gpu_readings
from suanli.app.idle_stops import stop_idle
from suanli.app.ids import digest, new_id
from suanli.app.ports import Clock, UnitOfWork, Wake
from suanli.app.records import END_STATES, LIVE_STATES, PREEMPTIBLE_STATES, Caller, Rental, RentalEvent
from suanli.app.rentals import LEFT_UNDER_NOTICE
from suanli.app.tenants import owned_rental, require_operator
from suanli.domain.billing.energy import WHOLE_GPU_MILLI, measured_interval_s, slice_power_w
from suanli.domain.host_check import gpu_mismatch
from suanli.domain.mig import MigInstance
from suanli.domain.plan import NodeAllocation

WORKLOAD_ENDED = ("succeeded", "failed", "stopped")  # a workload report that its run has ended
REPORTED_STATES = ("starting", "running", *WORKLOAD_ENDED)
RESTARTED = "restarted"  # the event of a rental's workload restarted after a failure
RESTARTED_ON_NODE = "restarted_on_node"  # its reason when a one-node rental's agent restarted it by itself
# (rental state, reported workload state) -> the rental's next state
TRANSITIONS: Mapping[tuple[str, str], str] = {
    ("placed", "starting"): "starting",
    ("placed", "running"): "running",
    ("starting", "running"): "running",
    **{(state, "succeeded"): "stopped" for state in (*PREEMPTIBLE_STATES, "stopping")},
    **{(state, "failed"): "failed" for state in PREEMPTIBLE_STATES},
    ("stopping", "failed"): "stopped",
    **{(state, "stopped"): "stopped" for state in (*PREEMPTIBLE_STATES, "stopping")},
}  # a `preempting` rental changes only in the scheduling cycle: it becomes `preempted` there
log = logging.getLogger(__name__)
MAX_LOG_READ_CHARS = 1 << 20
MAX_TOKEN_TTL_S = 7 * 24 * 3600


def next_state(current: str, reported: str) -> str | None:
    """The rental's state after its agent reports `reported`; None when the report changes nothing."""
    return TRANSITIONS.get((current, reported))


def new_join_token() -> str:
    return f"jt_{secrets.token_urlsafe(24)}"


def new_node_key() -> str:
    return f"nk_{secrets.token_urlsafe(32)}"


class AgentService:
    def __init__(
        self,
        uow: AgentUnitOfWorkFactory,
        clock: Clock,
        signal: Wake,
        cache: FleetCache,
        *,
        heartbeat_interval_s: float,
        missed_heartbeats: int,
        token_ttl_s: float,
    ) -> None:
        self.uow, self.clock, self.signal, self.cache = uow, clock, signal, cache
        self.interval_s, self.missed, self.token_ttl_s = heartbeat_interval_s, missed_heartbeats, token_ttl_s
        self.started_at = clock.now()

    @property
    def timeout_s(self) -> float:
        return self.interval_s * self.missed

    # --- tokens and registration ----------------------------------------------------------------------

    def create_token(self, caller: Caller, node: str, ttl_s: float | None = None) -> tuple[JoinToken, str]:
        """A join token for `node` (an admin: any node; a provider: only its own, so that it cannot take over
        another provider's node and be sent its tenants' workloads); the secret is returned only here."""
        require_operator(caller)
        ttl = self.token_ttl_s if ttl_s is None else ttl_s
        if not 0 < ttl <= MAX_TOKEN_TTL_S:
            raise Invalid(f"a token lives 1 s to {MAX_TOKEN_TTL_S} s", field="ttl_s")
        secret = new_join_token()
        now = self.clock.now()
        token = JoinToken(
            new_id("jtk"), node, digest(secret), caller.tenant.id, now, now + timedelta(seconds=ttl)
        )
        with self.uow() as uow:
            _, fleet = self.cache.load(uow)
            facts = next((n for n in fleet.nodes if n.name == node), None) if fleet is not None else None
            if facts is None or not uow.agents.node_exists(node):
                raise NotFound(f"no node {node} in the fleet", field="node")
            if not caller.is_admin and facts.provider != caller.tenant.name:
                raise Forbidden(
                    f"a provider key makes join tokens only for its own nodes, not {node}", field="node"
                )
            uow.agents.add_token(token)
            uow.commit()
        return token, secret

    def register(self, token_secret: str, inventory: Mapping[str, Any]) -> tuple[str, str]:
        """Spend a join token: the node's name and its new key. Refused (409, the token kept) while the node's
        agent is alive: a second agent would take the node over and start its rentals' workloads again
        beside the first one's."""
        now = self.clock.now()
        wanted = digest(token_secret)
        key = new_node_key()
        with self.uow() as uow:
            token = uow.agents.token_by_digest(wanted)
            if (
                token is None
                or not hmac.compare_digest(token.token_sha256, wanted)
                or token.used_at is not None
                or token.expires_at <= now
            ):
                raise Unauthorized("unknown, used or expired join token")
            self._check_no_live_agent(uow, token.node, now)
            if not uow.agents.use_token(token.id, now):
                raise Unauthorized("unknown, used or expired join token")
            uow.agents.put_node(token.node, digest(key), inventory, now)
            reported = _reported_models(inventory)
            changed = reported is not None and self._follow_gpus(uow, token.node, reported)
            uow.commit()
        if changed:
            self.signal()
        return token.node, key

    def _check_no_live_agent(self, uow: AgentUnitOfWork, node: str, now: datetime) -> None:
        """Conflict while `node`'s agent is up and has heartbeated within the timeout."""
        for agent in uow.agents.nodes_named([node]):
            silent_s = (now - (agent.last_heartbeat_at or agent.registered_at)).total_seconds()
            if agent.up and silent_s < self.timeout_s:
                raise Conflict(
                    f"node {node} has a live agent (last heartbeat {silent_s:.0f} s ago): stop it, or let it "
                    f"be silent for {self.timeout_s:.0f} s so that the node is marked down, before another "
                    "agent joins as the node",
                    field="token",
                )

    def authenticate(self, node_key: str | None) -> AgentNode:
        if not node_key:
            raise Unauthorized("send Authorization: Bearer <node key>")
        wanted = digest(node_key)
        with self.uow() as uow:
            node = uow.agents.node_by_key(wanted)
        if node is None or not hmac.compare_digest(node.key_sha256, wanted):
            raise Unauthorized(
                "unknown or revoked node key (a node removed from the fleet or given to another provider "
                "joins again with a new join token)"
            )
        return node

    # --- heartbeats -----------------------------------------------------------------------------------

    def heartbeat(
        self,
        node_key: str | None,
        reports: Sequence[WorkloadReport],
        telemetry: Sequence[Mapping[str, Any]],
        runs_images: bool | None = None,
        mig_layouts: Mapping[int, Sequence[MigInstance]] | None = None,
        gpu_models: Sequence[str] | None = None,
    ) -> HeartbeatAnswer:
        """Record the node alive (and whether its agent runs container images, its MIG instances and its
        GPUs' models, when it says), apply its workload reports, and answer its assignments."""
        agent = self.authenticate(node_key)
        changed = ended = False
        with self.uow() as uow:
            now = self.clock.now()
            previous = uow.agents.beat(agent.node, telemetry, now, runs_images)
            record_gpu_minutes(uow.gpu_minutes, agent.node, previous, now, telemetry)
            if mig_layouts is not None:
                changed |= uow.agents.set_mig_layouts(agent.node, mig_layouts)
            self._measure(uow, agent.node, previous, now, telemetry, reports)
            if gpu_models is not None:
                changed |= self._follow_gpus(uow, agent.node, gpu_models, agent)
            if not agent.up:
                self._back_up(uow, agent.node, now)
                changed = True
            held_here = set(uow.agents.live_rentals_on(agent.node))  # before the reports end any
            for report in reports:
                applied = self._apply(uow, agent.node, report, now, report.rental_id not in held_here)
                changed |= applied
                ended |= applied and report.state in WORKLOAD_ENDED  # a run's end: its charge is due
            changed |= bool(stop_idle(uow, agent.node, telemetry, now))
            assignments = self._assignments(uow, agent.node)
            running = {a.rental.id for a in assignments if a.action == "run"}
            execs = ExecService.for_node(uow, agent.node, running)
            uow.commit()
        if changed:
            self.signal(ended=ended)
        return HeartbeatAnswer(agent.node, self.interval_s, assignments, execs)

    def _follow_gpus(
        self,
        uow: AgentUnitOfWork,
        node_name: str,
        reported_models: Sequence[str],
        authenticated: AgentNode | None = None,
    ) -> bool:
        """Compare the host's GPUs with the fleet's node (`domain.host_check`), as Slurm drains a node whose
        GPUs are not its config's: on a mismatch the node is cordoned (unless it is already) with the
        reason kept for `GET /v1/nodes`; once they match, that cordon is lifted (an operator's drain and a
        down node's cordon stay). `authenticated`: the node as the heartbeat's authentication read it, so a
        beat that changes nothing reads nothing more. True when the node's state changed."""
        _, fleet = self.cache.load(uow)
        node = next((n for n in fleet.nodes if n.name == node_name), None) if fleet is not None else None
        if node is None:
            return False
        mismatch = gpu_mismatch(node, reported_models, self.cache.catalog)
        if authenticated is not None and mismatch == authenticated.gpu_mismatch:
            return False
        (agent,) = uow.agents.nodes_named([node_name])
        if mismatch == agent.gpu_mismatch:
            return False
        uow.agents.set_gpu_mismatch(node_name, mismatch)
        if mismatch is None:
            log.info("node %s: its host's GPUs are the fleet's again", node_name)
            if agent.cordoned_by_agent and agent.up:
                uow.fleet.set_schedulable(node_name, True)
                uow.agents.set_up(node_name, True, False)
            return True
        log.warning("node %s cordoned: %s", node_name, mismatch)
        if agent.gpu_mismatch is None and node_name not in uow.fleet.cordoned():
            uow.fleet.set_schedulable(node_name, False)
            uow.agents.set_up(node_name, agent.up, True)
        return True

    @staticmethod
    def _back_up(uow: AgentUnitOfWork, node_name: str, now: datetime) -> None:
        """A node marked down heartbeats again: up, and schedulable again if the reaper's cordon was the
        only thing keeping it out (not an operator's drain, nor GPUs that are not the fleet's)."""
        (agent,) = uow.agents.nodes_named([node_name])
        kept_out = agent.gpu_mismatch is not None
        if agent.cordoned_by_agent and not kept_out:
            uow.fleet.set_schedulable(node_name, True)
        uow.agents.set_up(node_name, True, agent.cordoned_by_agent and kept_out)
        uow.outages.close(node_name, now)  # SLA evidence: the node is back

    def _measure(
        self,
        uow: AgentUnitOfWork,
        node: str,
        previous: datetime | None,
        now: datetime,
        telemetry: Sequence[Mapping[str, Any]],
        reports: Sequence[WorkloadReport],
    ) -> None:
        """Attribute the beat's GPU power to the runs that were running since the previous beat and still are
        (`suanli.domain.billing.energy`); runs the beat reports ended are not measured for it."""
        power: dict[int, float | None] = {}
        for reading in telemetry:
            index, watts = reading.get("index"), reading.get("power_w")
            if isinstance(index, int):
                power[index] = float(watts) if isinstance(watts, int | float) else None
        if all(watts is None for watts in power.values()):
            return
        seconds = measured_interval_s(
            None if previous is None else (now - previous).total_seconds(), self.interval_s
        )
        if seconds <= 0:
            return
        ended = {r.rental_id for r in reports if r.state not in ("starting", "running")}
        for rental_id, slices in uow.agents.running_slices(node).items():
            watts = slice_power_w(slices, power)
            if rental_id not in ended and watts is not None:
                gpus = sum(milli for _, milli in slices) / WHOLE_GPU_MILLI
                uow.agents.add_energy(rental_id, node, watts * seconds, seconds, gpus * seconds)

    def _apply(
        self, uow: AgentUnitOfWork, node: str, report: WorkloadReport, now: datetime, given_up: bool
    ) -> bool:
        """Record a workload report; `given_up`: its rental no longer holds this node (a shrink, an end)."""
        if report.state not in REPORTED_STATES:
            return False
        rental = uow.rentals.get(report.rental_id)
        if rental is None or not uow.agents.had_allocation(rental.id, node):
            return False
        placement = rental.placements if report.placement is None else report.placement
        if placement != rental.placements:  # a run of an earlier placement, placed again on this node since
            return _earlier_run_reported(uow, rental.id, node, report, placement, now)
        run = uow.agents.run(rental.id, node, placement) or RentalRun(
            rental.id, node, report.state, placement=placement
        )
        ended = report.state in WORKLOAD_ENDED
        if run.ended_at is not None and not ended and not given_up:  # held here again (a gang grown back)
            run = RentalRun(rental.id, node, report.state, restarts=run.restarts, placement=placement)
        allocation = uow.rentals.allocation(rental.id) if ended and not given_up else []
        if _restarts_together(rental, allocation):
            restarts = gang_restarts(uow, rental.id)
            if report.attempt < restarts:
                return False  # the end of a run the gang has restarted since
            if self._restart_gang(uow, rental, allocation, node, report, restarts, now):
                return True
        if given_up and (run.ended_at is not None or not ended):
            return False  # a node it no longer holds: only the end of its run there is news
        if given_up and rental.state in LIVE_STATES:  # released by a shrink: the run ends, the rental goes on
            exited = _exited_at(report, run.started_at or rental.placed_at, now)
            uow.agents.put_run(replace(run, state=report.state, exit_code=report.exit_code, ended_at=exited))
            return False
        if report.restarts > run.restarts:  # only a one-node rental's agent restarts it by itself
            _restarted_here(uow, rental, node, report, report.restarts - run.restarts, now)
        started = run.started_at or _started_at(rental, report, now)
        uow.agents.put_run(
            RentalRun(
                rental.id,
                node,
                report.state,
                report.exit_code if ended else run.exit_code,
                started,
                run.ended_at or (_exited_at(report, started or rental.placed_at, now) if ended else None),
                now,
                max(
                    report.restarts, run.restarts
                ),  # an agent that restarted goes on from it (its assignment)
                placement,
            )
        )
        trimming = rental.notice_keeps is not None  # it runs on after its deadline: it ends as a running one
        if rental.state == "preempting" and ended and not trimming:
            return self._left_early(uow, rental, now)
        succeeded_here = report.state == "succeeded" and rental.state != "stopping"
        if succeeded_here and not self._all_succeeded(uow, rental):
            return False  # a gang succeeds once every node's workload has; the others run on meanwhile
        new = next_state(
            "running" if trimming and rental.state == "preempting" else rental.state, report.state
        )
        if new is None or not uow.rentals.set_state(rental.id, new, expect=(rental.state,), reason=None):
            return False
        detail = f" with exit code {report.exit_code}" if report.exit_code is not None else ""
        message = f"on {node}: workload {report.state}{detail}" + (
            f"; {report.message}" if report.message else ""
        )
        ended_by_it = _workload_ended_at(uow, rental, now) if new in END_STATES else now
        uow.rentals.add_event(rental.id, RentalEvent(ended_by_it, new, None, message))
        if new in END_STATES:
            uow.rentals.release(rental.id, at=now)
            pass_on_coverage(uow, rental, now)
        return True

    @staticmethod
    def _restart_gang(
        uow: AgentUnitOfWork,
        rental: Rental,
        allocation: Sequence[NodeAllocation],
        node: str,
        report: WorkloadReport,
        restarts: int,
        now: datetime,
    ) -> bool:
        """A rank's failure with restarts left: every node's run starts again, one attempt on; else False."""
        if report.state != "failed" or rental.state not in PREEMPTIBLE_STATES:
            return False
        if restarts >= rental.spec.max_restarts:
            return False
        for part in allocation:
            run = uow.agents.run(rental.id, part.node, rental.placements)
            started = run.started_at if run is not None else None
            seen = run.last_heartbeat_at if run is not None else None
            uow.agents.put_run(
                RentalRun(rental.id, part.node, "starting", None, started, None, seen, 0, rental.placements)
            )
        code = f" with exit code {report.exit_code}" if report.exit_code is not None else ""
        why = f"; {report.message}" if report.message else ""
        uow.rentals.add_event(
            rental.id,
            RentalEvent(
                now,
                RESTARTED,
                "workload_failed",
                f"on {node}: workload failed{code}{why}; restarting it on all {len(allocation)} nodes "
                f"({restarts + 1}/{rental.spec.max_restarts})",
            ),
        )
        return True

    @staticmethod
    def _all_succeeded(uow: AgentUnitOfWork, rental: Rental) -> bool:
        """Whether the workload has succeeded on every node the rental holds (a failure on any ends it)."""
        for allocation in uow.rentals.allocation(rental.id):
            run = uow.agents.run(rental.id, allocation.node, rental.placements)
            if run is None or run.state != "succeeded":
                return False
        return True

    @staticmethod
    def _left_early(uow: AgentUnitOfWork, rental: Rental, now: datetime) -> bool:
        """A victim under notice whose workload ended on every node: its deadline becomes now, so the next
        cycle ends it `preempted` and gives its capacity to the preemptor in one transaction; its deadline
        (where its billing ends) is when the last of them exited."""
        for allocation in uow.rentals.allocation(rental.id):
            run = uow.agents.run(rental.id, allocation.node, rental.placements)
            if run is None or run.ended_at is None:
                return False
        left_at = _workload_ended_at(uow, rental, now)
        # not killed at its deadline: it left
        if rental.notice_deadline is not None and rental.notice_deadline > left_at:
            uow.rentals.add_event(
                rental.id,
                RentalEvent(left_at, "preempting", LEFT_UNDER_NOTICE, "its workload ended under notice"),
            )
        uow.rentals.advance_deadline(rental.id, left_at)
        return True

    def _assignments(self, uow: AgentUnitOfWork, node: str) -> list[NodeAssignment]:
        # reads per beat that do not grow with the node's rentals (a beat comes every few seconds per node)
        live = [r for r in uow.rentals.by_ids(uow.agents.live_rentals_on(node)) if r.state in LIVE_STATES]
        allocations = uow.rentals.live_allocations_of([r.id for r in live])
        placed = [(rental, allocations.get(rental.id, [])) for rental in sorted(live, key=lambda r: r.id)]
        hosts = uow.agents.hostnames(sorted({a.node for _, allocation in placed for a in allocation}))
        runs = uow.agents.runs_on(node, [rental.id for rental, _ in placed])  # one read, not one per rental
        found = []
        for rental, allocation in placed:
            peers = tuple(hosts.get(a.node, a.node) for a in allocation)
            together = _restarts_together(rental, allocation)
            attempt = gang_restarts(uow, rental.id) if together else 0
            for rank, part in enumerate(allocation):
                if part.node == node:
                    action = "stop" if rental.state == "stopping" else "run"
                    deadline = rental.notice_deadline if rental.state == "preempting" else None
                    run = None if together else runs.get(rental.id)
                    restarts = 0 if run is None else run.restarts
                    keeps = None if deadline is None else rental.kept_gpus
                    kept_nodes = {a.node for a in rental.notice_keeps or ()}
                    released = keeps is not None and node not in kept_nodes
                    found.append(
                        NodeAssignment(
                            rental, part, action, deadline, peers, rank, attempt, restarts, keeps, released
                        )
                    )
        return found

    # --- failures -------------------------------------------------------------------------------------

    def reap(self, now: datetime | None = None) -> list[str]:
        """Mark nodes down that missed their heartbeats; end or re-queue their rentals. The nodes marked."""
        now = now or self.clock.now()
        # after a server restart every node gets a full timeout from the restart, not from its last beat
        cutoff = now - timedelta(seconds=self.timeout_s)
        marked = []
        with self.uow() as uow:
            cordoned = uow.fleet.cordoned()
            for agent in uow.agents.nodes():
                seen = max(agent.last_heartbeat_at or agent.registered_at, self.started_at)
                if not agent.up or seen >= cutoff:
                    continue
                marked.append(agent.node)
                by_us = agent.node not in cordoned and uow.fleet.set_schedulable(agent.node, False)
                uow.agents.set_up(agent.node, False, bool(by_us) or agent.cordoned_by_agent)
                last = agent.last_heartbeat_at or agent.registered_at
                if agent.node not in cordoned:  # an operator's maintenance (cordon) is not an outage
                    uow.outages.open(agent.node, last, f"missed heartbeats; marked down at {now.isoformat()}")
                for rental_id in uow.agents.live_rentals_on(agent.node):
                    self._end_lost(uow, rental_id, agent.node, last, now)
            uow.commit()
        if marked:
            self.signal(ended=True)  # their rentals ended lost (or wait to be placed again)
        return marked

    def _end_lost(
        self, uow: AgentUnitOfWork, rental_id: str, node: str, last: datetime, now: datetime
    ) -> None:
        rental = uow.rentals.get(rental_id)
        if rental is None or rental.state not in LIVE_STATES:
            return
        placement = rental.placements
        run = uow.agents.run(rental_id, node, placement) or RentalRun(rental_id, node, "lost")
        uow.agents.put_run(
            RentalRun(
                rental_id,
                node,
                "lost",
                run.exit_code,
                run.started_at,
                last,
                run.last_heartbeat_at,
                run.restarts,
                placement,
            )
        )
        # its runs on other nodes end there too: a gang is billed to its lost node's last heartbeat, whenever
        # their agents get to say that they stopped
        uow.rentals.end_runs(rental_id, last, "stopped")
        requeues = sum(1 for e in uow.rentals.events(rental_id) if e.kind == "requeued")
        spec = rental.spec
        why = f"node {node} missed its heartbeats; last heartbeat {last.isoformat()}"
        uow.rentals.release(rental_id, at=now)
        if spec.restart == "on-failure" and requeues < spec.max_restarts and rental.state != "stopping":
            uow.rentals.set_state(rental_id, "pending", expect=(rental.state,), reason=None)
            pass_on_coverage(uow, rental, now)
            uow.rentals.add_event(
                rental_id,
                RentalEvent(
                    now, "requeued", "node_down", f"{why}; re-queued ({requeues + 1}/{spec.max_restarts})"
                ),
            )
            return
        final = "stopped" if rental.state == "stopping" else "lost"
        uow.rentals.set_state(rental_id, final, expect=(rental.state,), reason=None)
        pass_on_coverage(uow, rental, now)
        uow.rentals.add_event(rental_id, RentalEvent(now, final, "node_down", f"{why}; billing ends there"))

    # --- runs and logs --------------------------------------------------------------------------------

    def runs(self, caller: Caller, rental_id: str) -> list[RentalRun]:
        with self.uow() as uow:
            owned_rental(uow, caller, rental_id)
            return uow.agents.runs(rental_id)

    def gpus(self, caller: Caller, rental_id: str) -> list[GpuReading]:
        """The GPU slices the rental holds now, each with its GPU's last reading (none once it has ended)."""
        with self.uow() as uow:
            rental = owned_rental(uow, caller, rental_id)
            if rental.state not in LIVE_STATES:
                return []
            allocation = uow.rentals.allocation(rental_id)
            nodes = uow.agents.nodes_named(sorted({part.node for part in allocation}))
            return gpu_readings(allocation, {n.node: (n.last_heartbeat_at, n.telemetry) for n in nodes})

    def upload_log(
        self, node_key: str | None, rental_id: str, node_offset: int, text: str, size_bytes: int
    ) -> int:
        """Append a chunk at `node_offset` of the node's log; the size the server now holds (resend from it).

        A chunk that starts before the stored size was received already (a retry) and is skipped; one that
        starts after it would leave a gap and is refused the same way."""
        agent = self.authenticate(node_key)
        with self.uow() as uow:
            if not uow.agents.had_allocation(rental_id, agent.node):
                raise NotFound(f"no rental {rental_id} on node {agent.node}")
            size = uow.agents.log_size(rental_id, agent.node)
            if node_offset != size or size_bytes <= 0:
                return size
            uow.agents.add_log(rental_id, agent.node, node_offset, size_bytes, text, self.clock.now())
            uow.commit()
            return size + size_bytes

    def read_log(
        self,
        caller: Caller,
        rental_id: str,
        offset: int,
        node: str | None = None,
        tail: int | None = None,
    ) -> tuple[str, int, int, bool]:
        """The rental's output from character `offset`, or its last `tail` characters (all its nodes' as it
        came, or one node's): the offset read from, the text, the next offset, and whether it has ended."""
        if offset < 0:
            raise Invalid("offset must be 0 or more", field="offset")
        if tail is not None and not 1 <= tail <= MAX_LOG_READ_CHARS:
            raise Invalid(f"tail is 1 to {MAX_LOG_READ_CHARS} characters", field="tail")
        with self.uow() as uow:
            rental = owned_rental(uow, caller, rental_id)
            if node is not None and not uow.agents.had_allocation(rental_id, node):
                raise Invalid(f"rental {rental_id} never ran on node {node!r}", field="node")
            if tail is not None:
                offset = max(0, uow.agents.log_length(rental_id, node) - tail)
            piece, total = uow.agents.log_page(rental_id, node, offset, MAX_LOG_READ_CHARS)
            next_offset = offset + len(piece)
            read_all = rental.state in END_STATES and next_offset >= total
            done = read_all and self._runs_over(uow, rental_id, node)
        return offset, piece, next_offset, done

    def _runs_over(self, uow: AgentUnitOfWork, rental_id: str, node: str | None) -> bool:
        """Whether every node's run of an ended rental (or `node`'s) has said it ended, or its agent has been
        silent past the timeout: a rank killed because another failed ships its last output after the rental
        ended, so a follower reading until `done` waits for it."""
        now = self.clock.now()
        return all(
            run.ended_at is not None
            or run.last_heartbeat_at is None
            or (now - run.last_heartbeat_at).total_seconds() > self.timeout_s
            for run in uow.agents.runs(rental_id)
            if node is None or run.node == node
        )


def _reported_models(inventory: Mapping[str, Any]) -> list[str] | None:
    """The model names of a registration inventory's GPUs in index order; None when it does not list them."""
    gpus = inventory.get("gpus")
    if not isinstance(gpus, list):
        return None
    listed = [gpu for gpu in gpus if isinstance(gpu, Mapping)]
    listed.sort(key=lambda gpu: gpu.get("index") if isinstance(gpu.get("index"), int) else len(listed))
    return [str(gpu.get("model_name", "")) for gpu in listed]


def _earlier_run_reported(
    uow: AgentUnitOfWork, rental_id: str, node: str, report: WorkloadReport, placement: int, now: datetime
) -> bool:
    """A report on the run of an earlier placement of a rental placed on this node again since: only its end
    is news, and it ends that run (the rental's state follows its current run); False: nothing changed."""
    run = uow.agents.run(rental_id, node, placement)
    if run is not None and run.ended_at is None and report.state in WORKLOAD_ENDED:
        exited = _exited_at(report, run.started_at, now)
        uow.agents.put_run(replace(run, state=report.state, exit_code=report.exit_code, ended_at=exited))
    return False


def _started_at(rental: Rental, report: WorkloadReport, now: datetime) -> datetime | None:
    """When a run first reported started: `ran_s` before the report (never before the rental was placed),
    so a workload that ended within one heartbeat has its start too; without it, the first `running`."""
    if report.ran_s is not None and report.state != "starting":
        started = now - timedelta(seconds=report.ran_s)
        return max(started, rental.placed_at) if rental.placed_at is not None else started
    return now if report.state == "running" else None


def _exited_at(report: WorkloadReport, start: datetime | None, now: datetime) -> datetime:
    """When a run reported ended did: `since_exit_s` before the report (never before `start`), so a workload
    that exited while its reports could not reach the server is not billed for the wait; without it (an
    older agent), the report's arrival."""
    if report.since_exit_s is None:
        return now
    exited = now - timedelta(seconds=report.since_exit_s)
    return exited if start is None else min(max(exited, start), now)


def _workload_ended_at(uow: AgentUnitOfWork, rental: Rental, now: datetime) -> datetime:
    """When the rental's workload ended: the last exit among its current placement's runs (as their agents
    reported it), else `now`; its end event is put there, so its billing ends there too."""
    ends = [
        run.ended_at
        for run in uow.agents.runs(rental.id)
        if run.placement == rental.placements and run.ended_at is not None
    ]
    return max(ends, default=now)


def _restarts_together(rental: Rental, allocation: Sequence[NodeAllocation]) -> bool:
    """Whether a failure restarts the rental's workload on all its nodes: on-failure, on several nodes."""
    return rental.spec.restart == "on-failure" and len(allocation) > 1


def gang_restarts(uow: UnitOfWork, rental_id: str) -> int:
    """How many times the rental's workload was restarted on all its nodes: the attempt its runs follow."""
    return sum(
        1
        for event in uow.rentals.events(rental_id)
        if event.kind == RESTARTED and event.reason != RESTARTED_ON_NODE
    )


def _restarted_here(
    uow: UnitOfWork, rental: Rental, node: str, report: WorkloadReport, new: int, now: datetime
) -> None:
    """A `restarted` event for the restarts a one-node rental's agent made by itself since its last report
    (`new`: two failures between heartbeats make one event that counts both)."""
    code = f" with exit code {report.failed_exit_code}" if report.failed_exit_code is not None else ""
    times = "" if new == 1 else f" {new} times"
    message = (
        f"on {node}: workload failed{code}; restarted it there{times} "
        f"({report.restarts}/{rental.spec.max_restarts})"
    )
    uow.rentals.add_event(rental.id, RentalEvent(now, RESTARTED, RESTARTED_ON_NODE, message))
