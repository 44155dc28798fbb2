"""The agent's side of `suanli exec` (`agent/execs.py`) with the real process executor and a recording
stand-in for the server: each command starts once, what it prints is sent as it runs and its end with the
rest, a report the server did not take is sent again, and what cannot run is reported failed with the
reason."""

from __future__ import annotations

import time
from pathlib import Path

from suanli.agent.execs import MAX_OUTPUT_CHARS, PROGRESS_S, ExecRunner
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
    big = f"import sys; sys.stdout.write('x' * {MAX_OUTPUT_CHARS} + 'END'); raise SystemExit(5)"
    command = listed("exe_1", "python3", "-c", big)
    runner.start(server, [command], lambda rental: spec)  # type: ignore[arg-type]
    runner.start(server, [command], lambda rental: spec)  # listed again by the next heartbeat: not twice
    assert list(runner.running) == ["exe_1"] and server.reports == []
    until_reported(runner, server)
    *progress, (exec_id, ended) = server.reports
    assert exec_id == "exe_1" and (ended.state, ended.exit_code) == ("exited", 5)
    assert all(report.state == "running" for _, report in progress)
    # the server gets the last 64 Ki characters at most, and where they start: the rest is marked lost
    assert ended.output.endswith("END") and ended.output_from_chars is not None
    assert ended.output_from_chars + len(ended.output) == MAX_OUTPUT_CHARS + 3
    assert len(ended.output) <= MAX_OUTPUT_CHARS
    assert not list((tmp_path / "execs").iterdir())  # its output file goes once its end is told


def test_what_a_command_prints_is_sent_as_it_runs_and_the_rest_with_its_end(tmp_path: Path) -> None:
    """A line, a pause, a line cut in the middle of a character: the first line reaches the server while
    the command still runs; the end report carries the rest from where the server's text ends, whole."""
    executor = ProcessExecutor(tmp_path)
    executor.paths("r-1").create()
    spec = WorkloadSpec("r-1", ("sleep", "30"), {})
    runner, server = ExecRunner(executor, tmp_path), Server()
    script = (
        f"import sys, time\nsys.stdout.write('step 1\\n'); sys.stdout.flush(); time.sleep(3 * {PROGRESS_S})\n"
        "data = 'π done\\n'.encode(); sys.stdout.buffer.write(data[:1]); sys.stdout.flush()\n"
        f"time.sleep({PROGRESS_S})\n"
        "sys.stdout.buffer.write(data[1:])"
    )
    runner.start(server, [listed("exe_s", "python3", "-c", script)], lambda rental: spec)  # type: ignore[arg-type]
    until_reported(runner, server)
    states = [(report.state, report.output, report.output_from_chars) for _, report in server.reports]
    assert states[0] == ("running", "", None)  # started
    assert ("running", "step 1\n", 0) in states  # before its end
    pieces = [(start, output) for _, output, start in states[1:]]
    assert all(start == sum(len(o) for _, o in pieces[:i]) for i, (start, _) in enumerate(pieces))
    assert "".join(output for _, output in pieces) == "step 1\nπ done\n"  # the cut character came whole
    assert states[-1][0] == "exited"


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


def test_a_command_an_earlier_agent_process_started_is_ended_by_the_next_one(tmp_path: Path) -> None:
    """The agent restarted while a command ran: the new one reported it failed ("its end is unknown") and
    left it running, unmanaged, so a user who ran it again had two copies. The next agent process ends what
    the earlier one started before it reports it, and says so."""
    executor = ProcessExecutor(tmp_path)
    executor.paths("r-1").create()
    spec = WorkloadSpec("r-1", ("sleep", "30"), {})
    first, server = ExecRunner(executor, tmp_path), Server()
    long_one = listed("exe_long", "sh", "-c", "sleep 477 & sleep 477", timeout_s=600)
    first.start(server, [long_one], lambda rental: spec)  # type: ignore[arg-type]
    process = first.running["exe_long"].process
    end = time.monotonic() + 10
    while len(_sleeping("sleep 477")) < 2:
        assert time.monotonic() < end, "the command never started"
        time.sleep(0.05)
    second = ExecRunner(executor, tmp_path)  # the agent's next process, after a restart
    second.start(server, [listed("exe_long", "true", state="running")], lambda rental: spec)  # type: ignore[arg-type]
    end = time.monotonic() + 5
    while _sleeping("sleep 477") or process.poll() is None:
        assert time.monotonic() < end, "the command outlived the agent that started it"
        time.sleep(0.05)
    (state, message) = [(r.state, r.message) for exec_id, r in server.reports if exec_id == "exe_long"][-1]
    assert state == "failed" and "it was ended" in message, message
    assert not [p for p in (tmp_path / "execs").iterdir() if p.name.startswith("exe_long")]


def _sleeping(needle: str) -> list[int]:
    """Pids of live processes (not zombies) whose command line is `needle`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text == needle and state != "Z":
            found.append(int(cmdline.parent.name))
    return found
