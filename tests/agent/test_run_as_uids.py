"""`suanli agent --run-as-uids FIRST-LAST`: each rental's host-process workload runs as a uid of its own, so
one tenant's workload can neither read another's environment (/proc/<pid>/environ) nor signal it, which a
shared `--run-as` user allows. Starting a process as another uid needs root: CI runs as root, so these run
there (and fail if it does not); elsewhere they are skipped."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import agent_cli
from suanli.agent.attached import Ends
from suanli.agent.cleanup import sweep_rentals
from suanli.agent.executor_choice import DEFAULT_UIDS, NO_UIDS, ExecutorKind, choose_executor, describe
from suanli.agent.executors import ExecutorError, ProcessExecutor, RunAs, WorkloadSpec, WorkloadState
from suanli.agent.identity import nss_wrapper_library
from suanli.agent.uids import UidPool, running_uids
from suanli.cli import agent_commands

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true",
    reason="starting a process as another uid needs root",
)
FIRST, LAST = 61000, 61009  # no account on a Debian host
WAIT_S = 10.0
SLEEPS_WITH_A_SECRET = "echo $$ > pid; echo > ready; exec sleep 30"


def spec(rental_id: str, script: str, env: dict[str, str] | None = None) -> WorkloadSpec:
    return WorkloadSpec(rental_id, ("/bin/sh", "-c", script), env or {})


def wait_for(path: Path) -> None:
    """Until `path` holds a whole line: the shell creates a redirect's file before the command writes it."""
    end = time.monotonic() + WAIT_S
    while not (path.exists() and path.read_bytes().endswith(b"\n")):
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def probe(base: Path, pid: int) -> str:
    return (
        "id -u; "
        f"cat /proc/{pid}/environ >/dev/null 2>&1 && echo env=read || echo env=denied; "
        f"kill -0 {pid} 2>/dev/null && echo signal=sent || echo signal=denied; "
        f"cat {base / 'agent.json'} >/dev/null 2>&1 && echo key=read || echo key=denied"
    )


def neighbour_seen_by_another(executor: ProcessExecutor, base: Path) -> tuple[list[str], int]:
    """What a second rental's workload can do to a first one's, still running with a secret in its
    environment; and the first one's uid."""
    other = executor.launch(spec("r-secret", SLEEPS_WITH_A_SECRET, {"API_TOKEN": "tenant-a-secret"}))
    try:
        wait_for(other.paths.workdir / "ready")
        pid = int((other.paths.workdir / "pid").read_text())
        prober = executor.launch(spec("r-probe", probe(base, pid)))
        status = prober.wait(WAIT_S)
        assert (status.state, status.exit_code) == (WorkloadState.EXITED, 0)
        return prober.paths.log_file.read_text().split(), os.stat(f"/proc/{pid}").st_uid
    finally:
        other.kill()


def test_each_rental_runs_as_its_own_uid_and_cannot_reach_another_s_process(base: Path) -> None:
    executor = ProcessExecutor(base, uids=UidPool.parse(f"{FIRST}-{LAST}"))
    said, neighbour_uid = neighbour_seen_by_another(executor, base)
    assert FIRST <= neighbour_uid <= LAST and FIRST <= int(said[0]) <= LAST
    assert int(said[0]) != neighbour_uid
    assert said[1:] == ["env=denied", "signal=denied", "key=denied"]


def test_under_one_shared_user_a_workload_reads_its_neighbour_s_environment(base: Path) -> None:
    """The hole `--run-as-uids` closes, shown with the same probe: one `--run-as` user for every rental."""
    said, _ = neighbour_seen_by_another(ProcessExecutor(base, run_as=RunAs.of("nobody")), base)
    assert said[1:] == ["env=read", "signal=sent", "key=denied"]


def test_a_workload_s_temporary_files_stay_in_its_own_directory(base: Path) -> None:
    executor = ProcessExecutor(base, uids=UidPool.parse(f"{FIRST}-{LAST}"))
    workload = executor.launch(spec("r-1", 'mktemp; [ -O "$TMPDIR" ] && echo own'))
    workload.wait(WAIT_S)
    made, own = workload.paths.log_file.read_text().split()
    assert Path(made).parent == workload.paths.tmp_dir and own == "own"


def test_a_rental_started_again_keeps_its_uid(base: Path) -> None:
    executor = ProcessExecutor(base, uids=UidPool.parse(f"{FIRST}-{LAST}"))
    first = executor.launch(spec("r-1", "id -u > first; id -u"))
    first.wait(WAIT_S)
    executor.launch(spec("r-2", "id -u")).wait(WAIT_S)
    again = executor.launch(spec("r-1", "cat first; id -u"))  # a restart: its files are still its own
    again.wait(WAIT_S)
    uids = again.paths.log_file.read_text().split()
    assert len(set(uids)) == 1 and len(uids) == 3, uids
    assert executor.paths("r-2").workdir.stat().st_uid != int(uids[0])


def test_a_workload_run_as_a_uid_without_an_account_still_has_a_user_name(base: Path) -> None:
    """A pool uid has no passwd entry; USER and LOGNAME name it, so Python's getpass.getuser() (which
    PyTorch's compile cache calls) answers instead of failing, in the workload and in an exec."""
    executor = ProcessExecutor(base, uids=UidPool.parse(f"{FIRST}-{LAST}"))
    python = shutil.which("python3", path="/usr/bin:/bin")  # the host's: the venv's may lie under /root
    assert python is not None, "no python3 in /usr/bin or /bin"
    asks = f"{python} -c 'import getpass, os; print(getpass.getuser(), os.getuid())'"
    workload = executor.launch(spec("r-name", f"{asks} > said && mv said name; exec sleep 30"))
    try:
        wait_for(workload.paths.workdir / "name")
        name, uid = (workload.paths.workdir / "name").read_text().split()
        assert name == f"u{uid}" and FIRST <= int(uid) <= LAST
        output = base / "exec-name.log"
        command = executor.run_command(spec("r-name", ""), ["/bin/sh", "-c", asks], 10, output)
        assert command.wait(WAIT_S) == 0
        assert output.read_text().split() == [name, uid]
    finally:
        workload.kill()
    named = ProcessExecutor(base, run_as=RunAs.of("nobody")).launch(spec("r-nobody", "echo $USER $LOGNAME"))
    assert named.wait(WAIT_S).state is WorkloadState.EXITED
    assert named.paths.log_file.read_text().split() == ["nobody", "nobody"]


@pytest.mark.skipif(
    nss_wrapper_library() is None and os.environ.get("CI") != "true",
    reason="no libnss-wrapper here (CI installs it)",
)
def test_a_uid_without_an_account_has_a_passwd_entry_through_nss_wrapper(base: Path) -> None:
    """whoami, id and a shell's prompt name a pool uid (`u<uid>`, its own group, its working directory as
    home), in the workload and in an exec, while the host's own names still resolve."""
    executor = ProcessExecutor(base, uids=UidPool.parse(f"{FIRST}-{LAST}"))
    assert executor.nss_wrapper is not None, "CI installs libnss-wrapper (.ci/run)"
    asks = 'whoami; id -gn; getent passwd 0 | cut -d: -f1; [ ~ = "$PWD" ] && echo home; echo "$LD_PRELOAD"'
    running = spec("r-named", f"({asks}) > said && mv said names; exec sleep 30")
    workload = executor.launch(running)
    try:
        wait_for(workload.paths.workdir / "names")
        name, group, root, home, preload = (workload.paths.workdir / "names").read_text().split()
        assert name == group == f"u{workload.paths.workdir.stat().st_uid}"
        assert (root, home, preload) == ("root", "home", str(executor.nss_wrapper))
        output = base / "exec-names.log"
        command = executor.run_command(running, ["/bin/sh", "-c", asks], 10, output)
        assert command.wait(WAIT_S) == 0
        assert output.read_text().split() == [name, group, root, home, preload]
    finally:
        workload.kill()


def test_an_exec_runs_as_its_rentals_uid_in_its_directory_with_its_environment(base: Path) -> None:
    """`suanli exec`'s command on this executor: the rental's uid, working directory and environment, under
    `timeout` (exit 124 past it), its output in the agent's file."""
    executor = ProcessExecutor(base, uids=UidPool.parse(f"{FIRST}-{LAST}"))
    running = spec("r-exec", "id -u > uid; exec sleep 30", {"CUDA_VISIBLE_DEVICES": "GPU-x"})
    workload = executor.launch(running)
    try:
        wait_for(workload.paths.workdir / "uid")
        output = base / "exec.log"
        script = 'id -u; cat uid; echo "$CUDA_VISIBLE_DEVICES"; [ -O "$HOME" ] && echo home'
        command = executor.run_command(running, ["/bin/sh", "-c", script], 10, output)
        assert command.wait(WAIT_S) == 0
        uid, workload_uid, visible, home = output.read_text().split()
        assert uid == workload_uid and FIRST <= int(uid) <= LAST
        assert (visible, home) == ("GPU-x", "home")
        slow = executor.run_command(running, ["sleep", "30"], 1, output)
        assert slow.wait(WAIT_S) == 124  # coreutils' timeout ended it
    finally:
        workload.kill()


def test_an_attached_command_on_a_terminal_runs_as_its_rentals_uid_with_the_terminal_as_its_own(
    base: Path,
) -> None:
    """`suanli exec -it` on this executor: the rental's uid, the pseudo-terminal as the controlling terminal
    of the command's session (so /dev/tty opens, as a shell's job control needs), TERM set."""
    executor = ProcessExecutor(base, uids=UidPool.parse(f"{FIRST}-{LAST}"))
    running = spec("r-tty", "id -u > uid; exec sleep 30")
    workload = executor.launch(running)
    ends = Ends.open(tty=True)
    try:
        wait_for(workload.paths.workdir / "uid")
        script = 'id -u; cat uid; echo "$TERM"; echo hi > /dev/tty && echo ctty'
        command = executor.run_command(
            running, ["/bin/sh", "-c", script], 10, base / "unused.log", ends.child
        )
        ends.close_child()
        assert command.wait(WAIT_S) == 0
        printed = b""
        with contextlib.suppress(OSError):  # EIO once the terminal's last holder has gone
            while block := os.read(ends.output_fd, 4096):
                printed += block
        uid, workload_uid, term, hi, ctty = printed.decode().split()
        assert uid == workload_uid and FIRST <= int(uid) <= LAST
        assert (term, hi, ctty) == ("xterm-256color", "hi", "ctty")
    finally:
        ends.close()
        workload.kill()


def test_a_workload_run_as_another_uid_gets_only_the_path_entries_it_can_search(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's PATH may hold directories only it can search (root's ~/.pyenv/shims): passed on as they
    are, a program found nowhere else read "Permission denied" (126) instead of "not found" (127)."""
    hidden, shared = base / "root-only-bin", base / "shared-bin"
    hidden.mkdir()
    shared.mkdir()
    hidden.chmod(0o700)
    shared.chmod(0o755)
    tool = hidden / "mytool"
    tool.write_text("#!/bin/sh\necho hidden\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{hidden}:{shared}:/usr/bin:/bin")
    executor = ProcessExecutor(base, uids=UidPool.parse(f"{FIRST}-{LAST}"))
    workload = executor.launch(spec("r-path", 'echo "$PATH"; mytool; echo "status $?"'))
    status = workload.wait(WAIT_S)
    assert (status.state, status.exit_code) == (WorkloadState.EXITED, 0)
    said = workload.paths.log_file.read_text().splitlines()
    assert said[0] == f"{shared}:/usr/bin:/bin" and said[-1] == "status 127", said
    assert "not found" in said[1], said


def test_a_uid_something_still_runs_as_is_not_handed_on(base: Path) -> None:
    lingering = subprocess.Popen(["sleep", "30"], user=FIRST, group=FIRST)  # a daemon a workload left
    try:
        executor = ProcessExecutor(base, uids=UidPool.parse(f"{FIRST}-{LAST}"))
        workload = executor.launch(spec("r-1", "id -u"))
        workload.wait(WAIT_S)
        assert workload.paths.log_file.read_text().split() == [str(FIRST + 1)]
    finally:
        lingering.kill()
        lingering.wait()


def test_a_full_pool_refuses_the_next_workload_and_says_so(base: Path) -> None:
    executor = ProcessExecutor(base, uids=UidPool.parse(f"{FIRST}-{FIRST}"))
    running = executor.launch(spec("r-1", "echo > ready; exec sleep 30"))
    try:
        wait_for(running.paths.workdir / "ready")
        with pytest.raises(ExecutorError, match=f"every uid of --run-as-uids {FIRST}-{FIRST} is in use"):
            executor.launch(spec("r-2", "true"))
    finally:
        running.kill()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("61000", "give FIRST-LAST"),
        ("a-b", "give FIRST-LAST"),
        ("500-600", "1000 <= FIRST <= LAST"),
        ("61010-61000", "1000 <= FIRST <= LAST"),
        ("65000-65535", "holds users of this host (nobody)"),
    ],
)
def test_a_bad_range_is_refused_naming_the_option(text: str, message: str) -> None:
    with pytest.raises(ExecutorError, match=rf"--run-as-uids .?{text}.?: .*{re.escape(message)}"):
        UidPool.parse(text)


def test_choosing_the_executor_with_a_range(base: Path) -> None:
    chosen = choose_executor(ExecutorKind.PROCESS, base, run_as_uids=f"{FIRST}-{LAST}")
    assert isinstance(chosen, ProcessExecutor) and chosen.uids == UidPool(FIRST, LAST)
    assert describe(chosen).startswith(
        f"host processes, each rental as a uid of its own from {FIRST}-{LAST} ("
    )
    with pytest.raises(ExecutorError, match="not both"):
        choose_executor(ExecutorKind.PROCESS, base, run_as="nobody", run_as_uids=f"{FIRST}-{LAST}")
    with pytest.raises(ExecutorError, match="--run-as-uids is for --executor process or auto"):
        choose_executor(ExecutorKind.CONTAINER, base, run_as_uids=f"{FIRST}-{LAST}")


def test_suanli_agent_refuses_a_range_holding_a_user(tmp_path: Path) -> None:
    result = agent_cli(tmp_path, "--run-as-uids", "0-70000")
    assert result.exit_code == 2, result.output
    assert "--run-as-uids '0-70000'" in " ".join(result.output.split())


def test_a_root_agent_runs_each_rental_as_a_uid_of_its_own_by_default(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --run-as or --run-as-uids: rentals are isolated from one another and from the node key, as with
    an explicit range."""
    chosen = choose_executor(ExecutorKind.PROCESS, base)
    assert isinstance(chosen, ProcessExecutor) and chosen.uids == UidPool.parse(DEFAULT_UIDS)
    assert describe(chosen).startswith(
        f"host processes, each rental as a uid of its own from {DEFAULT_UIDS} ("
    )
    said, neighbour_uid = neighbour_seen_by_another(chosen, base)
    pool = range(chosen.uids.first, chosen.uids.last + 1)
    assert neighbour_uid in pool and int(said[0]) in pool and int(said[0]) != neighbour_uid
    assert said[1:] == ["env=denied", "signal=denied", "key=denied"]
    monkeypatch.setenv("PATH", str(tmp_path))  # no container runtime: auto runs host processes, isolated
    auto = choose_executor(ExecutorKind.AUTO, base)
    assert isinstance(auto, ProcessExecutor) and auto.uids == chosen.uids


def test_the_default_steps_back_with_a_warning_where_it_cannot_hold_and_none_opts_out(
    base: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hidden = tmp_path / "agent"  # pytest's tmp_path lies under a directory other users cannot pass through
    with caplog.at_level("WARNING"):
        chosen = choose_executor(ExecutorKind.PROCESS, hidden)
    assert isinstance(chosen, ProcessExecutor) and chosen.uids is None and chosen.run_as is None
    assert "workloads run as root" in caplog.text and "cannot be passed through" in caplog.text
    assert describe(chosen).startswith("host processes as root")
    kept = choose_executor(ExecutorKind.PROCESS, base, run_as_uids=NO_UIDS)
    assert isinstance(kept, ProcessExecutor) and kept.uids is None


def test_a_root_agent_keeps_its_work_dir_or_takes_var_lib(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "data"
    monkeypatch.setattr(agent_commands.platformdirs, "user_data_dir", lambda *a, **k: str(home))
    monkeypatch.setattr(agent_commands, "ROOT_WORK_DIR", tmp_path / "var-lib")
    assert agent_commands.default_work_dir() == tmp_path / "var-lib"
    (home / "agent").mkdir(parents=True)
    (home / "agent" / "agent.json").write_text("{}")  # registered before under root's data dir: kept
    assert agent_commands.default_work_dir() == home / "agent"


def test_a_daemon_left_in_a_session_of_its_own_is_killed_when_its_rental_ends_here(base: Path) -> None:
    """Stop signals the workload's process group; a child that called setsid is not in it and ran on as the
    rental's uid, with its environment, on GPUs let to the next tenant."""
    pool = UidPool.parse(f"{FIRST}-{LAST}")
    executor = ProcessExecutor(base, uids=pool)
    escapes = "setsid sh -c 'echo $$ > daemon; exec sleep 60' </dev/null >/dev/null 2>&1 & exit 0"
    workload = executor.launch(spec("r-1", escapes))
    assert workload.wait(WAIT_S).exit_code == 0
    wait_for(workload.paths.workdir / "daemon")
    daemon = int((workload.paths.workdir / "daemon").read_text())
    assert os.stat(f"/proc/{daemon}").st_uid == FIRST  # alive after its rental's workload ended
    try:
        end = time.monotonic() + WAIT_S
        removed: list[str] = []
        while not removed:  # the agent's step: the rental is no longer assigned here
            removed, _ = sweep_rentals(executor.rentals_dir, set(), pool)
            assert time.monotonic() < end, "the rental's directory was never removed"
            time.sleep(0.05)
        assert removed == ["r-1"] and FIRST not in running_uids()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon, signal.SIGKILL)


def two_agents(base: Path) -> tuple[UidPool, ProcessExecutor, ProcessExecutor]:
    """Two agents on one host (as `suanli demo` runs one per node): work dirs of their own, one uid range,
    one host-wide lease directory."""
    pool = UidPool(FIRST, LAST, base / "host-uid-leases")
    base.chmod(0o711)  # the agents' work dirs under it are reachable by their workloads' uids
    return pool, ProcessExecutor(base / "agent-a", uids=pool), ProcessExecutor(base / "agent-b", uids=pool)


def test_two_agents_on_one_host_never_give_two_rentals_one_uid(base: Path) -> None:
    """Each agent saw only its own rentals' directories: preparing at once, both picked the lowest uid."""
    _, first, second = two_agents(base)
    first.prepare(spec("r-alice", "true"))
    second.prepare(spec("r-bob", "true"))
    alice = first.paths("r-alice").workdir.stat().st_uid
    bob = second.paths("r-bob").workdir.stat().st_uid
    assert FIRST <= alice <= LAST and FIRST <= bob <= LAST
    assert alice != bob


def test_one_agents_rental_ending_does_not_kill_another_agents_workload(base: Path) -> None:
    """A rental directory made by an agent before leases (or a stray one) owned by a uid that another
    agent's rental now holds: its end must not SIGKILL that other tenant's workload."""
    pool, first, second = two_agents(base)
    running = first.launch(spec("r-alice", SLEEPS_WITH_A_SECRET))
    try:
        wait_for(running.paths.workdir / "ready")
        uid = running.paths.workdir.stat().st_uid
        ended = second.paths("r-bob")
        ended.create()
        os.chown(ended.workdir, uid, uid)  # the same uid, as the pickers without a lease gave it
        removed, _ = sweep_rentals(second.rentals_dir, set(), pool)
        assert removed == ["r-bob"]
        assert running.poll().running, "another agent's rental's end killed this tenant's workload"
    finally:
        running.kill()
