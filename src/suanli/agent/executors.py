"""Running workloads on the host: what both executors share, and the process executor.

`Executor.launch(spec)` starts one workload and answers a `Workload` handle:

* `poll()` -> `WorkloadStatus` (running, or ended with its exit code or the signal that ended it);
* `notice(deadline)` writes the notice file (JSON: rental id, deadline) and then sends SIGTERM, so a workload
  that traps SIGTERM finds the notice already there; the caller kills it at the deadline;
* `stop(grace_s)` sends SIGTERM, waits up to `grace_s` for the workload (and for a process, its whole process
  group) to end, then SIGKILLs what is left; it returns the final status;
* `kill()` sends SIGKILL at once.

Every workload has its own directory under the executor's root: `rentals/<rental id>/` holding `work/` (its
working directory), `output.log` (stdout and stderr together, appended across restarts),
`control/notice.json`, `workload.json` (pid and process group, so an agent that restarts can find and kill
it, and on Linux the boot id and the leader's start time in clock ticks, so it can tell its workload from a
later process that got the same pid after a reboot or pid reuse) and `exit.json` (how the workload ended).

Both executors start the workload under `supervisor.py`, a small standard-library process that leads a new
session and process group (`start_new_session=True`), starts the workload in that group and, when it ends,
writes its exit code or signal to `exit.json` and ends the same way: an agent that was away when the workload
ended reads its end there. Stop/notice/kill signal the group as one (the supervisor outlives SIGTERM, not
SIGKILL); the group survives the agent exiting. The workload gets exactly the environment the executor builds,
passed to the supervisor on stdin, never through its own environment.

`ProcessExecutor` runs the command itself. The child inherits only `INHERITED_ENV` from the agent (never the
agent's credentials) plus the workload's env; HOME is its work dir. It refuses a workload with an image: a
command meant for a container never runs on the host.

The container executor (`ContainerExecutor`, docker or podman) lives in `containers.py`; it builds on what
this module holds for both: `RentalPaths`, `WorkloadSpec`, `WorkloadStatus`, `spawn`, `write_record`,
`status_of_returncode`.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from suanli.agent.identity import Account, IdentityFiles, login_shell, nss_wrapper_library, write_identity
from suanli.agent.isolation import master_port
from suanli.agent.supervisor import STARTED
from suanli.domain.errors import SuanliError

if TYPE_CHECKING:
    from suanli.agent.assignment import Assignment
    from suanli.agent.uids import UidPool

INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
POLL_INTERVAL_S = 0.02
SUPERVISOR = Path(__file__).with_name("supervisor.py")
EXIT_FILE = "exit.json"  # next to workload.json: how the run it records ended, written by its supervisor
RECORD_CLOCK_SLACK_S = 30.0  # a record without start ticks: how far its wall-clock start may be off
_RENTAL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class ExecutorError(SuanliError):
    """A workload could not be started: bad rental id, missing command or runtime, or the spawn failed.
    `exit_code`: a shell's status when the program could not be run (127: not found, 126: not runnable)."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class WorkloadState(StrEnum):
    RUNNING = "running"
    EXITED = "exited"  # ended by itself: see exit_code
    SIGNALED = "signaled"  # ended by a signal: see signal


@dataclass(frozen=True, slots=True)
class WorkloadStatus:
    state: WorkloadState
    exit_code: int | None = None  # the code it exited with; 128 + signal when signaled
    signal: int | None = None

    @property
    def running(self) -> bool:
        return self.state is WorkloadState.RUNNING


@dataclass(frozen=True, slots=True)
class RentalPaths:
    """The per-rental directory and the files in it."""

    root: Path

    @property
    def workdir(self) -> Path:
        return self.root / "work"

    @property
    def log_file(self) -> Path:
        return self.root / "output.log"

    @property
    def log_base_file(self) -> Path:
        """Bytes of the node's log the server held before `log_file` began (placed here again)."""
        return self.root / "output.base"

    @property
    def control_dir(self) -> Path:
        return self.root / "control"

    @property
    def notice_file(self) -> Path:
        return self.control_dir / "notice.json"

    @property
    def nodes_file(self) -> Path:
        return self.control_dir / "nodes.json"

    @property
    def record_file(self) -> Path:
        return self.root / "workload.json"

    @property
    def exit_file(self) -> Path:
        return self.root / EXIT_FILE

    @property
    def tmp_dir(self) -> Path:
        """The workload's TMPDIR: temporary files go with its directory, not to a /tmp the next one shares."""
        return self.workdir / "tmp"

    def create(self) -> None:
        for directory in (self.root, self.workdir, self.control_dir):
            directory.mkdir(parents=True, exist_ok=True)


def rentals_dir(base: Path) -> Path:
    """Where the rentals' directories lie under an agent's work directory `base`."""
    return base / "rentals"


def rental_paths(base: Path, rental_id: str) -> RentalPaths:
    """The directory of one rental under `base`; ExecutorError for an id that is not a safe name."""
    if not _RENTAL_ID.match(rental_id):
        raise ExecutorError(f"rental id {rental_id!r} is not a safe directory name")
    return RentalPaths(rentals_dir(base) / rental_id)


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """One workload to launch: `env` is the output of `isolation.workload_env` (with the notice file path)."""

    rental_id: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    devices: tuple[str, ...] = ()  # GPU / MIG UUIDs, for container runtimes
    image: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


class Workload(Protocol):
    @property
    def pid(self) -> int: ...

    def poll(self) -> WorkloadStatus: ...

    # the notice file (with why: `cause`), then SIGTERM; killed at `deadline` by the agent
    def notice(self, deadline: datetime, cause: str | None = None) -> None: ...

    def stop(self, grace_s: float) -> WorkloadStatus: ...

    def kill(self) -> WorkloadStatus: ...


class Executor(Protocol):
    runs_images: bool  # whether it runs a rental's container image (told to the server in each heartbeat)

    def paths(self, rental_id: str) -> RentalPaths: ...

    @property
    def rentals_dir(self) -> Path: ...  # where the rentals' directories are (`paths(id).root` lies in it)

    def launch(self, spec: WorkloadSpec) -> Workload: ...

    # the rental's directories (and user) made ready as `launch` makes them, for commands run in a rental
    # that runs no workload (`suanli exec` into held GPUs); ExecutorError when commands cannot run there
    def prepare(self, spec: WorkloadSpec) -> None: ...

    # the address at which this host reaches the rental's ports (`suanli port-forward`)
    def address(self, spec: WorkloadSpec) -> str: ...

    # a one-off command inside a running workload's context (`suanli exec`), its stdout and stderr to
    # `output` (or, attached, to and from `attach`); ended at `timeout_s` (by `timeout` itself where it
    # can, so it outlives no agent)
    def run_command(
        self,
        spec: WorkloadSpec,
        command: Sequence[str],
        timeout_s: int,
        output: Path,
        attach: Attachment | None = None,
    ) -> subprocess.Popen[bytes]: ...


@dataclass(frozen=True, slots=True)
class Attachment:
    """The child's ends of an attached command's input and output (`suanli exec -i`): a pseudo-terminal's
    side with `tty`, else the pipes' ends (stderr's own, or stdout's); the agent holds the other ends."""

    stdin_fd: int
    stdout_fd: int
    tty: bool
    stderr_fd: int | None = None  # None: stderr goes with stdout

    def child_argv(self, argv: Sequence[str]) -> list[str]:
        """`argv` started so that, with a terminal, it is the controlling terminal of the command's session
        (util-linux `setsid --ctty`: job control and ^C work as in a login)."""
        return ["setsid", "--ctty", *argv] if self.tty else list(argv)


@dataclass(frozen=True, slots=True)
class RunAs:
    """The unprivileged user a process workload runs as (`suanli agent --run-as`), so that it cannot read the
    agent's node key, other rentals' files or anything else of the agent's user."""

    name: str
    uid: int
    gid: int
    account: bool = True  # a user of the host's; a uid of `--run-as-uids` has no account (no passwd entry)

    @property
    def login(self) -> str:
        """USER and LOGNAME for its processes: the account's name, or `u<uid>` for a uid without one, so
        that what asks for the user's name (Python's getpass, hence PyTorch's compile cache) gets one."""
        return self.name if self.account else f"u{self.uid}"

    @classmethod
    def of(cls, name: str) -> RunAs:
        """The local user `name`; ExecutorError when there is none, or when this agent is not root (only root
        can start a process as another user)."""
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise ExecutorError(f"--run-as {name!r}: no such user on this host") from None
        if os.geteuid() != 0:
            raise ExecutorError(
                f"--run-as {name!r}: the agent must run as root to start workloads as another user"
            )
        return cls(name, entry.pw_uid, entry.pw_gid)


class ProcessExecutor:
    """Workloads as child process groups under `base/rentals/<id>/`; with `run_as`, as that user, each in a
    working directory of its own that the agent's other files are not readable from."""

    runs_images = False

    def __init__(
        self,
        base: Path,
        inherit: Sequence[str] = INHERITED_ENV,
        run_as: RunAs | None = None,
        uids: UidPool | None = None,
    ) -> None:
        if run_as is not None and uids is not None:
            raise ExecutorError("give --run-as or --run-as-uids, not both")
        self.base = base
        self._inherit = tuple(inherit)
        self.run_as = run_as
        self.uids = uids
        self.nss_wrapper = nss_wrapper_library() if uids is not None else None  # names the pool's uids
        if run_as is not None:
            check_reachable(base, f"--run-as {run_as.name!r}")
        elif uids is not None:
            check_reachable(base, f"--run-as-uids {uids.label}")

    def paths(self, rental_id: str) -> RentalPaths:
        return rental_paths(self.base, rental_id)

    @property
    def rentals_dir(self) -> Path:
        return rentals_dir(self.base)

    def launch(self, spec: WorkloadSpec) -> ProcessWorkload:
        if spec.image is not None:  # never run a command meant for a container on the host itself
            raise ExecutorError(
                f"this node's agent runs workloads as host processes and cannot run image {spec.image!r}: "
                "its operator must start it with `suanli agent --executor container` (docker or podman)"
            )
        if not spec.command:
            raise ExecutorError(f"rental {spec.rental_id}: no command to run")
        paths = self.paths(spec.rental_id)
        user = self._ready(paths)
        paths.notice_file.unlink(missing_ok=True)  # a notice from an earlier run is not for this one
        process = spawn(list(spec.command), self._env(spec, paths, user), paths, user)
        write_record(paths, process.pid, spec)
        return ProcessWorkload(spec.rental_id, process, paths)

    def prepare(self, spec: WorkloadSpec) -> None:
        self._ready(self.paths(spec.rental_id))

    def address(self, spec: WorkloadSpec) -> str:
        """Host processes share the host's network: their ports are the host's."""
        return "127.0.0.1"

    def _env(self, spec: WorkloadSpec, paths: RentalPaths, user: RunAs | None) -> dict[str, str]:
        """What the agent passes on, its HOME and TMPDIR (and USER and LOGNAME, run as another user), then
        the rental's own variables, and for a uid of the pool the nss_wrapper that names it (`identity`);
        run as another user, a PATH without the directories that user cannot search (root's ~/.local/bin,
        say), where a missing program would read "Permission denied" rather than "not found"."""
        env = {name: os.environ[name] for name in self._inherit if name in os.environ}
        if user is not None and "PATH" in env:
            env["PATH"] = searchable_path(env["PATH"], user)
        env["HOME"] = str(paths.workdir)
        env["TMPDIR"] = str(paths.tmp_dir)
        if user is not None:
            env["USER"] = env["LOGNAME"] = user.login
        env.update(spec.env)
        if (identity := self._identity(paths, user)) is not None and identity.passwd.exists():
            env.update(identity.env(spec.env.get("LD_PRELOAD")))
        return env

    def _identity(self, paths: RentalPaths, user: RunAs | None) -> IdentityFiles | None:
        """The passwd and group files that name a uid of the pool (None: an account's, or no nss_wrapper)."""
        if user is None or user.account or self.nss_wrapper is None:
            return None
        return IdentityFiles(self.nss_wrapper, paths.control_dir / "passwd", paths.control_dir / "group")

    def _user(self, paths: RentalPaths) -> RunAs | None:
        """The user the rental's processes run as (None: the agent's)."""
        return self.run_as if self.uids is None else self.uids.pick(paths, self.rentals_dir)

    def _ready(self, paths: RentalPaths) -> RunAs | None:
        """The rental's directories, owned by the user its processes run as (returned; None: the agent's)."""
        paths.create()  # before the uid is picked: its host-wide lease names this existing directory
        user = self._user(paths)
        paths.tmp_dir.mkdir(mode=0o700, exist_ok=True)
        if user is not None:
            confine(paths, user)
        if (identity := self._identity(paths, user)) is not None and user is not None:
            account = Account(user.login, user.uid, user.gid, paths.workdir, login_shell(), "suanli rental")
            write_identity(identity, account)
        return user

    def run_command(
        self,
        spec: WorkloadSpec,
        command: Sequence[str],
        timeout_s: int,
        output: Path,
        attach: Attachment | None = None,
    ) -> subprocess.Popen[bytes]:
        """`command` as the workload runs: its user, environment and working directory, in a session of its
        own under coreutils' `timeout` (TERM at `timeout_s`, KILL 5 s later; exit 124 when it timed out).
        On a terminal `timeout` stays in the foreground, so a shell under it may read the terminal."""
        paths = self.paths(spec.rental_id)
        if not paths.workdir.is_dir():
            raise ExecutorError(f"rental {spec.rental_id} has no working directory on this node")
        user = self._user(paths)
        env = self._env(spec, paths, user)
        as_user: dict[str, object] = {}
        if user is not None:
            as_user = {"user": user.uid, "group": user.gid, "extra_groups": []}
        foreground = ["--foreground"] if attach is not None and attach.tty else []
        argv = ["timeout", *foreground, "--kill-after=5", f"{timeout_s}s", *command]
        if attach is not None and attach.tty:
            env.setdefault("TERM", TERMINAL_TYPE)
        return start_command(argv, env, output, attach, cwd=paths.workdir, **as_user)


TERMINAL_TYPE = "xterm-256color"  # TERM for a command on a terminal, unless the rental sets its own
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def searchable_path(value: str, user: RunAs) -> str:
    """The entries of PATH `value` that `user` can search (each directory on the way can be passed through
    by it), in order; the usual system PATH when none is left."""
    kept = [entry for entry in value.split(":") if entry and _searchable(Path(entry), user)]
    return ":".join(kept) or DEFAULT_PATH


def _searchable(directory: Path, user: RunAs) -> bool:
    try:
        resolved = directory.resolve(strict=True)
        for step in (resolved, *resolved.parents):
            info = step.stat()
            if info.st_uid == user.uid:
                allowed = info.st_mode & stat.S_IXUSR
            elif info.st_gid == user.gid:
                allowed = info.st_mode & stat.S_IXGRP
            else:
                allowed = info.st_mode & stat.S_IXOTH
            if not allowed:
                return False
        return resolved.is_dir()
    except OSError:
        return False


def start_command(
    argv: Sequence[str],
    env: Mapping[str, str],
    output: Path,
    attach: Attachment | None = None,
    **popen: object,
) -> subprocess.Popen[bytes]:
    """A one-off command (`run_command`) in a session of its own, stdout and stderr to `output` and no
    stdin, or all three to and from `attach`; ExecutorError (exit code 127, as a shell's) when it cannot be
    started."""
    try:
        if attach is not None:  # `setsid` makes the session: it would fork if it led a group already
            return subprocess.Popen(  # type: ignore[call-overload]
                attach.child_argv(argv),
                env=dict(env),
                stdin=attach.stdin_fd,
                stdout=attach.stdout_fd,
                stderr=attach.stdout_fd if attach.stderr_fd is None else attach.stderr_fd,
                start_new_session=not attach.tty,
                close_fds=True,
                **popen,
            )
        with output.open("wb") as out:
            return subprocess.Popen(  # type: ignore[call-overload]
                list(argv),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                **popen,
            )
    except OSError as error:
        raise ExecutorError(f"cannot run {argv[0]!r}: {error}", exit_code=127) from None


class ProcessWorkload:
    """A running child process group; the group id is the child's pid."""

    def __init__(self, rental_id: str, process: subprocess.Popen[bytes], paths: RentalPaths) -> None:
        self.rental_id = rental_id
        self._process = process
        self.paths = paths

    @property
    def pid(self) -> int:
        return self._process.pid

    def poll(self) -> WorkloadStatus:
        return status_of_returncode(self._process.poll())

    def notice(self, deadline: datetime, cause: str | None = None) -> None:
        write_notice(self.paths.notice_file, self.rental_id, deadline, cause=cause)
        self._signal(signal.SIGTERM)

    def stop(self, grace_s: float) -> WorkloadStatus:
        self._signal(signal.SIGTERM)
        _wait_until(self._group_gone, grace_s)
        return self.kill()

    def kill(self) -> WorkloadStatus:
        self._signal(signal.SIGKILL)
        self._process.wait()
        return self.poll()

    def wait(self, timeout_s: float) -> WorkloadStatus:
        """The status once the process ends, or RUNNING after `timeout_s`."""
        _wait_until(lambda: not self.poll().running, timeout_s)
        return self.poll()

    def _group_gone(self) -> bool:
        """True when the child has ended (and is reaped) and no process is left in its group."""
        if self._process.poll() is None:
            return False
        return not group_alive(self._process.pid)

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group has ended already
            os.killpg(self._process.pid, signum)


def write_notice(
    path: Path,
    rental_id: str,
    deadline: datetime,
    keeps_gpus: int | None = None,
    cause: str | None = None,
    released: bool = False,
) -> None:
    """Write the notice file atomically (a reader sees no file or the whole JSON, never half of it); with
    `keeps_gpus`, a trim's: at the deadline the rental runs on with that many GPUs (reason `trimmed`), and
    `released` on a node the trim gives up (the part here ends then); `cause`: why (`higher_tier`,
    `spot_floor`, `maintenance`, `reclaimed`), as the server says."""
    if deadline.tzinfo is None:
        raise ExecutorError("a notice deadline must be timezone-aware")
    body: dict[str, object] = {
        "rental_id": rental_id,
        "reason": "preempted" if keeps_gpus is None else "trimmed",
        "deadline": deadline.isoformat(),
        "deadline_unix_s": deadline.timestamp(),
    }
    if keeps_gpus is not None:
        body["keeps_gpus"] = keeps_gpus
        body["released"] = released
    if cause is not None:
        body["cause"] = cause
    _write_json(path, body)


def read_notice_deadline(path: Path) -> datetime | None:
    """The deadline of the preemption notice in `path` (None: no file, a trim's, or unreadable): an agent
    that adopts a workload after a restart tells it again only a notice it was not told."""
    try:
        body = json.loads(path.read_text())
        if body.get("reason") != "preempted":
            return None
        return datetime.fromisoformat(body["deadline"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_nodes(path: Path, assignment: Assignment) -> None:
    """Write the nodes file atomically: the rental's nodes (host names, rank order) and this one's rank.
    The agent rewrites it when the rental grows or shrinks, so an elastic workload can follow."""
    peers = assignment.peers
    body = {
        "rental_id": assignment.rental_id,
        "nodes": list(peers),
        "nnodes": len(peers),
        "node_rank": assignment.node_rank,
        "master_addr": peers[0] if peers else None,
        "master_port": master_port(assignment) if peers else None,
    }
    _write_json(path, body)


def _write_json(path: Path, body: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(body), encoding="utf-8")
    os.replace(partial, path)


def group_alive(pgid: int) -> bool:
    """True while any process (other than zombies) is in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not Path("/proc").is_dir():  # no /proc to tell zombies apart: trust killpg
        return True
    return any(_in_group_and_alive(pid, pgid) for pid in _pids())


def check_reachable(base: Path, option: str) -> None:
    """ExecutorError (naming the `option` asked) when a directory above `base` cannot be passed through by
    other users: a workload run as another user would not reach its own working directory or notice file
    there (say, under /root)."""
    for directory in base.resolve().parents:
        if directory.exists() and not directory.stat().st_mode & 0o001:
            raise ExecutorError(
                f"{option}: {directory} cannot be passed through by other users, so workloads "
                "could not reach their directories under it; give --work-dir elsewhere (e.g. /var/lib/suanli)"
            )


def confine(paths: RentalPaths, user: RunAs) -> None:
    """Lay out a rental's directory for a workload run as `user`: the agent's directories can be passed
    through but not listed (0711), the log and records are the agent's alone (0600), the control files
    (notice, nodes) readable, and the working directory and its TMPDIR the user's own (0700)."""
    for directory in (paths.root.parent.parent, paths.root.parent, paths.root, paths.control_dir):
        directory.chmod(0o711)
    for own in (paths.workdir, paths.tmp_dir):
        os.chown(own, user.uid, user.gid)
        own.chmod(0o700)
    os.close(os.open(paths.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    paths.log_file.chmod(0o600)


def spawn(
    argv: list[str], env: Mapping[str, str], paths: RentalPaths, run_as: RunAs | None = None
) -> subprocess.Popen[bytes]:
    """Start `argv` under the supervisor, which leads its process group and records its end in the exit file
    (as `run_as` when given: the supervisor stays the agent's, the workload drops to that user);
    ExecutorError when the workload could not be started (the supervisor says why and ends)."""
    paths.exit_file.unlink(missing_ok=True)  # the end of an earlier run is not this one's
    ready, ready_for_child = os.pipe()
    try:
        with paths.log_file.open("ab") as log:
            supervisor = subprocess.Popen(
                [sys.executable, "-I", "-S", str(SUPERVISOR), str(paths.exit_file), str(ready_for_child)],
                cwd=paths.workdir,
                env={},
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                pass_fds=(ready_for_child,),
            )
    except OSError as exc:
        os.close(ready)
        raise ExecutorError(f"cannot start the workload supervisor: {exc}") from None
    finally:
        os.close(ready_for_child)
    with contextlib.suppress(OSError), supervisor.stdin as request:  # a supervisor gone says so below
        user = {} if run_as is None else {"uid": run_as.uid, "gid": run_as.gid}
        request.write(json.dumps({"argv": argv, "env": dict(env), **user}).encode())
    with os.fdopen(ready, "rb") as answer_file:
        answer = answer_file.read()
    if answer != STARTED:
        supervisor.wait()
        reason = answer.decode(errors="replace") or f"its supervisor ended with {supervisor.returncode}"
        if not answer:
            raise ExecutorError(f"cannot start {argv[0]!r}: {reason}")
        raise ExecutorError(reason, exit_code=supervisor.returncode if supervisor.returncode > 0 else None)
    return supervisor


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """What tells a process from a later one given the same pid: the boot it runs in and its start time (clock
    ticks since boot)."""

    boot_id: str
    start_ticks: int


def process_identity(pid: int) -> ProcessIdentity | None:
    """The identity of process `pid` from /proc (field 22 of its stat), or None where it cannot be read."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
        return ProcessIdentity(boot_id, int(stat[stat.rfind(")") + 2 :].split()[19]))
    except (OSError, ValueError, IndexError):
        return None


def started_unix_s(identity: ProcessIdentity) -> float | None:
    """When a process started, in Unix seconds: the boot time in /proc/stat plus its start ticks."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
        boot = next(int(line.split()[1]) for line in lines if line.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return boot + identity.start_ticks / os.sysconf("SC_CLK_TCK")


def record_matches(
    record: Mapping[str, object], now: ProcessIdentity | None, now_started_unix_s: float | None
) -> bool | None:
    """Whether a workload record describes the process that now has its pid: by boot id and start ticks, or
    for a record written before they were kept, by its wall-clock start; None when it cannot be told."""
    if now is None:
        return None
    if record.get("boot_id") is not None and record.get("start_ticks") is not None:
        return record["boot_id"] == now.boot_id and record["start_ticks"] == now.start_ticks
    written = record.get("started_unix_s")
    if not isinstance(written, int | float) or now_started_unix_s is None:
        return None
    return abs(written - now_started_unix_s) <= RECORD_CLOCK_SLACK_S


def record_describes_process(record: Mapping[str, object], pid: int) -> bool | None:
    """`record_matches` for the process that has `pid` now (None: no such process, or no /proc to tell)."""
    now = process_identity(pid)
    return record_matches(record, now, None if now is None else started_unix_s(now))


def write_record(paths: RentalPaths, pid: int, spec: WorkloadSpec, runtime: str | None = None) -> None:
    """Write `workload.json`; `runtime`: the container runtime that runs it, None for a process."""
    identity = process_identity(pid)
    record = {
        "rental_id": spec.rental_id,
        "pid": pid,
        "pgid": pid,
        "started_unix_s": time.time(),
        "boot_id": None if identity is None else identity.boot_id,
        "start_ticks": None if identity is None else identity.start_ticks,
        "devices": list(spec.devices),  # what it sees: a later agent restarts it if its GPUs changed
        "container_runtime": runtime,  # a later agent signals and removes its container through it
    }
    paths.record_file.write_text(json.dumps(record), encoding="utf-8")


def status_of_returncode(returncode: int | None) -> WorkloadStatus:
    """A workload's status from its process's return code (None: still running; negative: the signal)."""
    if returncode is None:
        return WorkloadStatus(WorkloadState.RUNNING)
    if returncode < 0:
        return WorkloadStatus(WorkloadState.SIGNALED, exit_code=128 - returncode, signal=-returncode)
    return WorkloadStatus(WorkloadState.EXITED, exit_code=returncode)


def _wait_until(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if done():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL_S)


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _in_group_and_alive(pid: int, pgid: int) -> bool:
    """From /proc/<pid>/stat: the process is in group `pgid` and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[2] == str(pgid) and fields[0] != "Z"
