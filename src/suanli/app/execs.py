"""One-off commands inside a running rental (`suanli exec RENTAL -- nvidia-smi`), as `kubectl exec` without a
terminal: the command runs on one of the rental's nodes, as its workload's user, with its GPUs visible, its
environment and its working directory (in its container, for an image), and the tenant reads its exit code
and the end of its output.

The server never connects to a node: an exec waits `queued` in the store until that node's agent takes it
from its next heartbeat answer (`for_node`), says it started (`running`) and then how it ended (`exited`
with its exit code, or `failed` when it could not run). An exec the agent never answers for is `lost` once
its timeout and `ANSWER_GRACE_S` have passed, and one whose rental ends first is `lost` at once; both are
decided when it is read, so no loop is needed. The agent also runs every command under its timeout, so a
command outlives neither it nor an agent that restarted meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from suanli.app.errors import Conflict, Invalid, NotFound
from suanli.app.ids import new_id
from suanli.app.ports import Clock, UnitOfWork
from suanli.app.records import END_STATES, Caller, Rental
from suanli.app.tenants import owned_rental

MAX_TIMEOUT_S = 3600
DEFAULT_TIMEOUT_S = 60
MAX_OPEN_PER_RENTAL = 8  # queued or running at once
MAX_OUTPUT_CHARS = 65_536  # the end of the output that is kept
ANSWER_GRACE_S = 120.0  # past its timeout, how long an exec waits for its agent's answer before it is lost
OPEN_STATES = ("queued", "running")
FINAL_STATES = ("exited", "failed", "lost")
EXEC_STATES = (*OPEN_STATES, *FINAL_STATES)


@dataclass(frozen=True, slots=True)
class Exec:
    """A command run (or to run) inside rental `rental_id` on `node`."""

    id: str
    rental_id: str
    node: str
    command: tuple[str, ...]
    timeout_s: int
    state: str  # one of EXEC_STATES
    created_at: datetime
    exit_code: int | None = None
    output: str = ""
    output_truncated: bool = False
    message: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None


class ExecRepo(Protocol):
    def add(self, found: Exec) -> None: ...
    def get(self, exec_id: str) -> Exec | None: ...
    def of_rental(self, rental_id: str, limit: int) -> list[Exec]: ...  # newest first
    def open_count(self, rental_id: str) -> int: ...
    def open_on(self, node: str) -> list[Exec]: ...  # queued or running on the node, oldest first
    # the changed fields of an exec, only while it is in one of `expect`; False when it was not
    def update(self, found: Exec, *, expect: Sequence[str]) -> bool: ...


class ExecUnitOfWork(UnitOfWork, Protocol):
    execs: ExecRepo


def check_command(command: Sequence[str]) -> tuple[str, ...]:
    if not command or not command[0]:
        raise Invalid("give the command to run, e.g. -- nvidia-smi", field="command")
    return tuple(command)


def settle(found: Exec, rental: Rental, now: datetime) -> Exec | None:
    """`found` made `lost`, when it is open and its rental has ended or its agent's answer is overdue; None
    when it stays as it is."""
    if found.state not in OPEN_STATES:
        return None
    if rental.state in END_STATES:
        why = f"the rental ended ({rental.state}) before the command did"
    elif now > found.created_at + timedelta(seconds=found.timeout_s + ANSWER_GRACE_S):
        why = f"no answer from node {found.node}'s agent within its timeout ({found.timeout_s} s) and more"
    else:
        return None
    return replace(found, state="lost", message=why, ended_at=now)


class ExecService:
    def __init__(self, uow: Callable[[], ExecUnitOfWork], clock: Clock) -> None:
        self.uow, self.clock = uow, clock

    def create(
        self,
        caller: Caller,
        rental_id: str,
        command: Sequence[str],
        node_rank: int = 0,
        timeout_s: int = DEFAULT_TIMEOUT_S,
    ) -> Exec:
        """Queue `command` for the rental's node of rank `node_rank`; 409 unless the rental is running."""
        argv = check_command(command)
        if not 1 <= timeout_s <= MAX_TIMEOUT_S:
            raise Invalid(f"timeout is 1 to {MAX_TIMEOUT_S} s", field="timeout_s")
        with self.uow() as uow:
            rental = owned_rental(uow, caller, rental_id)
            if rental.state != "running":
                raise Conflict(
                    f"rental {rental_id} is {rental.state}: a command runs inside a running rental only",
                    field="rental_id",
                )
            allocation = uow.rentals.allocation(rental_id)
            if not 0 <= node_rank < len(allocation):
                raise Invalid(
                    f"node rank {node_rank}: the rental has {len(allocation)} node(s), ranks 0 to "
                    f"{len(allocation) - 1}",
                    field="node_rank",
                )
            if uow.execs.open_count(rental_id) >= MAX_OPEN_PER_RENTAL:
                raise Conflict(
                    f"rental {rental_id} already has {MAX_OPEN_PER_RENTAL} commands queued or running",
                    field="rental_id",
                )
            found = Exec(
                new_id("exe"),
                rental_id,
                allocation[node_rank].node,
                argv,
                timeout_s,
                "queued",
                self.clock.now(),
            )
            uow.execs.add(found)
            uow.commit()
        return found

    def get(self, caller: Caller, rental_id: str, exec_id: str) -> Exec:
        with self.uow() as uow:
            rental = owned_rental(uow, caller, rental_id)
            found = uow.execs.get(exec_id)
            if found is None or found.rental_id != rental_id:
                raise NotFound(f"no command {exec_id} in rental {rental_id}")
            settled = settle(found, rental, self.clock.now())
            if settled is not None and uow.execs.update(settled, expect=OPEN_STATES):
                uow.commit()
                return settled
        return found

    def list(self, caller: Caller, rental_id: str, limit: int = 50) -> list[Exec]:
        """The rental's commands, newest first."""
        with self.uow() as uow:
            rental = owned_rental(uow, caller, rental_id)
            now = self.clock.now()
            shown = []
            for found in uow.execs.of_rental(rental_id, limit):
                settled = settle(found, rental, now)
                if settled is not None and uow.execs.update(settled, expect=OPEN_STATES):
                    found = settled
                shown.append(found)
            uow.commit()
        return shown

    # --- the node's agent -----------------------------------------------------------------------------

    @staticmethod
    def for_node(uow: ExecUnitOfWork, node: str, live: set[str]) -> list[Exec]:
        """The open commands of the node's rentals that are `live` there (for its heartbeat answer)."""
        return [e for e in uow.execs.open_on(node) if e.rental_id in live]

    def report(
        self,
        node: str,
        exec_id: str,
        state: str,
        exit_code: int | None = None,
        output: str = "",
        output_truncated: bool = False,
        message: str = "",
    ) -> Exec:
        """The agent of `node` says the command started (`running`) or how it ended (`exited`, `failed`).
        Reporting a state it already has is a no-op, so a retried report is safe; an ended one stays."""
        if state not in ("running", "exited", "failed"):
            raise Invalid("state is running, exited or failed", field="state")
        with self.uow() as uow:
            found = uow.execs.get(exec_id)
            if found is None or found.node != node:
                raise NotFound(f"no command {exec_id} on node {node}")
            if found.state == state or found.state in FINAL_STATES:
                return found
            now = self.clock.now()
            if state == "running":
                changed = replace(found, state="running", started_at=now)
            else:
                if len(output) > MAX_OUTPUT_CHARS:
                    output, output_truncated = output[-MAX_OUTPUT_CHARS:], True
                changed = replace(
                    found,
                    state=state,
                    exit_code=exit_code,
                    output=output,
                    output_truncated=output_truncated,
                    message=message[:500],
                    started_at=found.started_at or now,
                    ended_at=now,
                )
            if uow.execs.update(changed, expect=OPEN_STATES):
                uow.commit()
                return changed
        return found
