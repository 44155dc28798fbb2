"""The agent's side of `suanli exec` (`agent/execs.py`) with the real process executor and a recording
stand-in for the server: each command starts once, its end is told with its output's tail, a report the
server did not take is sent again, and what cannot run is reported failed with the reason."""

from __future__ import annotations

import time
from pathlib import Path

from suanli.agent.execs import MAX_OUTPUT_BYTES, ExecRunner
from suanli.agent.executors import ProcessExecutor, WorkloadSpec
from suanli.client import ServerUnreachable
from suanli.wire.agent_schemas import ExecAssignmentResponse, ExecReportRequest


class Server:
    """Records each report; refuses the first `down` of them as unreachable."""

    def __init__(self, down: int = 0) -> None:
        self.reports: list[tuple[str, ExecReportRequest]] = []
        self.down = down

    def report_exec(self, exec_id: str, report: ExecReportRequest) -> None:
        if self.down:
            self.down -= 1
            raise ServerUnreachable("connection refused")
        self.reports.append((exec_id, report))


def listed(exec_id: str, *command: str, state: str = "queued", timeout_s: int = 10) -> ExecAssignmentResponse:
    return ExecAssignmentResponse(
        id=exec_id, rental_id="r-1", command=list(command), timeout_s=timeout_s, state=state
    )


def until_reported(runner: ExecRunner, server: Server, timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while runner.running:
        assert time.monotonic() < end, "never reported"
        runner.poll(server)  # type: ignore[arg-type]
        time.sleep(0.02)


def test_a_command_starts_once_and_its_end_and_output_tail_are_reported(tmp_path: Path) -> None:
    executor = ProcessExecutor(tmp_path)
    executor.paths("r-1").create()
    spec = WorkloadSpec("r-1", ("sleep", "30"), {"CUDA_VISIBLE_DEVICES": "GPU-1"})
    runner, server = ExecRunner(executor, tmp_path), Server(down=2)  # "running" and the first end report lost
    big = f"import sys; sys.stdout.write('x' * {MAX_OUTPUT_BYTES} + 'END'); raise SystemExit(5)"
    command = listed("exe_1", "python3", "-c", big)
    runner.start(server, [command], lambda rental: spec)  # type: ignore[arg-type]
    runner.start(server, [command], lambda rental: spec)  # listed again by the next heartbeat: not twice
    assert list(runner.running) == ["exe_1"] and server.reports == []
    until_reported(runner, server)
    ((exec_id, ended),) = server.reports
    assert exec_id == "exe_1" and (ended.state, ended.exit_code) == ("exited", 5)
    assert ended.output.endswith("END") and len(ended.output) == MAX_OUTPUT_BYTES and ended.output_truncated
    assert not list((tmp_path / "execs").iterdir())  # its output file goes once its end is told


def test_what_cannot_run_here_is_reported_failed_with_the_reason(tmp_path: Path) -> None:
    executor = ProcessExecutor(tmp_path)
    runner, server = ExecRunner(executor, tmp_path), Server()
    runner.start(server, [listed("exe_gone", "true")], lambda rental: None)  # type: ignore[arg-type]
    runner.start(server, [listed("exe_old", "true", state="running")], lambda rental: None)  # type: ignore[arg-type]
    spec = WorkloadSpec("r-1", ("sleep", "30"), {})
    runner.start(server, [listed("exe_nodir", "true")], lambda rental: spec)  # type: ignore[arg-type]
    said = {exec_id: (r.state, r.message) for exec_id, r in server.reports}
    assert said["exe_gone"] == ("failed", "the rental's workload is not running on this node")
    assert said["exe_old"][0] == "failed" and "agent restarted while it ran" in said["exe_old"][1]
    assert said["exe_nodir"][0] == "failed" and "no working directory" in said["exe_nodir"][1]
    assert runner.running == {}
