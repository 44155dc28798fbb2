"""What node agents and the server say to each other, and what is kept of it: join tokens, registered nodes,
each rental's run on a node, workload reports in and assignments out; and the store's port for them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from suanli.app.execs import Exec, ExecRepo
from suanli.app.gpu_history import GpuMinuteRepo
from suanli.app.ports import UnitOfWork
from suanli.app.records import Rental
from suanli.domain.mig import MigInstance
from suanli.domain.plan import NodeAllocation


@dataclass(frozen=True, slots=True)
class JoinToken:
    id: str
    node: str
    token_sha256: str
    created_by: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AgentNode:
    node: str
    key_sha256: str
    registered_at: datetime
    inventory: Mapping[str, Any]
    last_heartbeat_at: datetime | None
    up: bool
    cordoned_by_agent: (
        bool  # the cordon is its agent's doing (down, or GPUs not the fleet's), not an operator's
    )
    telemetry: Sequence[Mapping[str, Any]] = ()
    gpu_mismatch: str | None = (
        None  # why its host's GPUs are not the fleet's (`domain.host_check`); None: they are
    )


@dataclass(frozen=True, slots=True)
class RentalRun:
    """A rental's workload on one node, as its agent reported it."""

    rental_id: str
    node: str
    state: str
    exit_code: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_heartbeat_at: datetime | None = None
    restarts: int = 0  # restarts its agent made by itself (one node, on-failure), as last reported
    placement: int = 0  # the rental's placement it ran in (`Rental.placements` then)


@dataclass(frozen=True, slots=True)
class WorkloadReport:
    rental_id: str
    state: str  # one of REPORTED_STATES
    exit_code: int | None = None
    message: str = ""
    attempt: int = 0  # the gang restarts the agent's run follows (`NodeAssignment.attempt`)
    ran_s: float | None = None  # how long ago the agent started the workload (None: it cannot tell)
    restarts: int = 0  # restarts the agent made by itself after failures (a one-node rental's on-failure)
    failed_exit_code: int | None = None  # the exit code the last of those restarts followed
    placement: int | None = None  # the placement the agent's run follows (None: an agent that does not say)
    since_exit_s: float | None = None  # how long ago an ended workload exited (None: at the report)


@dataclass(frozen=True, slots=True)
class NodeAssignment:
    """One rental placed on the node: what to run, and whether to run it or stop it."""

    rental: Rental
    allocation: NodeAllocation
    action: str  # "run" or "stop"
    notice_deadline: datetime | None = None
    peers: tuple[str, ...] = ()  # the host names of all its nodes, in rank order (its allocation's)
    node_rank: int = 0  # this node's place among them
    attempt: int = 0  # a multi-node rental's restarts of all its nodes so far: a higher one restarts the run
    restarts: int = 0  # restarts a one-node rental's agent made by itself there, as last reported
    # preempted in part (a trim): the GPUs it runs on with after `notice_deadline`; it is not killed then
    notice_keeps_gpus: int | None = None
    # a trim that gives up this node (a gang keeps its other nodes): its part here ends at the deadline
    notice_releases_node: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    node: str
    interval_s: float
    assignments: list[NodeAssignment] = field(default_factory=list)
    execs: list[Exec] = field(default_factory=list)  # commands to run inside its running rentals


class AgentRepo(Protocol):
    def node_exists(self, node: str) -> bool: ...
    def add_token(self, token: JoinToken) -> None: ...
    def token_by_digest(self, token_sha256: str) -> JoinToken | None: ...
    def use_token(self, token_id: str, now: datetime) -> bool: ...
    def put_node(self, node: str, key_sha256: str, inventory: Mapping[str, Any], now: datetime) -> None: ...
    def node_by_key(self, key_sha256: str) -> AgentNode | None: ...
    def nodes(self) -> list[AgentNode]: ...
    def nodes_named(self, names: Sequence[str]) -> list[AgentNode]: ...
    # record the beat (and, when said, whether its agent runs images); returns the previous beat's time
    def beat(
        self,
        node: str,
        telemetry: Sequence[Mapping[str, Any]],
        now: datetime,
        runs_images: bool | None = None,
    ) -> datetime | None: ...
    # the MIG instances the node's host reported (GPU index -> (start, profile, busy)); True on a change
    def set_mig_layouts(self, node: str, layouts: Mapping[int, Sequence[MigInstance]]) -> bool: ...
    # rentals holding `node` whose run there is `running`: their (gpu_index, milli) slices on it
    def running_slices(self, node: str) -> dict[str, list[tuple[int, int]]]: ...
    def add_energy(
        self, rental_id: str, node: str, energy_j: float, seconds: float, gpu_seconds: float
    ) -> None: ...
    def set_up(self, node: str, up: bool, cordoned_by_agent: bool) -> None: ...
    def set_gpu_mismatch(self, node: str, reason: str | None) -> None: ...
    def live_rentals_on(self, node: str) -> list[str]: ...
    # the host name each registered node's agent reported (nodes without an agent are left out)
    def hostnames(self, nodes: Sequence[str]) -> dict[str, str]: ...
    def had_allocation(self, rental_id: str, node: str) -> bool: ...
    def run(self, rental_id: str, node: str, placement: int) -> RentalRun | None: ...
    def runs_on(self, node: str, rental_ids: Sequence[str]) -> dict[str, RentalRun]: ...
    def put_run(self, run: RentalRun) -> None: ...
    def runs(self, rental_id: str) -> list[RentalRun]: ...
    def log_size(self, rental_id: str, node: str) -> int: ...
    def add_log(
        self, rental_id: str, node: str, node_offset: int, size_bytes: int, data: str, now: datetime
    ) -> None: ...
    def log_page(self, rental_id: str, node: str | None, offset: int, limit: int) -> tuple[str, int]: ...
    # characters of the rental's output (or `node`'s) stored so far
    def log_length(self, rental_id: str, node: str | None) -> int: ...


class AgentUnitOfWork(UnitOfWork, Protocol):
    agents: AgentRepo
    execs: ExecRepo
    gpu_minutes: GpuMinuteRepo


AgentUnitOfWorkFactory = Callable[[], AgentUnitOfWork]
