"""Executors with real child processes: isolation env, notice file, SIGTERM then SIGKILL, whole-group kill."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from suanli.agent import supervisor
from suanli.agent.assignment import Assignment
from suanli.agent.executors import (
    ExecutorError,
    ProcessExecutor,
    ProcessIdentity,
    ProcessWorkload,
    WorkloadState,
    group_alive,
    process_identity,
    record_describes_process,
    record_matches,
)
from suanli.agent.probe import DeclaredProbe, HostInventory
from suanli.agent.workloads import workload_spec
from suanli.domain.plan import Slice

FLEET = Path(__file__).parents[2] / "examples" / "fleet.toml"
WAIT_S = 3.0

TRAPS_TERM = """
import json, os, signal, sys, time
def on_term(signum, frame):
    notice = json.load(open(os.environ["SUANLI_NOTICE_FILE"]))
    print("notice for", notice["rental_id"], "deadline", notice["deadline"], flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open("ready", "w").close()
while True:
    time.sleep(0.01)
"""

IGNORES_TERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open("ready", "w").close()
while True:
    time.sleep(0.01)
"""

SPAWNS_GRANDCHILD = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import signal, time\\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "open('grandchild-ready', 'w').close()\\n"
    "while True: time.sleep(0.01)"])
open("grandchild.pid", "w").write(str(grandchild.pid))
while True:
    time.sleep(0.01)
"""


@pytest.fixture
def host() -> HostInventory:
    return DeclaredProbe.from_file(FLEET, "h100-a-01").inventory()


def launch(tmp_path: Path, host: HostInventory, script: str, rental_id: str = "r-1") -> ProcessWorkload:
    executor = ProcessExecutor(tmp_path)
    assignment = Assignment(rental_id, (Slice(2, 1000, 81920),), (sys.executable, "-c", script))
    return executor.launch(workload_spec(assignment, host, executor))


def eventually(check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.01)


def test_a_child_sees_exactly_its_devices_and_not_the_agents_env(
    tmp_path: Path, host: HostInventory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUANLI_NODE_KEY", "secret-node-key")
    script = (
        "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['SUANLI_RENTAL_ID'], os.getcwd(), "
        "os.environ.get('SUANLI_NODE_KEY'))"
    )
    workload = launch(tmp_path, host, script)
    status = workload.wait(WAIT_S)
    assert (status.state, status.exit_code) == (WorkloadState.EXITED, 0)
    uuid = host.gpus[2].uuid
    assert workload.paths.log_file.read_text().split() == [uuid, "r-1", str(workload.paths.workdir), "None"]
    assert json.loads(workload.paths.record_file.read_text())["pgid"] == workload.pid


def test_a_failing_childs_exit_code_and_stderr_are_kept(tmp_path: Path, host: HostInventory) -> None:
    workload = launch(tmp_path, host, "import sys; sys.stderr.write('boom\\n'); sys.exit(3)")
    status = workload.wait(WAIT_S)
    assert (status.state, status.exit_code) == (WorkloadState.EXITED, 3)
    assert "boom" in workload.paths.log_file.read_text()


def test_a_workload_killed_by_sigkill_ends_137_and_its_log_holds_only_its_own_output(
    tmp_path: Path, host: HostInventory
) -> None:
    """As the OOM killer ends one: the supervisor could not reset SIGKILL's handler (Python refuses), so it
    died with status 1 and wrote its traceback into the tenant's log."""
    workload = launch(
        tmp_path, host, "import os, signal; print('before', flush=True); os.kill(os.getpid(), 9)"
    )
    status = workload.wait(WAIT_S)
    assert (status.state, status.signal, status.exit_code) == (WorkloadState.SIGNALED, signal.SIGKILL, 137)
    assert workload.paths.log_file.read_text() == "before\n"


def test_a_workload_that_traps_sigterm_finds_the_notice_and_exits(
    tmp_path: Path, host: HostInventory
) -> None:
    workload = launch(tmp_path, host, TRAPS_TERM)
    eventually((workload.paths.workdir / "ready").exists)
    deadline = datetime.now(UTC) + timedelta(seconds=30)
    workload.notice(deadline)
    status = workload.wait(WAIT_S)
    assert (status.state, status.exit_code) == (WorkloadState.EXITED, 0)
    assert f"notice for r-1 deadline {deadline.isoformat()}" in workload.paths.log_file.read_text()


def test_a_workload_that_ignores_sigterm_is_killed_at_the_deadline(
    tmp_path: Path, host: HostInventory
) -> None:
    workload = launch(tmp_path, host, IGNORES_TERM)
    eventually((workload.paths.workdir / "ready").exists)
    workload.notice(datetime.now(UTC) + timedelta(seconds=0.3))
    assert workload.paths.notice_file.exists()
    assert workload.wait(0.2).running  # SIGTERM was ignored
    status = workload.kill()  # the agent's deadline timer fires
    assert (status.state, status.signal, status.exit_code) == (WorkloadState.SIGNALED, signal.SIGKILL, 137)


def test_stop_escalates_to_sigkill_after_the_grace(tmp_path: Path, host: HostInventory) -> None:
    workload = launch(tmp_path, host, IGNORES_TERM)
    eventually((workload.paths.workdir / "ready").exists)
    started = time.monotonic()
    status = workload.stop(grace_s=0.3)
    assert 0.3 <= time.monotonic() - started < WAIT_S
    assert (status.state, status.signal) == (WorkloadState.SIGNALED, signal.SIGKILL)


def test_stop_of_a_polite_workload_returns_before_the_grace(tmp_path: Path, host: HostInventory) -> None:
    workload = launch(tmp_path, host, "import time\nopen('ready', 'w').close()\ntime.sleep(60)")
    eventually((workload.paths.workdir / "ready").exists)
    started = time.monotonic()
    status = workload.stop(grace_s=WAIT_S)
    assert time.monotonic() - started < WAIT_S / 2
    assert (status.state, status.signal) == (WorkloadState.SIGNALED, signal.SIGTERM)


def test_stopping_kills_the_whole_process_group_leaving_no_orphan(
    tmp_path: Path, host: HostInventory
) -> None:
    workload = launch(tmp_path, host, SPAWNS_GRANDCHILD)
    pid_file = workload.paths.workdir / "grandchild.pid"
    eventually(lambda: (workload.paths.workdir / "grandchild-ready").exists() and bool(pid_file.read_text()))
    grandchild = int(pid_file.read_text())
    assert os.getpgid(grandchild) == workload.pid
    workload.stop(grace_s=0.3)  # the child dies on SIGTERM; the grandchild ignores it
    eventually(lambda: not group_alive(workload.pid))
    eventually(lambda: not _alive(grandchild))


def test_a_rerun_does_not_see_the_previous_runs_notice(tmp_path: Path, host: HostInventory) -> None:
    first = launch(tmp_path, host, IGNORES_TERM)
    eventually((first.paths.workdir / "ready").exists)
    first.notice(datetime.now(UTC) + timedelta(seconds=1))
    first.kill()
    second = launch(
        tmp_path, host, "import os, sys; sys.exit(os.path.exists(os.environ['SUANLI_NOTICE_FILE']))"
    )
    assert second.wait(WAIT_S).exit_code == 0


def test_bad_rental_ids_and_missing_programs_are_refused(tmp_path: Path, host: HostInventory) -> None:
    with pytest.raises(ExecutorError, match="safe directory name"):
        ProcessExecutor(tmp_path).paths("../etc")
    executor = ProcessExecutor(tmp_path)
    assignment = Assignment("r-2", (), ("/nonexistent/program",))
    with pytest.raises(ExecutorError, match="cannot start"):
        executor.launch(workload_spec(assignment, host, executor))
    typo = Assignment("r-3", (), ("pyhton3", "train.py"))
    with pytest.raises(ExecutorError, match=r"cannot start 'pyhton3': not found in PATH \(") as missing:
        executor.launch(workload_spec(typo, host, executor))
    assert missing.value.exit_code == 127  # as a shell says "command not found"
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")  # no execute bit
    unrunnable = Assignment("r-4", (), (str(script),))
    with pytest.raises(ExecutorError, match="Permission denied") as denied:
        executor.launch(workload_spec(unrunnable, host, executor))
    assert denied.value.exit_code == 126


def test_a_program_on_no_directory_of_path_is_not_found_whatever_exec_said(tmp_path: Path) -> None:
    """A uid of its own cannot search /root/.local/bin: exec then says "Permission denied" for a program that
    is nowhere on the PATH; the message says it is not found. One that is there keeps exec's reason."""
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    denied = PermissionError(13, "Permission denied")
    env = {"PATH": f"/root/.local/bin:{tmp_path}"}
    assert supervisor._why("tol", env, denied) == f"not found in PATH (/root/.local/bin:{tmp_path})"
    assert supervisor._why("tool", env, denied) == "[Errno 13] Permission denied"
    assert supervisor._why("./tol", env, denied) == "[Errno 13] Permission denied"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def test_a_workload_record_names_its_leaders_boot_and_start_time(tmp_path: Path, host: HostInventory) -> None:
    workload = launch(tmp_path, host, "import time; time.sleep(5)")
    try:
        record = json.loads(workload.paths.record_file.read_text())
        identity = process_identity(workload.pid)
        assert identity is not None
        assert (record["boot_id"], record["start_ticks"]) == (identity.boot_id, identity.start_ticks)
        assert record_describes_process(record, workload.pid) is True
    finally:
        workload.kill()


NOW = ProcessIdentity("boot-b", 5000)


@pytest.mark.parametrize(
    ("record", "now", "started", "expected"),
    [
        ({"boot_id": "boot-b", "start_ticks": 5000}, NOW, None, True),
        ({"boot_id": "boot-a", "start_ticks": 5000}, NOW, None, False),  # a reboot
        ({"boot_id": "boot-b", "start_ticks": 4000}, NOW, None, False),  # a reused pid
        ({"boot_id": "boot-b", "start_ticks": 5000}, None, None, None),  # no such process, or no /proc
        ({"started_unix_s": 1000.0}, NOW, 1000.5, True),  # an older record: by wall clock
        ({"started_unix_s": 1000.0}, NOW, 1000.0 + 86400, False),
        ({"started_unix_s": 1000.0}, NOW, None, None),
        ({}, NOW, 1000.0, None),
    ],
)
def test_a_record_matches_the_process_with_its_pid_only_when_that_can_be_told(
    record: dict[str, object], now: ProcessIdentity | None, started: float | None, expected: bool | None
) -> None:
    assert record_matches(record, now, started) is expected
