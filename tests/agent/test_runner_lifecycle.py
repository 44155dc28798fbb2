"""The agent loop over a workload's life with a fake server client and real child processes: transient server
errors, an agent restart (adoption, workloads that ended meanwhile, stale records), logs and releases."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from suanli.agent import host_gpus
from suanli.agent import runner as runner_module
from suanli.agent.executors import ProcessExecutor, group_alive
from suanli.agent.probe import DeclaredProbe
from suanli.agent.runner import AgentError, AgentRunner
from suanli.client import BAD_RESPONSE, ApiError, ServerUnreachable
from suanli.wire.agent_schemas import AssignmentResponse, HeartbeatResponse, LogChunkResponse
from suanli.wire.schemas import SliceResponse

FLEET = Path(__file__).parents[2] / "examples" / "fleet.toml"


class FakeClient:
    """The server side of heartbeats and log uploads, as the agent sees it."""

    def __init__(self) -> None:
        self.assignments: list[AssignmentResponse] = []
        self.reports: list[list] = []
        self.logs: dict[str, bytearray] = {}
        self.fail_next: list[Exception] = []
        self.runs_images: list[bool | None] = []  # what each heartbeat said
        self.mig_layouts: list[dict[int, list[tuple[int, str]]] | None] = []  # GPU -> (start, profile)
        self.mig_busy: list[set[tuple[int, int, str]]] = []  # (GPU, start, profile) each heartbeat said busy
        self.gpu_models: list[list[str] | None] = []  # the host's GPUs' models each heartbeat said

    def heartbeat(self, request):
        if self.fail_next:
            raise self.fail_next.pop(0)
        self.reports.append(list(request.workloads))
        self.runs_images.append(request.runs_images)
        self.gpu_models.append(request.gpu_models)
        self.mig_layouts.append(
            None
            if request.mig_layouts is None
            else {g.index: [(i.start_slot, i.profile) for i in g.instances] for g in request.mig_layouts}
        )
        self.mig_busy.append(
            {
                (g.index, i.start_slot, i.profile)
                for g in request.mig_layouts or ()
                for i in g.instances
                if i.busy
            }
        )
        return HeartbeatResponse(node="h100-a-01", heartbeat_interval_s=0.05, assignments=self.assignments)

    def upload_log(self, rental_id, offset, data):
        stored = self.logs.setdefault(rental_id, bytearray())
        if offset == len(stored) and data:
            stored.extend(data)
        return LogChunkResponse(stored_bytes=len(stored))

    def close(self) -> None:
        pass


def assignment(rental_id: str, script: str, *, gpu: int = 2, deadline=None, action="run", piece=None):
    """A run (or stop) of `script` on one whole H100 (GPU `gpu`), or on `piece` (a MIG slice)."""
    return AssignmentResponse(
        rental_id=rental_id,
        action=action,
        slices=[piece or SliceResponse(gpu_index=gpu, milli=1000, memory_mib=81920)],
        command=[sys.executable, "-c", script],
        env={},
        notice_deadline=deadline,
    )


RUNNERS: list[AgentRunner] = []  # the runners this test made: their workloads end with it


@pytest.fixture(autouse=True)
def _no_workload_outlives_its_test() -> Iterator[None]:
    """Kill what the test's runners still run when it ends (an assert failed, or the test left it running):
    a workload that loops for ever must not outlive the test run."""
    yield
    for runner in RUNNERS:
        for local in runner.local.values():
            if local.workload is not None and local.workload.poll().running:
                local.workload.kill()
    RUNNERS.clear()


def make_runner(work_dir: Path, client: FakeClient, node: str = "h100-a-01") -> AgentRunner:
    runner = AgentRunner(
        "http://server.test",
        DeclaredProbe.from_file(FLEET, node),
        work_dir,
        interval_s=0.05,
        grace_s=0.5,
        client_factory=lambda url, key: client,
    )
    runner._client = client  # as after registration
    RUNNERS.append(runner)
    return runner


def eventually(check, timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503])
def test_a_transient_server_error_does_not_end_the_agent(tmp_path: Path, status: int) -> None:
    client = FakeClient()
    client.fail_next = [ApiError(status, "internal", "try again")]
    runner = make_runner(tmp_path, client)
    runner._connect = lambda stopping: None  # already registered
    stopping = threading.Event()
    threading.Timer(0.5, stopping.set).start()
    runner.run(stopping)
    assert client.reports, "the agent never heartbeat again after one transient error"


def test_every_heartbeat_says_the_models_of_the_hosts_gpus(tmp_path: Path) -> None:
    """The server compares them with the fleet's node, and cordons the node while they differ."""
    client = FakeClient()
    runner = make_runner(tmp_path, client, node="ascend-01")
    runner.step()
    assert client.gpu_models == [["Ascend-910B"] * 8]


def test_an_answer_the_agent_cannot_read_is_retried_and_logged_as_an_error_that_says_upgrade(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = FakeClient()
    client.fail_next = [ApiError(502, BAD_RESPONSE, "the server's answer is not valid")] * 2
    runner = make_runner(tmp_path, client)
    runner._connect = lambda stopping: None  # already registered
    stopping = threading.Event()
    threading.Timer(1.5, stopping.set).start()
    with caplog.at_level(logging.WARNING, logger=runner_module.log.name):
        runner.run(stopping)
    assert client.reports, "the agent stopped trying after answers it could not read"
    unreadable = [r for r in caplog.records if "upgrade the agent" in r.getMessage()]
    assert len(unreadable) == 2 and all(r.levelno == logging.ERROR for r in unreadable), caplog.text


def test_an_agent_whose_server_keeps_failing_still_shuts_down_when_asked(tmp_path: Path) -> None:
    client = FakeClient()
    client.fail_next = [ApiError(503, "unavailable", "try again")] * 1000
    runner = make_runner(tmp_path, client)
    runner._connect = lambda stopping: None  # already registered
    stopping = threading.Event()
    threading.Timer(0.3, stopping.set).start()
    began = time.monotonic()
    runner.run(stopping)
    assert time.monotonic() - began < 2.0
    assert not client.reports


def test_a_refusal_that_retrying_cannot_change_still_ends_the_agent(tmp_path: Path) -> None:
    client = FakeClient()
    client.fail_next = [ApiError(403, "forbidden", "not a node key")]
    runner = make_runner(tmp_path, client)
    runner._connect = lambda stopping: None  # already registered
    with pytest.raises(ApiError):
        runner.run(threading.Event())


class TakenOverServer(FakeClient):
    """A server that has given the node's key to another agent and refuses this one's join token."""

    def register_agent(self, token, inventory):
        raise ApiError(409, "conflict", "node h100-a-01 has a live agent")


def test_an_agent_that_loses_its_node_key_stops_its_workloads_before_it_exits(tmp_path: Path) -> None:
    """Left running, the workload would go on unbilled beside its copy started by the node's new agent."""
    client = TakenOverServer()
    client.assignments = [assignment("r-1", "import time; time.sleep(60)")]
    runner = make_runner(tmp_path, client)
    runner.join_token = "jt_spent"
    runner._connect = lambda stopping: None  # already registered
    stopping = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            runner.run(stopping)
        except BaseException as error:  # handed to the test's thread
            failure.append(error)

    agent = threading.Thread(target=run)
    agent.start()
    eventually(lambda: "r-1" in runner.local and runner.local["r-1"].workload is not None)
    pgid = runner.local["r-1"].workload.pid
    client.fail_next = [ApiError(401, "unauthorized", "unknown or revoked node key")]
    agent.join(timeout=10)
    stopping.set()
    assert not agent.is_alive()
    assert failure and isinstance(failure[0], AgentError)
    assert not group_alive(pgid), "the workload outlived its agent's loss of the node"


COUNTS_AND_ENDS = "open('runs', 'a').write('run\\n')\nimport time; time.sleep(0.3)"


def test_a_workload_that_ended_while_the_agent_was_away_is_not_started_again(tmp_path: Path) -> None:
    client = FakeClient()
    client.assignments = [assignment("r-1", COUNTS_AND_ENDS)]
    first = make_runner(tmp_path, client)
    first.step()  # launched; the agent process then dies
    pgid = first.local["r-1"].workload.pid
    eventually(lambda: not group_alive(pgid))  # the workload ends (exit 0) while no agent runs
    second = make_runner(tmp_path, client)  # the server still assigns r-1: no report of its end reached it
    second.step()
    time.sleep(0.5)
    runs = (ProcessExecutor(tmp_path).paths("r-1").workdir / "runs").read_text().splitlines()
    assert len(runs) == 1, f"the workload ran {len(runs)} times"


def test_the_end_of_a_workload_that_ended_while_the_agent_was_away_is_reported_once(tmp_path: Path) -> None:
    client = FakeClient()
    client.assignments = [assignment("r-1", COUNTS_AND_ENDS)]
    first = make_runner(tmp_path, client)
    first.step()
    pgid = first.local["r-1"].workload.pid
    eventually(lambda: not group_alive(pgid))
    record = ProcessExecutor(tmp_path).paths("r-1").record_file
    second = make_runner(tmp_path, client)
    second.step()  # the server still assigns r-1: its end is known from here on
    assert record.is_file(), "the record went before the server heard of the end"
    second.step()  # the end is reported
    ended = [w for w in client.reports[-1] if w.rental_id == "r-1"]
    assert [(w.state, w.exit_code) for w in ended] == [("succeeded", 0)]  # as its supervisor recorded it
    assert not record.exists()
    assert "r-1" not in make_runner(tmp_path, client).orphans  # a later agent process reports it no more


def test_the_record_of_a_workload_that_ended_unassigned_while_the_agent_was_away_is_removed(
    tmp_path: Path,
) -> None:
    client = FakeClient()
    client.assignments = [assignment("r-1", COUNTS_AND_ENDS)]
    first = make_runner(tmp_path, client)
    first.step()
    pgid = first.local["r-1"].workload.pid
    eventually(lambda: not group_alive(pgid))
    client.assignments = []  # the server ended r-1 meanwhile
    second = make_runner(tmp_path, client)
    second.step()
    assert not ProcessExecutor(tmp_path).paths("r-1").record_file.exists()
    assert "r-1" not in second.local


def write_record(work_dir: Path, rental_id: str, pid: int, **fields: object) -> Path:
    record = work_dir / "rentals" / rental_id / "workload.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"rental_id": rental_id, "pid": pid, "pgid": pid, "devices": [], **fields}))
    return record


@pytest.mark.parametrize(
    "fields",
    [
        {"started_unix_s": time.time() - 86400},  # an older record, a day before that program started
        {"started_unix_s": time.time(), "boot_id": "an-earlier-boot", "start_ticks": 1},
    ],
)
def test_a_stale_workload_record_does_not_get_an_unrelated_process_group_killed(
    tmp_path: Path, fields: dict[str, object]
) -> None:
    # A record left by a run before the host rebooted: its pgid now belongs to some other program.
    unrelated = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        record = write_record(tmp_path, "r-old", unrelated.pid, **fields)
        client = FakeClient()  # the server assigns nothing here (r-old ended long ago)
        runner = make_runner(tmp_path, client)
        runner.step()
        time.sleep(0.2)
        assert unrelated.poll() is None, "the agent SIGKILLed a process group it never started"
        assert not record.exists()
    finally:
        unrelated.kill()
        unrelated.wait()


def test_a_stale_workload_record_of_a_rental_still_assigned_reports_its_end(tmp_path: Path) -> None:
    unrelated = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        write_record(tmp_path, "r-1", unrelated.pid, boot_id="an-earlier-boot", start_ticks=1)
        client = FakeClient()
        client.assignments = [assignment("r-1", COUNTS_AND_ENDS)]
        runner = make_runner(tmp_path, client)
        runner.step()
        runner.step()
        assert [(w.state, w.exit_code) for w in client.reports[-1]] == [("failed", None)]
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()


def test_a_live_group_that_cannot_be_told_ours_is_neither_adopted_nor_killed(tmp_path: Path) -> None:
    unrelated = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        write_record(tmp_path, "r-old", unrelated.pid)  # no start time of any kind to compare
        runner = make_runner(tmp_path, FakeClient())
        assert "r-old" not in runner.orphans
        runner.step()
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()


PRINTS_3_MIB = "import sys\nsys.stdout.write('x' * (3 * 1024 * 1024))\nsys.stdout.flush()"


def test_the_whole_log_of_an_ended_workload_is_shipped_before_it_is_forgotten(tmp_path: Path) -> None:
    client = FakeClient()
    client.assignments = [assignment("r-1", PRINTS_3_MIB)]
    runner = make_runner(tmp_path, client)
    runner.step()  # launched
    eventually(lambda: not runner.local["r-1"].workload.poll().running)
    client.assignments = []  # the server ends the rental on the report of its end
    runner.step()  # polled (succeeded), 2 MiB shipped, reported; kept: more of its log waits
    runner.step()  # the rest shipped; forgotten at reconcile
    runner.step()
    shipped = len(client.logs["r-1"])
    assert shipped == 3 * 1024 * 1024, f"{3 * 1024 * 1024 - shipped} bytes of output never shipped"
    assert "r-1" not in runner.local
    assert not ProcessExecutor(tmp_path).paths("r-1").root.exists()  # removed once shipped, not before


WRITES_SCRATCH = (
    "import os\nos.makedirs('data/locked')\nopen('data/locked/secret', 'w').write('tenant data')\n"
    "os.chmod('data/locked', 0)\nprint('done')"
)


def test_an_ended_rental_s_directory_is_removed_once_the_server_no_longer_assigns_it(tmp_path: Path) -> None:
    client = FakeClient()
    client.assignments = [assignment("r-1", WRITES_SCRATCH), assignment("r-2", SLEEPS)]
    runner = make_runner(tmp_path, client)
    runner.step()
    paths = ProcessExecutor(tmp_path).paths("r-1")
    eventually(lambda: not runner.local["r-1"].workload.poll().running)
    runner.step()  # its end reported, its log shipped; still assigned until the server hears of the end
    assert (paths.workdir / "data").is_dir()
    client.assignments = [assignment("r-2", SLEEPS)]
    runner.step()
    assert bytes(client.logs["r-1"]) == b"done\n"
    assert not paths.root.exists(), "the next workload here could read what r-1 left behind"
    assert ProcessExecutor(tmp_path).paths("r-2").workdir.is_dir()  # a running rental keeps its own
    client.assignments = []
    runner.step()  # r-2 killed as no longer assigned, its end reported once
    runner.step()
    eventually(lambda: runner.step() or not ProcessExecutor(tmp_path).paths("r-2").root.exists())


def test_a_new_agent_process_removes_what_ended_rentals_left_and_keeps_the_rest(tmp_path: Path) -> None:
    client = FakeClient()
    client.assignments = [assignment("r-1", COUNTS_AND_ENDS), assignment("r-2", COUNTS_AND_ENDS)]
    first = make_runner(tmp_path, client)
    first.step()  # both launched; the agent process then dies
    for rental_id in ("r-1", "r-2"):
        pgid = first.local[rental_id].workload.pid
        eventually(lambda pgid=pgid: not group_alive(pgid))
    unrelated = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        write_record(tmp_path, "r-live", unrelated.pid)  # a live group it cannot tell its own: left alone
        (tmp_path / "rentals" / "r-old" / "work").mkdir(parents=True)  # no record: ended long ago
        client.assignments = [assignment("r-2", COUNTS_AND_ENDS)]  # r-1 ended on the server meanwhile
        second = make_runner(tmp_path, client)
        second.step()
        rentals = tmp_path / "rentals"
        assert sorted(p.name for p in rentals.iterdir()) == ["r-2", "r-live"]
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()


SLEEPS = "import time\nwhile True: time.sleep(0.05)"


def test_a_notice_to_an_adopted_workload_writes_the_notice_file(tmp_path: Path) -> None:
    client = FakeClient()
    client.assignments = [assignment("r-1", SLEEPS)]
    first = make_runner(tmp_path, client)
    first.step()  # launches r-1; then this agent process "dies" (the workload keeps running)
    pgid = first.local["r-1"].workload.pid
    try:
        second = make_runner(tmp_path, client)  # a restarted agent adopts r-1
        deadline = datetime.now(UTC) + timedelta(seconds=60)
        told = assignment("r-1", SLEEPS, deadline=deadline).model_copy(update={"notice_cause": "spot_floor"})
        client.assignments = [told]
        second.step()  # the notice arrives
        notice = ProcessExecutor(tmp_path).paths("r-1").notice_file
        assert notice.is_file(), "SIGTERM was sent but no notice file was written"
        body = json.loads(notice.read_text())
        assert (body["rental_id"], body["deadline_unix_s"]) == ("r-1", deadline.timestamp())
        assert body["cause"] == "spot_floor"  # why, as the server said
    finally:
        os.killpg(pgid, signal.SIGKILL)


def test_a_commandless_rental_released_here_reports_the_end_of_its_run(tmp_path: Path) -> None:
    client = FakeClient()
    reservation = assignment("r-1", "")
    reservation.command = []  # a reservation: the GPUs are held, nothing runs
    client.assignments = [reservation]
    runner = make_runner(tmp_path, client)
    runner.step()
    client.assignments = []  # a shrink released this node
    runner.step()
    runner.step()
    runner.step()
    states = [w.state for beat in client.reports for w in beat if w.rental_id == "r-1"]
    assert states == ["running", "stopped"], f"reported {states}: the run on the released node never ends"
    assert "r-1" not in runner.local


IGNORES_TERM = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(0.05)"
)


def ignores_term_then_says_so(ready: Path) -> str:
    """IGNORES_TERM that leaves a file in `ready` once SIGTERM is ignored."""
    return (
        "import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open(os.path.join({str(ready)!r}, str(os.getpid())), 'w').close()\n"
        "while True: time.sleep(0.05)"
    )


def stubborn_runner(tmp_path: Path, client: FakeClient) -> AgentRunner:
    """A runner with three workloads that ignore SIGTERM (each stop waits its whole grace), on GPUs 0-2,
    returned once all three ignore it (a fixed wait could end before a loaded machine ran them that far)."""
    ready = tmp_path / "ready"
    ready.mkdir()
    script = ignores_term_then_says_so(ready)
    client.assignments = [assignment(f"r-{gpu}", script, gpu=gpu) for gpu in range(3)]
    runner = make_runner(tmp_path, client)
    runner.grace_s = 1.0
    runner.step()
    eventually(lambda: len(list(ready.iterdir())) == 3, timeout_s=30)
    return runner


def test_stopping_several_stubborn_workloads_does_not_hold_the_heartbeat_for_the_sum_of_their_graces(
    tmp_path: Path,
) -> None:
    client = FakeClient()
    runner = stubborn_runner(tmp_path, client)
    client.assignments = [assignment(f"r-{gpu}", IGNORES_TERM, gpu=gpu, action="stop") for gpu in range(3)]
    began = time.monotonic()
    runner.step()
    took = time.monotonic() - began
    # With the defaults (grace 5 s, heartbeat 5 s, down after 3 missed = 15 s) the next beat comes after
    # 3 x 5 + 5 = 20 s: the server marks the node down and ends or re-queues every rental on it.
    assert took < 2 * runner.grace_s, f"one step took {took:.1f} s: the stops ran one after another"
    assert [runner.local[f"r-{gpu}"].state for gpu in range(3)] == ["stopped"] * 3


def test_restarting_several_resized_workloads_waits_one_grace(tmp_path: Path) -> None:
    client = FakeClient()
    runner = stubborn_runner(tmp_path, client)
    before = {gpu: runner.local[f"r-{gpu}"].workload.pid for gpu in range(3)}
    client.assignments = [assignment(f"r-{gpu}", IGNORES_TERM, gpu=gpu + 3) for gpu in range(3)]
    began = time.monotonic()
    runner.step()
    took = time.monotonic() - began
    try:
        assert took < 2 * runner.grace_s, f"one step took {took:.1f} s: the restarts ran one after another"
        assert not any(group_alive(pid) for pid in before.values())
        assert all(runner.local[f"r-{gpu}"].workload.poll().running for gpu in range(3))
    finally:
        for gpu in range(3):
            runner.local[f"r-{gpu}"].workload.kill()


def test_restarting_several_orphans_moved_while_the_agent_was_away_waits_one_grace(tmp_path: Path) -> None:
    client = FakeClient()
    first = stubborn_runner(tmp_path, client)
    before = {gpu: first.local[f"r-{gpu}"].workload.pid for gpu in range(3)}
    client.assignments = [assignment(f"r-{gpu}", IGNORES_TERM, gpu=gpu + 3) for gpu in range(3)]
    second = make_runner(tmp_path, client)  # the agent came back; the rentals were resized meanwhile
    second.grace_s = 1.0
    began = time.monotonic()
    second.step()
    took = time.monotonic() - began
    try:
        assert took < 2 * second.grace_s, f"one step took {took:.1f} s: the restarts ran one after another"
        assert not any(group_alive(pid) for pid in before.values())
        assert all(second.local[f"r-{gpu}"].workload.poll().running for gpu in range(3))
    finally:
        for gpu in range(3):
            second.local[f"r-{gpu}"].workload.kill()


TRAPS_TERM = (
    "import signal, time\nsignal.signal(signal.SIGTERM, lambda *_: None)\nwhile True: time.sleep(0.05)"
)


def trapping_workload(tmp_path: Path, client: FakeClient) -> tuple[AgentRunner, int]:
    """A runner running r-1, a workload that handles SIGTERM and runs on; the runner and its process group,
    once its handler is set."""
    client.assignments = [assignment("r-1", TRAPS_TERM)]
    runner = make_runner(tmp_path, client)
    runner.step()
    pgid = runner.local["r-1"].workload.pid
    time.sleep(0.3)  # the workload has set its SIGTERM handler
    return runner, pgid


def test_a_withdrawn_notice_removes_the_notice_file_and_the_workload_outlives_the_deadline(
    tmp_path: Path,
) -> None:
    """A workload that handles SIGTERM and runs on is killed at its deadline, unless the server's answer
    withdraws the notice first (its preemptor left): then the notice file goes and it is not killed."""
    client = FakeClient()
    runner, pgid = trapping_workload(tmp_path, client)
    try:
        deadline = datetime.now(UTC) + timedelta(seconds=0.6)
        client.assignments = [assignment("r-1", TRAPS_TERM, deadline=deadline)]
        runner.step()  # notice: the file is written, SIGTERM sent (and ignored)
        notice = ProcessExecutor(tmp_path).paths("r-1").notice_file
        assert notice.is_file()
        client.assignments = [assignment("r-1", TRAPS_TERM)]  # the answer withdraws it
        runner.step()
        assert not notice.exists()
        time.sleep(max((deadline - datetime.now(UTC)).total_seconds(), 0) + 0.2)
        runner.step()
        runner.step()
        assert group_alive(pgid), "the workload was killed at a withdrawn notice's deadline"
        assert [w.state for w in client.reports[-1] if w.rental_id == "r-1"] == ["running"]
    finally:
        os.killpg(pgid, signal.SIGKILL)


class ServerBehind(FakeClient):
    """A server whose clock is two minutes behind this host's (the host's runs ahead)."""

    def heartbeat(self, request):
        answer = super().heartbeat(request)
        return answer.model_copy(update={"server_time": datetime.now(UTC) - timedelta(seconds=120)})


def test_a_host_whose_clock_runs_ahead_still_gives_the_whole_notice(tmp_path: Path) -> None:
    """Deadlines are the server's: counted on the host's clock, 2 minutes ahead, a victim was killed at the
    heartbeat that brought its notice (no SIGTERM first, no time to checkpoint)."""
    client = ServerBehind()
    runner, pgid = trapping_workload(tmp_path, client)
    try:
        deadline = datetime.now(UTC) - timedelta(seconds=120) + timedelta(seconds=1)  # 1 s on the server
        client.assignments = [assignment("r-1", TRAPS_TERM, deadline=deadline)]
        runner.step()
        runner.step()
        assert group_alive(pgid), "killed at once: the deadline was counted on the host's clock"
        assert ProcessExecutor(tmp_path).paths("r-1").notice_file.is_file()
        time.sleep(1.2)
        runner.step()
        eventually(lambda: not group_alive(pgid))  # killed at the deadline, on the server's clock
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def test_a_trim_notice_writes_the_notice_file_with_the_gpus_kept_and_neither_signals_nor_kills(
    tmp_path: Path,
) -> None:
    """An elastic rental preempted in part: the notice file says `trimmed` and how many GPUs it keeps; the
    workload gets no SIGTERM and outlives the deadline (the server then changes its slices, and it restarts
    on them); once the answer carries no notice, the file goes."""
    client = FakeClient()
    signalled = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
    script = signalled + "while True: time.sleep(0.05)"
    client.assignments = [assignment("r-1", script)]
    runner = make_runner(tmp_path, client)
    runner.step()
    pgid = runner.local["r-1"].workload.pid
    try:
        time.sleep(0.3)  # the workload has set its SIGTERM handler: a SIGTERM would end it with 7
        deadline = datetime.now(UTC) + timedelta(seconds=0.6)
        trim = assignment("r-1", script, deadline=deadline).model_copy(update={"notice_keeps_gpus": 4})
        client.assignments = [trim]
        runner.step()
        notice = ProcessExecutor(tmp_path).paths("r-1").notice_file
        said = json.loads(notice.read_text())
        assert said["reason"] == "trimmed" and said["keeps_gpus"] == 4 and said["released"] is False
        assert said["deadline_unix_s"] == pytest.approx(deadline.timestamp())
        time.sleep(max((deadline - datetime.now(UTC)).total_seconds(), 0) + 0.2)
        runner.step()
        runner.step()
        assert group_alive(pgid), "a trimmed workload was signalled or killed at its deadline"
        assert [w.state for w in client.reports[-1] if w.rental_id == "r-1"] == ["running"]
        client.assignments = [assignment("r-1", script)]  # trimmed: the notice is gone from the answer
        runner.step()
        assert not notice.exists()
    finally:
        os.killpg(pgid, signal.SIGKILL)


def test_the_heartbeat_reports_the_host_s_mig_instances_made_by_hand_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each GPU in MIG mode with its instances, as the probe finds them: the declared 4g@0, 2g@4, 1g@6; a
    7g made by hand on GPU 3 (the idle three destroyed) shows up once the probe runs again."""
    monkeypatch.setattr(host_gpus, "MIG_PROBE_S", 3600.0)
    client = FakeClient()
    runner = make_runner(tmp_path, client, node="a100-mig-01")
    runner.step()
    declared = [(0, "4g.40gb"), (4, "2g.20gb"), (6, "1g.10gb")]
    assert client.mig_layouts[-1] == {index: declared for index in range(8)}
    runner.probe.make_mig_device(3, (0, "7g.80gb"), in_use=())
    runner.step()
    assert client.mig_layouts[-1][3] == declared, "probed again before MIG_PROBE_S"
    monkeypatch.setattr(host_gpus, "MIG_PROBE_S", 0.0)
    runner.step()
    assert client.mig_layouts[-1] == {**{index: declared for index in range(8)}, 3: [(0, "7g.80gb")]}


def test_a_host_without_mig_reports_no_layouts(tmp_path: Path) -> None:
    client = FakeClient()
    make_runner(tmp_path, client).step()
    assert client.mig_layouts == [None]


def test_an_instance_running_processes_no_rental_here_was_given_is_reported_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPU 0's 4g@0 runs this host's rental and its 1g@6 runs something else: only the 1g is busy (not
    suanli's); the rental's own instance is the rental's, whatever runs on it."""
    client = FakeClient()
    runner = make_runner(tmp_path, client, node="a100-mig-01")
    client.assignments = [
        assignment(
            "rnt_4g",
            "import time; time.sleep(30)",
            piece=SliceResponse(gpu_index=0, milli=571, memory_mib=40960, mig_profile="4g.40gb", mig_start=0),
        )
    ]
    runner.step()  # heartbeat, then the workload starts on the 4g
    assert client.mig_busy == [set()]
    probed = runner.probe.inventory()
    running = {"4g.40gb", "1g.10gb"}  # processes run on these two of GPU 0's instances
    gpu0 = probed.gpus[0]
    gpu0 = replace(
        gpu0, mig_devices=tuple(replace(m, processes=int(m.profile in running)) for m in gpu0.mig_devices)
    )
    gpus = (gpu0, *probed.gpus[1:])
    monkeypatch.setattr(runner.probe, "inventory", lambda: replace(probed, gpus=gpus))
    monkeypatch.setattr(host_gpus, "MIG_PROBE_S", 0.0)
    try:
        runner.step()
        assert client.mig_busy[-1] == {(0, 6, "1g.10gb")}
    finally:
        client.assignments = []
        runner.step()  # not assigned any more: the workload is killed


def test_the_agent_does_not_destroy_an_instance_running_processes_to_make_a_rental_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 7g.80gb placed on GPU 0 (from a report older than the processes on its 1g@6) would need that 1g
    destroyed: the workload fails to start, naming it, and the 1g stays."""
    client = FakeClient()
    runner = make_runner(tmp_path, client, node="a100-mig-01")
    probed = runner.probe.inventory()
    gpu0 = probed.gpus[0]
    gpu0 = replace(
        gpu0, mig_devices=tuple(replace(m, processes=int(m.profile == "1g.10gb")) for m in gpu0.mig_devices)
    )
    runner.inventory = replace(probed, gpus=(gpu0, *probed.gpus[1:]))
    client.assignments = [
        assignment(
            "rnt_7g",
            "pass",
            piece=SliceResponse(
                gpu_index=0, milli=1000, memory_mib=81920, mig_profile="7g.80gb", mig_start=0
            ),
        )
    ]
    runner.step()
    local = runner.local["rnt_7g"]
    assert local.state == "failed" and "1g.10gb at slot 6 is in use" in local.message
    assert (6, "1g.10gb") in runner.probe._instances(0)


WRITES_A_LINE_IN_TWO = (
    "import sys, time\nsys.stdout.write('first\\npart'); sys.stdout.flush(); time.sleep(1.0)\n"
    "sys.stdout.write('ial\\n'); sys.stdout.flush(); time.sleep(30)"
)


def test_a_running_workloads_unfinished_line_waits_for_its_newline(tmp_path: Path) -> None:
    """Lines are shipped whole while the workload runs, so two nodes' lines never interleave mid-line."""
    client = FakeClient()
    client.assignments = [assignment("r-1", WRITES_A_LINE_IN_TWO)]
    runner = make_runner(tmp_path, client)
    runner.step()  # launched
    eventually(lambda: runner.step() or bytes(client.logs.get("r-1", b"")) == b"first\n")
    runner.step()
    assert bytes(client.logs["r-1"]) == b"first\n"  # "part" waits for the rest of its line
    eventually(lambda: runner.step() or bytes(client.logs["r-1"]) == b"first\npartial\n")


def test_an_unfinished_line_is_shipped_after_a_while_and_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    from suanli.agent import log_shipping
    from suanli.agent.local import Local
    from suanli.agent.log_shipping import PARTIAL_LINE_WAIT_S, whole_lines
    from suanli.agent.restart import RestartPolicy, RestartTracker

    clock = [100.0]
    monkeypatch.setattr(log_shipping.time, "monotonic", lambda: clock[0])
    local = Local("r-1", None, RestartTracker(RestartPolicy.never()), None, None)
    assert whole_lines(local, b"a\nprogress 10%") == b"a\n"
    assert whole_lines(local, b"progress 10%") == b""
    clock[0] += PARTIAL_LINE_WAIT_S  # a progress bar that never ends its line still shows
    assert whole_lines(local, b"progress 10%") == b"progress 10%"
    assert whole_lines(local, b"b\n") == b"b\n"
    local.state = "succeeded"
    assert whole_lines(local, b"c\nlast words") == b"c\nlast words"  # all of it once it has ended


# prints the restart count it was started with; the first run fails, later ones run until stopped
FAILS_ON_FIRST_RUN = (
    "import os, sys, time\ncount = os.environ['SUANLI_RESTART_COUNT']\nprint('run', count, flush=True)\n"
    "if count == '0': sys.exit(5)\nwhile True: time.sleep(0.05)"
)


def gang_part(rental_id: str, script: str, attempt: int) -> AssignmentResponse:
    """Rank 0 of a two-node rental under on-failure, at the server's `attempt`."""
    return assignment(rental_id, script).model_copy(
        update={
            "restart": "on-failure",
            "max_restarts": 3,
            "peers": ["h100-a-01", "h100-a-02"],
            "attempt": attempt,
        }
    )


def test_a_gang_rank_that_fails_is_reported_and_restarted_only_when_the_server_restarts_the_gang(
    tmp_path: Path,
) -> None:
    """A multi-node rental's failure is the server's to restart on every node: the agent reports it failed
    (at its attempt) instead of restarting it alone, starts it again once the assignment's attempt goes up
    (the workload sees the count), and a running rank is stopped and started again the same way."""
    client = FakeClient()
    client.assignments = [gang_part("r-gang", FAILS_ON_FIRST_RUN, 0)]
    runner = make_runner(tmp_path, client)
    runner.step()
    eventually(lambda: runner.local["r-gang"].workload.poll().running is False)
    runner.step()
    report = client.reports[-1][0]
    assert (report.state, report.exit_code, report.attempt) == ("failed", 5, 0)
    assert report.restarts == 0  # not one of the agent's own restarts
    assert report.ran_s is not None and 0 <= report.ran_s < 10  # when it started, for the run's start
    runner.step()
    assert runner.local["r-gang"].state == "failed"  # not restarted alone
    client.assignments = [gang_part("r-gang", FAILS_ON_FIRST_RUN, 1)]
    runner.step()
    first = runner.local["r-gang"].workload
    try:
        assert runner.local["r-gang"].state == "running" and first.poll().running
        runner.step()
        assert (client.reports[-1][0].state, client.reports[-1][0].attempt) == ("running", 1)
        eventually(lambda: b"run 1" in bytes(client.logs.get("r-gang", b"")) or runner.step())
        client.assignments = [gang_part("r-gang", FAILS_ON_FIRST_RUN, 2)]  # another rank failed
        runner.step()
        second = runner.local["r-gang"].workload
        assert second.pid != first.pid and not group_alive(first.pid) and second.poll().running
        eventually(lambda: bytes(client.logs.get("r-gang", b"")).count(b"\n") == 3 or runner.step())
        assert bytes(client.logs["r-gang"]) == b"run 0\nrun 1\nrun 2\n"
    finally:
        runner.local["r-gang"].workload.kill()


def test_a_one_node_rental_restarted_by_its_agent_sees_its_restart_count(tmp_path: Path) -> None:
    """On one node the agent restarts a failed workload itself, and the workload is told which run it is."""
    script = (
        "import os, sys\ncount = os.environ['SUANLI_RESTART_COUNT']\nprint('run', count, flush=True)\n"
        "sys.exit(0 if count == '2' else 3)"
    )
    client = FakeClient()
    one_node = assignment("r-solo", script).model_copy(
        update={"restart": "on-failure", "max_restarts": 3, "peers": ["h100-a-01"]}
    )
    client.assignments = [one_node]
    runner = make_runner(tmp_path, client)
    runner.step()
    eventually(lambda: runner.step() or runner.local["r-solo"].state == "succeeded", timeout_s=20)
    eventually(lambda: runner.step() or bytes(client.logs.get("r-solo", b"")).count(b"\n") == 3)
    assert bytes(client.logs["r-solo"]) == b"run 0\nrun 1\nrun 2\n"
    assert runner.local["r-solo"].tracker.restarts == 2
    runner.step()
    # the server hears of each restart (for its `restarted` events) and of the failure it followed
    last = client.reports[-1][0]
    assert (last.state, last.restarts, last.failed_exit_code) == ("succeeded", 2, 3)


def test_an_agent_that_restarted_counts_on_from_the_restarts_its_assignment_reports(tmp_path: Path) -> None:
    """An earlier agent process restarted the workload twice (the server's run says so): with a limit of 3,
    the new agent restarts it once more, not three more times, and the failure after that is final."""
    script = "import sys\nprint('ran', flush=True)\nsys.exit(3)"
    client = FakeClient()
    client.assignments = [
        assignment("r-again", script).model_copy(
            update={"restart": "on-failure", "max_restarts": 3, "peers": ["h100-a-01"], "restarts": 2}
        )
    ]
    runner = make_runner(tmp_path, client)
    runner.step()
    eventually(lambda: runner.step() or runner.local["r-again"].state == "failed", timeout_s=20)
    assert runner.local["r-again"].tracker.restarts == 3
    eventually(lambda: runner.step() or bytes(client.logs.get("r-again", b"")).count(b"\n") == 2)
    assert bytes(client.logs["r-again"]) == b"ran\nran\n"  # its first run here and the one restart left
    runner.step()
    last = client.reports[-1][0]
    assert (last.state, last.restarts) == ("failed", 3)


def _placed(rental_id: str, script: str, placement: int) -> AssignmentResponse:
    return assignment(rental_id, script, gpu=2).model_copy(update={"placement": placement})


def test_a_rental_placed_here_again_after_a_requeue_runs_anew_and_its_output_goes_on_after_the_first(
    tmp_path: Path,
) -> None:
    """Preempted, a rental that checkpoints went back to the queue and its directory here was removed; placed
    on this node again, its workload starts anew, reports under its new placement, and ships its output
    after what the server holds of the first run's, not over it."""
    client = FakeClient()
    client.assignments = [_placed("r-1", "print('first run')", 1)]
    runner = make_runner(tmp_path, client)
    runner.step()
    eventually(lambda: not runner.local["r-1"].workload.poll().running)
    runner.step()  # its end reported, its log shipped
    assert [(w.state, w.placement) for w in client.reports[-1]] == [("succeeded", 1)]
    client.assignments = []  # back in the queue
    runner.step()
    assert "r-1" not in runner.local and not ProcessExecutor(tmp_path).paths("r-1").root.exists()

    client.assignments = [_placed("r-1", "print('second run')", 2)]
    runner.step()
    eventually(lambda: not runner.local["r-1"].workload.poll().running)
    runner.step()
    assert [(w.state, w.placement) for w in client.reports[-1]] == [("succeeded", 2)]
    assert bytes(client.logs["r-1"]) == b"first run\nsecond run\n"


def test_a_rental_placed_here_again_before_the_agent_saw_it_leave_still_starts_anew(tmp_path: Path) -> None:
    """Placed on this node again before any heartbeat answer left it out: the earlier run, still running
    (its notice ignored), is ended and the new placement's workload starts; the output goes on in the same
    log file."""
    client = FakeClient()
    client.assignments = [_placed("r-1", "print('first', flush=True)\n" + SLEEPS, 1)]
    runner = make_runner(tmp_path, client)
    runner.step()
    first = runner.local["r-1"].workload
    eventually(lambda: runner.step() or bytes(client.logs.get("r-1", b"")) == b"first\n")
    client.assignments = [_placed("r-1", "print('second')", 2)]
    runner.step()
    eventually(lambda: not first.poll().running)
    assert runner.local["r-1"].workload is not first and runner.local["r-1"].placement == 2
    eventually(lambda: runner.step() or bytes(client.logs["r-1"]) == b"first\nsecond\n")
    assert client.reports[-1][0].placement == 2


def test_a_rental_placed_here_again_on_other_gpus_starts_once_not_as_a_resize_first(tmp_path: Path) -> None:
    """Placed again on other GPUs of this node before the agent saw it leave: the new placement's workload
    is launched once (not first restarted as a resize of the earlier run, then again as the new placement)."""
    client = FakeClient()
    client.assignments = [_placed("r-1", SLEEPS, 1)]
    runner = make_runner(tmp_path, client)
    launched: list[str] = []
    launch = runner.executor.launch
    runner.executor.launch = lambda spec: launched.append(spec.rental_id) or launch(spec)  # type: ignore[method-assign]
    runner.step()
    client.assignments = [assignment("r-1", SLEEPS, gpu=3).model_copy(update={"placement": 2})]
    runner.step()
    runner.step()
    assert launched == ["r-1", "r-1"]
    assert runner.local["r-1"].placement == 2 and runner.local["r-1"].workload.poll().running


def counts_terms(log: Path) -> str:
    """A workload that appends a line to `log` at each SIGTERM and runs on."""
    return (
        "import signal, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: open({str(log)!r}, 'a').write('TERM\\n'))\n"
        "while True: time.sleep(0.05)"
    )


def test_an_agent_restarted_under_notice_does_not_signal_the_adopted_workload_again(tmp_path: Path) -> None:
    """A notice reaches a workload (notice file, one SIGTERM); the agent restarts and adopts it while the
    notice stands: it is not sent a second SIGTERM (many frameworks read a second one as "exit now", which
    can cut its checkpoint short), and is still killed at the deadline."""
    client = FakeClient()
    log = tmp_path / "terms.log"
    script = counts_terms(log)
    client.assignments = [assignment("r-1", script)]
    first = make_runner(tmp_path, client)
    first.step()
    pgid = first.local["r-1"].workload.pid
    try:
        time.sleep(0.3)  # its handler is set
        deadline = datetime.now(UTC) + timedelta(seconds=1.5)
        client.assignments = [assignment("r-1", script, deadline=deadline)]
        first.step()  # the notice: one SIGTERM
        second = make_runner(tmp_path, client)  # the agent restarts and adopts it
        second.step()
        time.sleep(0.3)
        assert log.read_text().count("TERM") == 1
        time.sleep(max((deadline - datetime.now(UTC)).total_seconds(), 0) + 0.2)
        second.step()
        assert not group_alive(pgid), "the adopted workload outlived its deadline"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.parametrize("withdrawn", [False, True], ids=["standing", "withdrawn"])
def test_at_a_notice_deadline_between_heartbeats_the_agent_asks_then_kills(
    tmp_path: Path, withdrawn: bool
) -> None:
    """With a 5-s heartbeat, a notice whose deadline is 0.5 s away: the agent's pause ends at the deadline and
    its step kills the workload then, not at the next heartbeat up to 5 s later; but a notice the server
    withdrew less than a heartbeat before the deadline (the floor fell back, the bid was raised, the
    preemptor left) is seen by that step first, and the workload runs on (it was killed on the agent's local
    deadline, the withdrawal heard only after)."""
    client = FakeClient()
    ready = tmp_path / "ready"
    ready.mkdir()
    script = ignores_term_then_says_so(ready)
    client.assignments = [assignment("r-1", script)]
    runner = make_runner(tmp_path, client)
    runner.step()
    pgid = runner.local["r-1"].workload.pid
    try:
        eventually(lambda: any(ready.iterdir()))  # it ignores SIGTERM now
        deadline = datetime.now(UTC) + timedelta(seconds=0.5)
        client.assignments = [assignment("r-1", script, deadline=deadline)]
        runner.step()  # the notice
        if withdrawn:
            client.assignments = [assignment("r-1", script)]
        runner._pause(threading.Event(), 5.0)  # ends at the deadline, not after the 5-s interval
        runner.step()  # asks the server, then kills what is still noticed
        killed_after = (datetime.now(UTC) - deadline).total_seconds()
        if withdrawn:
            runner.step()
            assert group_alive(pgid), "killed at a deadline the server had withdrawn"
        else:
            assert not group_alive(pgid) and killed_after < 0.5, f"killed {killed_after:.2f} s after it"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def test_a_notice_given_again_with_another_deadline_is_followed_without_a_second_signal(
    tmp_path: Path,
) -> None:
    """The answer moves a standing notice's deadline (a notice given anew for another cause): the notice
    file says the new deadline, the workload gets no second SIGTERM, and it is killed at the new one."""
    client = FakeClient()
    log = tmp_path / "terms.log"
    script = counts_terms(log)
    client.assignments = [assignment("r-1", script)]
    runner = make_runner(tmp_path, client)
    runner.step()
    pgid = runner.local["r-1"].workload.pid
    try:
        time.sleep(0.3)
        # seconds apart, not tenths: a step slowed by a loaded machine must not reach the first deadline
        first = datetime.now(UTC) + timedelta(seconds=2)
        client.assignments = [assignment("r-1", script, deadline=first)]
        runner.step()
        later = first + timedelta(seconds=2)
        client.assignments = [assignment("r-1", script, deadline=later)]
        runner.step()
        notice = ProcessExecutor(tmp_path).paths("r-1").notice_file
        assert json.loads(notice.read_text())["deadline_unix_s"] == later.timestamp()
        time.sleep(max((first - datetime.now(UTC)).total_seconds(), 0) + 0.2)
        runner.step()
        assert group_alive(pgid), "killed at the old deadline"
        time.sleep(max((later - datetime.now(UTC)).total_seconds(), 0) + 0.2)
        runner.step()
        assert not group_alive(pgid) and log.read_text().count("TERM") == 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def test_a_workload_that_exits_between_heartbeats_is_told_within_half_a_second_not_at_the_next_one(
    tmp_path: Path,
) -> None:
    """With a 5-s heartbeat, a workload that ends 0.3 s into the pause: the pause ends within `EXIT_POLL_S` of
    its exit and the next step reports it, so its billing stops and its GPUs free then (a preemptor waiting
    on a victim that leaves early starts then), not up to a heartbeat later."""
    client = FakeClient()
    client.assignments = [assignment("r-1", "import time; time.sleep(0.3)")]
    runner = make_runner(tmp_path, client)
    runner.step()
    began = time.monotonic()
    runner._pause(threading.Event(), 5.0)
    paused_s = time.monotonic() - began
    runner.step()
    assert paused_s < 0.3 + runner_module.EXIT_POLL_S + 0.5, f"told {paused_s:.2f} s after the pause began"
    assert [(r.rental_id, r.state) for r in client.reports[-1]] == [("r-1", "succeeded")]


def test_a_workload_that_exits_while_the_server_cannot_be_reached_is_reported_with_how_long_ago_it_exited(
    tmp_path: Path,
) -> None:
    """Audit T1: the heartbeats fail while the workload exits and for a while after; the report that gets
    through says how long ago it exited (`since_exit_s`, the agent's own elapsed time, so no clock skew
    counts), and `ran_s` less that is how long it ran, so the server bills its run and not the outage."""
    client = FakeClient()
    client.assignments = [assignment("r-1", "import time; time.sleep(0.3)")]
    runner = make_runner(tmp_path, client)
    runner.step()
    eventually(lambda: not runner.local["r-1"].workload.poll().running)
    exited = time.monotonic()
    client.fail_next = [ServerUnreachable("down"), ServerUnreachable("down")]
    for _ in range(2):
        with pytest.raises(ServerUnreachable):
            runner.step()
        time.sleep(0.5)
    runner.step()
    (report,) = client.reports[-1]
    assert report.state == "succeeded" and report.since_exit_s is not None and report.ran_s is not None
    away_s = time.monotonic() - exited
    assert away_s - 0.3 <= report.since_exit_s <= away_s + runner_module.EXIT_POLL_S + 0.1
    assert 0.3 <= report.ran_s - report.since_exit_s < 0.3 + 2.0  # its start-up and our polling on top


@pytest.mark.parametrize("noticed", [False, True], ids=["no-notice", "noticed"])
def test_a_workload_no_longer_assigned_gets_sigterm_first_unless_it_had_its_notice(
    tmp_path: Path, noticed: bool
) -> None:
    """Its gang failed on another node (or lost one, or a shrink released this one): the answer no longer
    assigns it, and it gets SIGTERM and a grace, as torchrun gives its workers, so it may flush its output;
    it was killed at once, its last lines lost. One whose notice deadline came was told already: killed."""
    client = FakeClient()
    said = tmp_path / "said"
    script = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: (open({str(said)!r}, 'w').write('bye'), sys.exit(0)))\n"
        "while True: time.sleep(0.05)"
    )
    client.assignments = [assignment("r-1", script)]
    runner = make_runner(tmp_path, client)
    runner.step()
    time.sleep(0.3)  # its SIGTERM handler is set
    if noticed:
        runner.local["r-1"].noticed_until = datetime.now(UTC) - timedelta(seconds=1)
    pgid = runner.local["r-1"].workload.pid
    client.assignments = []
    runner.step()
    eventually(lambda: not group_alive(pgid), timeout_s=2.0)  # SIGKILLed: gone once the kernel reaps it
    assert said.exists() is not noticed  # the noticed one got no SIGTERM to write it
    assert [(r.rental_id, r.state) for r in client.reports[-1]] == [("r-1", "running")]  # told next step
    runner.step()
    assert [(r.rental_id, r.state) for r in client.reports[-1]] == [("r-1", "stopped")]


def _saved(work_dir: Path, server: str, node: str) -> None:
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "agent.json").write_text(json.dumps({"server": server, "node": node, "node_key": "nk_saved"}))


def test_an_agent_pointed_at_another_server_of_the_platform_keeps_its_node_key(tmp_path: Path) -> None:
    """The key was tied to the URL it was saved with: an agent moved to a second server process (its first
    one dead) refused to start without a new join token, and its running rentals were ended lost."""
    _saved(tmp_path, "http://server-a.test", "h100-a-01")
    keys: list[tuple[str, str | None]] = []
    runner = AgentRunner(
        "http://server-b.test",
        DeclaredProbe.from_file(FLEET, "h100-a-01"),
        tmp_path,
        client_factory=lambda url, key: keys.append((url, key)) or FakeClient(),
        expected_node="h100-a-01",
    )
    runner._connect(threading.Event())
    assert keys == [("http://server-b.test", "nk_saved")] and runner.node == "h100-a-01"
    assert json.loads((tmp_path / "agent.json").read_text())["server"] == "http://server-b.test"


def test_an_agent_of_another_node_on_a_work_dir_is_refused_and_so_is_a_second_agent(tmp_path: Path) -> None:
    """With --node h100-a-02 on h100-a-01's work dir, it took h100-a-01's identity and restarted its
    tenants' workloads; two agents on one work dir both adopted its workloads."""
    _saved(tmp_path, "http://server.test", "h100-a-01")

    def runner_for(node: str) -> AgentRunner:
        probe = DeclaredProbe.from_file(FLEET, node)
        factory = lambda url, key: FakeClient()  # noqa: E731
        return AgentRunner("http://server.test", probe, tmp_path, client_factory=factory, expected_node=node)

    with pytest.raises(AgentError, match="holds the node key of h100-a-01, not of h100-a-02"):
        runner_for("h100-a-02")._connect(threading.Event())
    first, second = runner_for("h100-a-01"), runner_for("h100-a-01")
    first._hold_work_dir()
    with pytest.raises(AgentError, match="another agent runs on"):
        second._hold_work_dir()
    os.close(first._lock)
    second._hold_work_dir()  # the first has gone: its lock with it
    os.close(second._lock)


def test_an_agent_given_several_servers_moves_to_the_next_when_one_cannot_be_reached(tmp_path: Path) -> None:
    """With one server only, a node whose server died was marked down by the others' leader unless its agent
    was restarted against another. Given all of them, it heartbeats the next at once, with the same key, and
    comes round to the first again when that one is the one that answers."""
    down, up = FakeClient(), FakeClient()
    down.fail_next = [ServerUnreachable("connection refused")] * 3
    made: list[tuple[str, str | None]] = []
    clients = {"http://a.test": down, "http://b.test": up}

    def factory(url: str, key: str | None) -> FakeClient:
        made.append((url, key))
        return clients[url]

    (tmp_path / "agent.json").write_text(
        json.dumps({"server": "http://a.test", "node": "h100-a-01", "node_key": "nk_saved"})
    )
    runner = AgentRunner(
        ["http://a.test/", "http://b.test"],
        DeclaredProbe.from_file(FLEET, "h100-a-01"),
        tmp_path,
        interval_s=0.05,
        client_factory=factory,
    )
    RUNNERS.append(runner)
    stopping = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stopping,), daemon=True)
    thread.start()
    try:
        eventually(lambda: len(up.reports) >= 2)
        assert made[:2] == [("http://a.test", "nk_saved"), ("http://b.test", "nk_saved")]
        assert len(down.fail_next) == 2  # one try at the dead one, then the other at once
        clients["http://b.test"] = up
        up.fail_next = [ServerUnreachable("connection refused")] * 2
        down.fail_next = []
        eventually(lambda: len(down.reports) >= 1)  # round to the first, which answers again
    finally:
        stopping.set()
        thread.join(timeout=10)
    assert runner.server_url == "http://a.test"


def test_a_stop_inside_a_step_waits_no_longer_than_a_heartbeat_interval(tmp_path: Path) -> None:
    """A workload that ignores SIGTERM, released by the server: the step stopping it waited the whole
    `--grace` (here 30 s) without a heartbeat, past the server's timeout (3 intervals), and the node was
    marked down with every rental on it. It waits one interval (1 s here) and kills."""
    client = FakeClient()
    script = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(0.05)"
    )
    client.assignments = [assignment("r-1", script)]
    runner = AgentRunner(
        "http://server.test",
        DeclaredProbe.from_file(FLEET, "h100-a-01"),
        tmp_path,
        interval_s=1.0,
        grace_s=30.0,
        client_factory=lambda url, key: client,
    )
    runner._client = client
    RUNNERS.append(runner)
    runner.step()
    pgid = runner.local["r-1"].workload.pid
    time.sleep(0.3)
    client.assignments = []
    began = time.monotonic()
    runner.step()
    assert time.monotonic() - began < 10 and not group_alive(pgid)
