"""`suanli agent --run-as USER`: host-process workloads run as that user, so they cannot read the agent's node
key (agent.json, 0600), list the rentals on the host or read another rental's log, and still find their
notice file and their own working directory. Starting a process as another user needs root: CI runs as root,
so these run there (and fail if it does not); elsewhere they are skipped."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import agent_cli
from suanli.agent.executor_choice import ExecutorKind, choose_executor
from suanli.agent.executors import ExecutorError, ProcessExecutor, RunAs, WorkloadSpec, WorkloadState

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true",
    reason="starting a process as another user needs root",
)
USER = "nobody"  # on every Debian host
WAIT_S = 10.0


def spec(rental_id: str, script: str, executor: ProcessExecutor) -> WorkloadSpec:
    notice = executor.paths(rental_id).notice_file
    return WorkloadSpec(rental_id, ("/bin/sh", "-c", script), {"SUANLI_NOTICE_FILE": str(notice)})


def test_a_workload_run_as_another_user_cannot_read_the_node_key_nor_other_rentals(base: Path) -> None:
    executor = ProcessExecutor(base, run_as=RunAs.of(USER))
    other = executor.launch(spec("r-0", "echo another tenant", executor))
    assert other.wait(WAIT_S).exit_code == 0
    probe = (
        "id -u; "
        f"cat {base / 'agent.json'} >/dev/null 2>&1 && echo key=read || echo key=denied; "
        f"ls {base / 'rentals'} >/dev/null 2>&1 && echo list=listed || echo list=denied; "
        f"cat {other.paths.log_file} >/dev/null 2>&1 && echo other=read || echo other=denied; "
        'echo mine > mine.txt && [ "$HOME" = "$(pwd)" ] && echo home=own'
    )
    workload = executor.launch(spec("r-1", probe, executor))
    status = workload.wait(WAIT_S)
    assert (status.state, status.exit_code) == (WorkloadState.EXITED, 0)
    said = workload.paths.log_file.read_text().split()
    assert said == [str(RunAs.of(USER).uid), "key=denied", "list=denied", "other=denied", "home=own"]
    assert (workload.paths.workdir / "mine.txt").stat().st_uid == RunAs.of(USER).uid


def test_a_workload_run_as_another_user_reads_its_notice(base: Path) -> None:
    executor = ProcessExecutor(base, run_as=RunAs.of(USER))
    traps = (
        "trap 'cat \"$SUANLI_NOTICE_FILE\"; echo; exit 0' TERM; touch ready; while true; do sleep 0.05; done"
    )
    workload = executor.launch(spec("r-1", traps, executor))
    ready = workload.paths.workdir / "ready"
    deadline = datetime.now(UTC) + timedelta(seconds=30)
    waited = 0.0
    while not ready.exists() and waited < WAIT_S:
        time.sleep(0.02)
        waited += 0.02
    workload.notice(deadline)
    status = workload.wait(WAIT_S)
    assert (status.state, status.exit_code) == (WorkloadState.EXITED, 0)
    assert deadline.isoformat() in workload.paths.log_file.read_text()


def test_run_as_names_what_is_wrong(base: Path) -> None:
    with pytest.raises(ExecutorError, match="no such user"):
        RunAs.of("no-such-user-here")
    with pytest.raises(ExecutorError, match="not container"):
        choose_executor(ExecutorKind.CONTAINER, base, run_as=USER)
    chosen = choose_executor(ExecutorKind.PROCESS, base, run_as=USER)
    assert isinstance(chosen, ProcessExecutor) and chosen.run_as == RunAs.of(USER)


def test_suanli_agent_refuses_an_unknown_run_as_user(tmp_path: Path) -> None:
    result = agent_cli(tmp_path, "--run-as", "no-such-user-here")
    assert result.exit_code == 2, result.output
    assert "--run-as 'no-such-user-here': no such user on this host" in " ".join(result.output.split())


def test_run_as_refuses_a_work_dir_other_users_cannot_reach() -> None:
    hidden = Path(tempfile.mkdtemp(prefix="suanli-hidden-"))  # 0700, as /root is
    try:
        with pytest.raises(ExecutorError, match="cannot be passed through by other users"):
            ProcessExecutor(hidden / "agent", run_as=RunAs.of(USER))
    finally:
        shutil.rmtree(hidden)
