"""Commands inside a running rental (`suanli exec RENTAL -- nvidia-smi`), as `kubectl exec`: the command runs
on one of the rental's nodes, as its workload's user, with its GPUs visible, its environment and its working
directory (in its container, for an image), and the tenant reads its exit code and the end of its output.
An attached command (`stdin`, and with `tty` a terminal: `suanli exec -it RENTAL -- bash`) streams instead:
the tenant's client and the node's agent each open a WebSocket to the server, which relays the bytes between
them (`suanli.api.exec_attach`); its output is not kept.

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
from suanli.domain.workload_env import execve_problem

MAX_TIMEOUT_S = 3600
MAX_ATTACHED_TIMEOUT_S = 8 * 3600  # a terminal session or a port forward: a working day
DEFAULT_FORWARD_S = 8 * 3600
DEFAULT_TIMEOUT_S = 60
MAX_OPEN_PER_RENTAL = 8  # queued or running at once
MAX_OUTPUT_CHARS = 65_536  # the end of the output that is kept
ANSWER_GRACE_S = 120.0  # past its timeout, how long an exec waits for its agent's answer before it is lost
OPEN_STATES = ("queued", "running")
LATE_CLIENT_S = 60.0  # after an attached command ended, how long its output waits for a client not yet come
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
    output_chars: int = 0  # characters of output it has produced so far; `output` is the last of them
    stdin: bool = False  # attached: the tenant's client streams its input and reads its output live
    tty: bool = False  # attached to a terminal (a pseudo-terminal on the node)
    port: int | None = None  # a port forward (no command): the agent connects to this port of the rental
    separate_stderr: bool = False  # attached without a terminal: stderr in frames of its own (channel 2)


@dataclass(frozen=True, slots=True)
class ExecReport:
    """An agent's report on a command: `output` is what it printed from character `output_from_chars` on
    (None: the end of its output, sent once at its end, by an agent that does not stream it)."""

    state: str  # running, exited or failed
    exit_code: int | None = None
    output: str = ""
    output_truncated: bool = False
    message: str = ""
    output_from_chars: int | None = None


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


def with_output(found: Exec, chunk: str, start: int) -> Exec:
    """`found` with `chunk`, its output from character `start` on, added: the part it already has is not
    added again (a retried report); after a gap (output the agent could not send) only the chunk is kept,
    so `output` is always the last characters printed, and it is marked truncated; at most the last
    `MAX_OUTPUT_CHARS` are kept."""
    end = start + len(chunk)
    if end <= found.output_chars:
        return found
    new = chunk[max(found.output_chars - start, 0) :]
    gap = start > found.output_chars
    kept = (new if gap else found.output + new)[-MAX_OUTPUT_CHARS:]
    return replace(
        found,
        output=kept,
        output_chars=end,
        output_truncated=found.output_truncated or gap or len(kept) < end,
    )


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
        *,
        stdin: bool = False,
        tty: bool = False,
        separate_stderr: bool = False,
    ) -> Exec:
        """Queue `command` for the rental's node of rank `node_rank`; 409 unless the rental is running. With
        `stdin` the client attaches to it (`tty`: on a terminal) to stream its input and output
        (`separate_stderr`: its stdout and stderr apart)."""
        argv = check_command(command)
        if tty and not stdin:
            raise Invalid("a terminal (tty) needs stdin attached too, as kubectl exec -it", field="tty")
        if separate_stderr and (tty or not stdin):
            raise Invalid(
                "separate_stderr is for an attached command without a terminal (stdin, no tty): a terminal "
                "has one output, and a command that is not attached keeps both together",
                field="separate_stderr",
            )
        longest = MAX_ATTACHED_TIMEOUT_S if stdin else MAX_TIMEOUT_S
        if not 1 <= timeout_s <= longest:
            what = "an attached command's" if stdin else "a command's"
            raise Invalid(f"{what} timeout is 1 to {longest} s", field="timeout_s")
        return self._queue(
            caller,
            rental_id,
            argv,
            node_rank,
            timeout_s,
            stdin=stdin,
            tty=tty,
            separate_stderr=separate_stderr,
        )

    def _queue(
        self,
        caller: Caller,
        rental_id: str,
        argv: tuple[str, ...],
        node_rank: int,
        timeout_s: int,
        *,
        stdin: bool,
        tty: bool,
        port: int | None = None,
        separate_stderr: bool = False,
    ) -> Exec:
        with self.uow() as uow:
            rental = owned_rental(uow, caller, rental_id)
            if rental.state != "running":
                what = "a command runs inside" if port is None else "a port forward reaches"
                raise Conflict(
                    f"rental {rental_id} is {rental.state}: {what} a running rental only", field="rental_id"
                )
            if port is None and (problem := execve_problem(argv, rental.spec.env)) is not None:
                raise Invalid(problem, field="command")
            allocation = uow.rentals.allocation(rental_id)
            if not 0 <= node_rank < len(allocation):
                raise Invalid(
                    f"node rank {node_rank}: the rental has {len(allocation)} node(s), ranks 0 to "
                    f"{len(allocation) - 1}",
                    field="node_rank",
                )
            if uow.execs.open_count(rental_id) >= MAX_OPEN_PER_RENTAL:
                raise Conflict(
                    f"rental {rental_id} already has {MAX_OPEN_PER_RENTAL} commands or port forwards open",
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
                stdin=stdin,
                tty=tty,
                port=port,
                separate_stderr=separate_stderr,
            )
            uow.execs.add(found)
            uow.commit()
        return found

    def forward(
        self,
        caller: Caller,
        rental_id: str,
        port: int,
        node_rank: int = 0,
        timeout_s: int = DEFAULT_FORWARD_S,
    ) -> Exec:
        """A port forward to `port` of the rental on its node of `node_rank` (`suanli port-forward`): attached
        as a command is, its frames carry TCP connections the agent opens to that port."""
        if not 1 <= port <= 65535:
            raise Invalid("a port is 1 to 65535", field="port")
        if not 1 <= timeout_s <= MAX_ATTACHED_TIMEOUT_S:
            raise Invalid(f"a port forward's timeout is 1 to {MAX_ATTACHED_TIMEOUT_S} s", field="timeout_s")
        return self._queue(caller, rental_id, (), node_rank, timeout_s, stdin=True, tty=False, port=port)

    def attachable(self, caller: Caller, rental_id: str, exec_id: str) -> Exec:
        """The caller's open (or just ended) attached command, for its client to attach to; 409 when it is
        not one."""
        found = self.get(caller, rental_id, exec_id)
        if not found.stdin:
            raise Conflict(f"command {exec_id} was not started attached (stdin)", field="exec_id")
        if found.state not in OPEN_STATES and not self._output_may_wait(found):
            raise Conflict(f"command {exec_id} has ended ({found.state})", field="exec_id")
        return found

    def _output_may_wait(self, found: Exec) -> bool:
        """Whether an ended command's output may still wait for its client (a command quicker than its
        client's connection ends before the client comes)."""
        if found.ended_at is None:
            return False
        return self.clock.now() - found.ended_at <= timedelta(seconds=LATE_CLIENT_S)

    def agent_attachable(self, node: str, exec_id: str) -> Exec:
        """The node's open, attached command, for its agent to attach to."""
        with self.uow() as uow:
            found = uow.execs.get(exec_id)
        if found is None or found.node != node:
            raise NotFound(f"no command {exec_id} on node {node}")
        if not found.stdin or found.state not in OPEN_STATES:
            raise Conflict(f"command {exec_id} is not an open attached command", field="exec_id")
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

    def report(self, node: str, exec_id: str, report: ExecReport) -> Exec:
        """The agent of `node` says the command started or still runs (`running`, with the output since its
        last report) or how it ended (`exited`, `failed`). A retried report is safe: output already taken
        is not taken twice, and an ended command stays as it ended."""
        if report.state not in ("running", "exited", "failed"):
            raise Invalid("state is running, exited or failed", field="state")
        with self.uow() as uow:
            found = uow.execs.get(exec_id)
            if found is None or found.node != node:
                raise NotFound(f"no command {exec_id} on node {node}")
            if found.state in FINAL_STATES:
                return found
            now = self.clock.now()
            changed = replace(found, state=report.state, started_at=found.started_at or now)
            if report.output_from_chars is not None:
                changed = with_output(changed, report.output, report.output_from_chars)
            elif report.state != "running":  # an agent that sends the end of the output only, at the end
                output, truncated = report.output, report.output_truncated
                if len(output) > MAX_OUTPUT_CHARS:
                    output, truncated = output[-MAX_OUTPUT_CHARS:], True
                changed = replace(
                    changed, output=output, output_truncated=truncated, output_chars=len(output)
                )
            if report.state != "running":
                changed = replace(
                    changed, exit_code=report.exit_code, message=report.message[:500], ended_at=now
                )
            if changed == found:
                return found
            if uow.execs.update(changed, expect=OPEN_STATES):
                uow.commit()
                return changed
        return found
