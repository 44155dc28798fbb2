"""How a workload ended reaches the server even when no agent ran at its end: the supervisor each workload
runs under writes its exit status next to `workload.json`, and the agent process that comes back reports it.
Real child processes; the agent side is dropped without stopping them, as when its process dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_runner_lifecycle import FakeClient, assignment, eventually, make_runner

from suanli.agent.containers import ContainerExecutor
from suanli.agent.executors import ProcessExecutor, WorkloadSpec, group_alive
from suanli.agent.orphans import find_orphans
from suanli.agent.runner import AgentRunner

# waits for the test's `go` (at most a minute, so that a test that fails midway leaves no workload behind)
WAITS_FOR_GO = (
    "import os, time\ngive_up = time.monotonic() + 60\n"
    "while not os.path.exists('go') and time.monotonic() < give_up: time.sleep(0.02)\n"
)


def left_behind(tmp_path: Path, client: FakeClient, script: str) -> int:
    """Start `script` as rental r-1 with one agent step, then drop that agent (its process "dies"); the
    process group id of the workload it leaves running."""
    client.assignments = [assignment("r-1", script)]
    first = make_runner(tmp_path, client)
    first.step()
    return first.local["r-1"].workload.pid


def go(tmp_path: Path) -> None:
    (ProcessExecutor(tmp_path).paths("r-1").workdir / "go").touch()


def reported(client: FakeClient) -> list[tuple[str, int | None]]:
    return [(w.state, w.exit_code) for w in client.reports[-1] if w.rental_id == "r-1"]


def come_back(tmp_path: Path, client: FakeClient) -> AgentRunner:
    """A new agent process: it finds the record, then reports what it found over two steps."""
    runner = make_runner(tmp_path, client)
    runner.step()
    runner.step()
    return runner


@pytest.mark.parametrize(
    ("ending", "expected"),
    [
        ("raise SystemExit(0)", ("succeeded", 0)),
        ("raise SystemExit(3)", ("failed", 3)),
        ("os.kill(os.getpid(), 15)", ("failed", 128 + 15)),
    ],
    ids=["exit-0", "exit-3", "sigterm"],
)
def test_a_workload_that_ended_while_the_agent_was_away_is_reported_with_how_it_ended(
    tmp_path: Path, ending: str, expected: tuple[str, int]
) -> None:
    client = FakeClient()
    pgid = left_behind(tmp_path, client, WAITS_FOR_GO + ending)
    go(tmp_path)
    eventually(lambda: not group_alive(pgid))  # it ended while no agent ran
    runner = come_back(tmp_path, client)
    assert reported(client) == [expected], "a workload's end the supervisor recorded was reported as unknown"
    assert "r-1" not in make_runner(tmp_path, client).orphans  # reported once: the record is gone
    assert not runner.local["r-1"].workload  # never started again
    assert not ProcessExecutor(tmp_path).paths("r-1").exit_file.exists()


def test_a_workload_whose_supervisor_was_killed_is_reported_failed_with_its_exit_code_unknown(
    tmp_path: Path,
) -> None:
    client = FakeClient()
    supervisor = left_behind(tmp_path, client, WAITS_FOR_GO + "open('done', 'w').close()")
    os.kill(supervisor, signal.SIGKILL)  # the supervisor alone: the workload runs on, then ends by itself
    go(tmp_path)
    eventually(lambda: not group_alive(supervisor))
    assert (ProcessExecutor(tmp_path).paths("r-1").workdir / "done").exists(), "the workload did not end"
    come_back(tmp_path, client)
    assert reported(client) == [("failed", None)]


def test_an_adopted_workload_that_ends_while_the_new_agent_watches_is_reported_with_its_exit_code(
    tmp_path: Path,
) -> None:
    client = FakeClient()
    pgid = left_behind(tmp_path, client, WAITS_FOR_GO + "raise SystemExit(3)")
    runner = make_runner(tmp_path, client)
    runner.step()  # adopted
    runner.step()
    assert reported(client) == [("running", None)]
    go(tmp_path)
    eventually(lambda: not group_alive(pgid))
    runner.step()
    assert reported(client) == [("failed", 3)]


STUBBORN = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(0.02)"
POLITE = "import time\nwhile True: time.sleep(0.02)"


@pytest.mark.parametrize("script", [POLITE, STUBBORN], ids=["polite", "stubborn"])
def test_an_adopted_workload_the_server_stops_is_reported_stopped(tmp_path: Path, script: str) -> None:
    client = FakeClient()
    pgid = left_behind(tmp_path, client, script)
    runner = make_runner(tmp_path, client)
    runner.step()  # adopted
    client.assignments = [assignment("r-1", script, action="stop")]
    runner.step()  # stopped: SIGTERM, then SIGKILL after the grace
    runner.step()
    assert not group_alive(pgid)
    assert [state for state, _ in reported(client)] == ["stopped"], "a stop the server asked was a failure"


def test_a_container_workloads_end_is_recorded_for_a_later_agent(tmp_path: Path) -> None:
    """The attached `docker run` ends with its container's exit code; a stand-in runtime does so here."""
    runtime = tmp_path / "docker"
    runtime.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(int(sys.argv[-1]))\n")
    runtime.chmod(0o755)
    executor = ContainerExecutor(tmp_path / "agent", runtime=str(runtime))
    spec = WorkloadSpec("r-7", ("exit", "3"), {}, image="ubuntu:24.04")
    workload = executor.launch(spec)
    eventually(lambda: not group_alive(workload.pid))
    orphan = find_orphans(tmp_path / "agent")["r-7"]
    assert (orphan.alive, orphan.ended and orphan.ended.exit_code) == (False, 3)


def test_a_supervised_workload_gets_exactly_its_environment_and_the_signal_state_of_a_direct_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of the supervisor leaks into the workload: no variable (Python in the C locale would add
    LC_CTYPE to its own), no ignored, caught or blocked signal unlike a child the agent starts itself (here
    an agent that ignores SIGHUP, as under nohup)."""
    for name in ("LANG", "LC_ALL", "LC_CTYPE"):
        monkeypatch.delenv(name, raising=False)
    executor = ProcessExecutor(tmp_path)
    env = {"SUANLI_RENTAL_ID": "r-1", "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}
    shows_signals = ("grep", "-E", "^Sig(Ign|Blk|Cgt)", "/proc/self/status")  # of grep itself
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        workloads = [
            executor.launch(WorkloadSpec("r-1", ("cat", "/proc/self/environ"), env)),
            executor.launch(WorkloadSpec("r-2", shows_signals, {})),
        ]
        direct = subprocess.run(shows_signals, capture_output=True, check=True)
    finally:
        signal.signal(signal.SIGHUP, before)
    for workload in workloads:
        eventually(lambda workload=workload: not workload.poll().running)
        assert workload.poll().exit_code == 0
    environ = executor.paths("r-1").log_file.read_text()
    paths = executor.paths("r-1")
    expected = {"PATH": os.environ["PATH"], "HOME": str(paths.workdir), "TMPDIR": str(paths.tmp_dir), **env}
    expected |= {name: os.environ[name] for name in ("TZ",) if name in os.environ}
    assert dict(item.split("=", 1) for item in environ.split("\0") if item) == expected
    assert executor.paths("r-2").log_file.read_text() == direct.stdout.decode()
