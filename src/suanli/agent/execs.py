"""The agent's side of `suanli exec`: run the commands a heartbeat answer lists inside their rentals' running
workloads, and report each one's start and end (exit code and the end of its output) to the server. An
attached command's input and output go through the server to its client instead (`attached`); a port
forward carries TCP connections to a port of the rental (`forwards`).

* A command starts at most once per agent process: one the server says is already `running` but this agent
  does not know was started by an agent before a restart. Each command's process is recorded beside its
  output (`<id>.pid.json`), so the next agent process ends what an earlier one left running (its session,
  if the record still describes it) before it reports it `failed`: left running, it was managed by no one
  and a user who ran it again had two copies.
* A command whose rental has no running workload here, or that cannot be started, is reported `failed`
  with the reason.
* Output goes to `<work dir>/execs/<id>.log` (the agent's, 0600). While the command runs, what it printed
  since the last report the server took is sent every `PROGRESS_S` at most (as text, with where it starts
  in all it printed; at most the last `MAX_OUTPUT_CHARS` of it, the rest marked lost), so `suanli exec`
  shows it as it comes; the end comes with the exit code. The file is removed once the end is reported. A
  report the server does not take is sent again at the next poll: the server takes nothing twice.
* The limit: the process executor runs the command under coreutils' `timeout`; for a container, and in
  any case `KILL_SLACK_S` past the limit, the agent kills the command's process group itself.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from suanli.agent.attached import AttachedSession, Ends
from suanli.agent.executors import Executor, WorkloadSpec, process_identity, record_describes_process
from suanli.agent.forwards import ForwardSession
from suanli.client import ApiError, Client, ServerUnreachable
from suanli.domain.errors import SuanliError
from suanli.wire.agent_schemas import ExecAssignmentResponse, ExecReportRequest

log = logging.getLogger(__name__)
_UTF8 = codecs.getincrementaldecoder("utf-8")
MAX_OUTPUT_CHARS = 64 * 1024  # of output held for the server at most (it keeps as many)
READ_BYTES = 1 << 20  # read from a command's output file at a time
PROGRESS_S = 1.0  # while a command runs, how often what it printed is sent at most
KILL_SLACK_S = 10.0  # past its timeout, the agent kills what `timeout` has not
POLL_S = 0.2  # between heartbeats, how often running commands are checked while any runs


@dataclass
class RunningExec:
    id: str
    rental_id: str
    process: subprocess.Popen[bytes]
    output: Path
    kill_at: float  # monotonic
    report: ExecReportRequest | None = None  # its end, once known, until the server has taken it
    read_bytes: int = 0  # of its output file, read so far
    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: _UTF8(errors="replace"))
    pending: str = ""  # output read and not yet taken by the server
    pending_from: int = 0  # where `pending` starts in all it printed, in characters
    sent_at: float = 0.0  # monotonic time of the last progress report
    rental_ended: bool = False  # killed because its rental no longer runs here
    timeout_at: float = math.inf  # monotonic: its --timeout passes


RENTAL_ENDED_EXIT = 128 + signal.SIGTERM  # a forward ended with its rental, as a command it terminated


class ExecRunner:
    def __init__(self, executor: Executor, work_dir: Path) -> None:
        self.executor, self.dir = executor, work_dir / "execs"
        self.running: dict[str, RunningExec] = {}
        self.forwards: dict[str, ForwardSession] = {}  # port forwards, until their end is reported
        self.left_behind = _end_left_behind(self.dir)  # commands an earlier agent process started: ended

    def start(
        self,
        client: Client,
        execs: Sequence[ExecAssignmentResponse],
        spec_of: Callable[[str], WorkloadSpec | None],
    ) -> None:
        """Start each listed command this agent has not started; `spec_of(rental)`: the running workload's
        spec, or None when the rental runs nothing here."""
        for found in execs:
            if found.id in self.running or found.id in self.forwards:
                continue
            if found.state == "running":
                restarted = "this node's agent restarted while it ran; its end is unknown"
                if found.id in self.left_behind:
                    restarted = (
                        "this node's agent restarted while it ran: it was ended, its exit code unknown"
                    )
                if self._send(client, found.id, _failed(restarted)):
                    self.left_behind.discard(found.id)
                continue
            try:
                spec = spec_of(found.rental_id)
            except SuanliError as error:
                self._send(client, found.id, _failed(str(error)))
                continue
            if spec is None:
                self._send(client, found.id, _failed("the rental's workload is not running on this node"))
                continue
            if found.port is not None:
                self._forward(client, found, spec)
                continue
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            output = self.dir / f"{found.id}.log"  # attached, its output goes to the client instead
            ends = Ends.open(found.tty, found.separate_stderr) if found.stdin else None
            try:
                attach = None if ends is None else ends.child
                process = self.executor.run_command(spec, found.command, found.timeout_s, output, attach)
            except SuanliError as error:  # an ExecutorError among them
                output.unlink(missing_ok=True)
                if ends is not None:
                    ends.close()
                self._send(client, found.id, _failed(str(error), getattr(error, "exit_code", None)))
                continue
            if ends is not None:
                AttachedSession(client, found.id, process, ends).start()
            _write_record(self.dir, found.id, process.pid)
            log.info("%s: running %s (%s)", found.rental_id, found.command[0], found.id)
            now = time.monotonic()
            self.running[found.id] = RunningExec(
                found.id,
                found.rental_id,
                process,
                output,
                now + found.timeout_s + KILL_SLACK_S,
                timeout_at=now + found.timeout_s,
            )
            self._send(client, found.id, ExecReportRequest(state="running"))

    def end_with_rentals(self, live: Collection[str]) -> list[str]:
        """Kill the commands, shells and port forwards of rentals no longer running here (stopped, ended,
        moved away): they must not outlive the GPUs they were given. Their ends are reported as usual (the
        server has them `lost` already). The ids ended."""
        ended = []
        for running in self.running.values():
            if running.rental_id not in live and running.report is None and not running.rental_ended:
                running.rental_ended = True
                _kill_session(running.process)
                ended.append(running.id)
        for exec_id, session in self.forwards.items():
            if session.rental_id not in live and not session.done.is_set():
                session.rental_ended = True
                session.stop()
                ended.append(exec_id)
        for exec_id in ended:
            log.info("exec %s: its rental no longer runs here; ended", exec_id)
        return ended

    def _forward(self, client: Client, found: ExecAssignmentResponse, spec: WorkloadSpec) -> None:
        assert found.port is not None
        try:
            host = self.executor.address(spec)
        except SuanliError as error:
            self._send(client, found.id, _failed(str(error)))
            return
        session = ForwardSession(client, found.id, spec.rental_id, host, found.port, found.timeout_s)
        session.start()
        self.forwards[found.id] = session
        log.info("%s: forwarding port %d (%s)", spec.rental_id, found.port, found.id)
        self._send(client, found.id, ExecReportRequest(state="running"))

    def poll(self, client: Client) -> None:
        """Send what running commands printed, report every command that has ended (and kill one past its
        limit), and every port forward whose client went."""
        for exec_id, session in list(self.forwards.items()):
            session.stop_if_due()
            if session.done.is_set() and self._send(client, exec_id, _forward_ended(session)):
                del self.forwards[exec_id]
        for running in list(self.running.values()):
            if running.report is None:
                code = running.process.poll()
                _read(running, ended=code is not None)
                if code is None:
                    now = time.monotonic()
                    if now >= running.kill_at:
                        _kill_group(running.process)
                    elif running.pending and now - running.sent_at >= PROGRESS_S:
                        running.sent_at = now
                        progress = ExecReportRequest(
                            state="running", output=running.pending, output_from_chars=running.pending_from
                        )
                        if self._send(client, running.id, progress):
                            running.pending_from += len(running.pending)
                            running.pending = ""
                    continue
                running.report = _ended(code, running)
            if self._send(client, running.id, running.report):
                running.output.unlink(missing_ok=True)
                _record_path(self.dir, running.id).unlink(missing_ok=True)
                del self.running[running.id]

    @staticmethod
    def _send(client: Client, exec_id: str, report: ExecReportRequest) -> bool:
        try:
            client.report_exec(exec_id, report)
        except ApiError as error:
            if error.status == 404:  # the server no longer has it for this node: nothing to tell
                return True
            log.warning("exec %s: the server refused its report: %s", exec_id, error)
            return False
        except ServerUnreachable as error:
            log.warning("exec %s: report not sent (%s); sent again later", exec_id, error)
            return False
        return True


def _forward_ended(session: ForwardSession) -> ExecReportRequest:
    """A port forward's end: exit 124 (as `timeout` says) when its time ran out, 143 (as a command its
    rental's end terminated) when its rental no longer runs here, else 0."""
    counts = f"{session.opened} connection(s) to port {session.port}"
    if session.refused:
        counts += f", {session.refused} refused"
    if session.rental_ended:
        return ExecReportRequest(
            state="exited", exit_code=RENTAL_ENDED_EXIT, message=f"ended with its rental; {counts}"
        )
    if session.timed_out:
        return ExecReportRequest(state="exited", exit_code=124, message=f"timed out; {counts}")
    return ExecReportRequest(state="exited", exit_code=0, message=counts)


def _failed(message: str, exit_code: int | None = None) -> ExecReportRequest:
    return ExecReportRequest(state="failed", exit_code=exit_code, message=message[:2000])


def _ended(returncode: int, running: RunningExec) -> ExecReportRequest:
    """The report of a command that ended with `returncode` (a signal N reads as 128 + N, as a shell says),
    with what it printed that the server has not taken."""
    code = returncode if returncode >= 0 else 128 - returncode
    message = ""
    if running.rental_ended:
        message = "ended with its rental"
    elif code in (124, 137) and time.monotonic() >= running.timeout_at:  # TERM at the limit, KILL 5 s on
        message = f"timed out (exit {code})"
    return ExecReportRequest(
        state="exited",
        exit_code=code,
        output=running.pending,
        output_from_chars=running.pending_from,
        message=message,
    )


def _read(running: RunningExec, ended: bool) -> None:
    """Add what the command printed since the last read to `pending` (as text: a character cut between two
    reads waits for its end), keeping its last `MAX_OUTPUT_CHARS`."""
    try:
        with running.output.open("rb") as file:
            file.seek(running.read_bytes)
            while block := file.read(READ_BYTES):
                running.read_bytes += len(block)
                _hold(running, running.decoder.decode(block))
    except OSError:
        pass
    if ended:
        _hold(running, running.decoder.decode(b"", final=True))


def _hold(running: RunningExec, text: str) -> None:
    held = running.pending + text
    dropped = max(len(held) - MAX_OUTPUT_CHARS, 0)
    running.pending, running.pending_from = held[dropped:], running.pending_from + dropped


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _kill_session(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of the command's session (it leads one: `start_new_session`, or `setsid` on a
    terminal), process groups a shell's job control made included."""
    _kill_session_of(process.pid)


def _kill_session_of(leader: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[3] == str(leader):  # field 6 of stat: the session id
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(stat.parent.name), signal.SIGKILL)


def _record_path(directory: Path, exec_id: str) -> Path:
    return directory / f"{exec_id}.pid.json"


def _write_record(directory: Path, exec_id: str, pid: int) -> None:
    """Record the command's process (its session's leader), so a later agent process can end it."""
    identity = process_identity(pid)
    record = {"pid": pid, "boot_id": None, "start_ticks": None}
    if identity is not None:
        record |= {"boot_id": identity.boot_id, "start_ticks": identity.start_ticks}
    with contextlib.suppress(OSError):  # without it, only the command's `timeout` ends it after a restart
        _record_path(directory, exec_id).write_text(json.dumps(record))


def _end_left_behind(directory: Path) -> set[str]:
    """End the commands an earlier agent process started here (no process manages them now) and drop their
    records and output; the ids of those recorded."""
    ended = set()
    for path in directory.glob("*.pid.json") if directory.is_dir() else ():
        exec_id = path.name.removesuffix(".pid.json")
        try:
            record = json.loads(path.read_text())
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            pid = None
        if pid is not None and record_describes_process(record, pid):
            _kill_session_of(pid)
            log.info("exec %s: left running by an earlier agent process; ended", exec_id)
        ended.add(exec_id)
        path.unlink(missing_ok=True)
        (directory / f"{exec_id}.log").unlink(missing_ok=True)
    return ended
