"""The agent's side of `suanli exec`: run the commands a heartbeat answer lists inside their rentals' running
workloads, and report each one's start and end (exit code and the end of its output) to the server.

* A command starts at most once per agent process: one the server says is already `running` but this agent
  does not know was started by an agent before a restart; it is reported `failed` (its `timeout` ends it).
* A command whose rental has no running workload here, or that cannot be started, is reported `failed`
  with the reason.
* Output goes to `<work dir>/execs/<id>.log` (the agent's, 0600) and only its last `MAX_OUTPUT_BYTES` are
  sent; the file is removed once the end is reported. A report the server does not take is sent again at
  the next poll: the server treats a repeated one as a no-op.
* The limit: the process executor runs the command under coreutils' `timeout`; for a container, and in
  any case `KILL_SLACK_S` past the limit, the agent kills the command's process group itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from suanli.agent.executors import Executor, WorkloadSpec
from suanli.client import ApiError, Client, ServerUnreachable
from suanli.domain.errors import SuanliError
from suanli.wire.agent_schemas import ExecAssignmentResponse, ExecReportRequest

log = logging.getLogger(__name__)
MAX_OUTPUT_BYTES = 64 * 1024
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


class ExecRunner:
    def __init__(self, executor: Executor, work_dir: Path) -> None:
        self.executor, self.dir = executor, work_dir / "execs"
        self.running: dict[str, RunningExec] = {}

    def start(
        self,
        client: Client,
        execs: Sequence[ExecAssignmentResponse],
        spec_of: Callable[[str], WorkloadSpec | None],
    ) -> None:
        """Start each listed command this agent has not started; `spec_of(rental)`: the running workload's
        spec, or None when the rental runs nothing here."""
        for found in execs:
            if found.id in self.running:
                continue
            if found.state == "running":
                restarted = "this node's agent restarted while it ran; its end is unknown"
                self._send(client, found.id, _failed(restarted))
                continue
            spec = spec_of(found.rental_id)
            if spec is None:
                self._send(client, found.id, _failed("the rental's workload is not running on this node"))
                continue
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            output = self.dir / f"{found.id}.log"
            try:
                process = self.executor.run_command(spec, found.command, found.timeout_s, output)
            except SuanliError as error:  # an ExecutorError among them
                output.unlink(missing_ok=True)
                self._send(client, found.id, _failed(str(error), getattr(error, "exit_code", None)))
                continue
            log.info("%s: running %s (%s)", found.rental_id, found.command[0], found.id)
            self.running[found.id] = RunningExec(
                found.id, found.rental_id, process, output, time.monotonic() + found.timeout_s + KILL_SLACK_S
            )
            self._send(client, found.id, ExecReportRequest(state="running"))

    def poll(self, client: Client) -> None:
        """Report every command that has ended (and kill one past its limit)."""
        for running in list(self.running.values()):
            if running.report is None:
                code = running.process.poll()
                if code is None:
                    if time.monotonic() >= running.kill_at:
                        _kill_group(running.process)
                    continue
                running.report = _ended(code, running.output)
            if self._send(client, running.id, running.report):
                running.output.unlink(missing_ok=True)
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


def _failed(message: str, exit_code: int | None = None) -> ExecReportRequest:
    return ExecReportRequest(state="failed", exit_code=exit_code, message=message[:2000])


def _ended(returncode: int, output: Path) -> ExecReportRequest:
    """The report of a command that ended with `returncode` (a signal N reads as 128 + N, as a shell says)."""
    data, truncated = _tail(output)
    code = returncode if returncode >= 0 else 128 - returncode
    message = "timed out (exit 124 from timeout)" if code == 124 else ""
    return ExecReportRequest(
        state="exited",
        exit_code=code,
        output=data.decode("utf-8", errors="replace"),
        output_truncated=truncated,
        message=message,
    )


def _tail(path: Path) -> tuple[bytes, bool]:
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - MAX_OUTPUT_BYTES))
            return file.read(), size > MAX_OUTPUT_BYTES
    except OSError:
        return b"", False


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
