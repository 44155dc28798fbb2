"""Runs one workload and writes how it ended to its exit file, so an agent that was away can still report it.

The executors start `python -I -S supervisor.py EXIT_FILE READY_FD` as the leader of a new process group, with
the workload's argv and environment as JSON on stdin (never in its own environment: a tenant's PYTHONPATH or
locale must not reach this interpreter, nor anything this interpreter sets reach the workload). It starts the
workload in its own group with exactly that environment, its working directory and its output, writes
`started` (or why it could not start) to READY_FD, and waits. When the workload ends it writes
`{"pid", "exit_code", "signal"}` atomically and durably to EXIT_FILE (exit_code is 128 + signal when a signal
ended it), then ends the same way, so the agent that started it sees the workload's own status.

Signals sent to the group (stop, notice) reach the workload as before; the supervisor catches the ones that
would end it and does nothing (a handler, reset to the default in the workload; one the agent ignores stays
ignored, as in a child the agent starts itself), so it outlives the workload to write its end. SIGKILL ends
both: then there is no exit file, and the end stays unknown. Standard library only: it runs isolated from the
agent's packages.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_CAUGHT_NAMES = (
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGTERM",
    "SIGUSR1",
    "SIGUSR2",
    "SIGALRM",
    "SIGVTALRM",
    "SIGPROF",
    "SIGIO",
    "SIGPWR",
    "SIGXCPU",
)  # SIGPIPE and SIGXFSZ: Python ignores them here, and subprocess gives the workload their defaults
CAUGHT_SIGNALS = tuple(getattr(signal, name) for name in _CAUGHT_NAMES if hasattr(signal, name))
STARTED = b"started"


@dataclass(frozen=True, slots=True)
class ExitRecord:
    """How a supervised workload ended: its exit code (128 + signal when a signal ended it) and the signal."""

    exit_code: int
    signal: int | None


def read_exit(exit_file: Path, supervisor_pid: int) -> ExitRecord | None:
    """The end written by the supervisor with `supervisor_pid` (the recorded group leader), or None when there
    is none: still running, killed with its supervisor, a reboot, or a file from another run."""
    try:
        body = json.loads(exit_file.read_text(encoding="utf-8"))
        if body["pid"] != supervisor_pid:
            return None
        code, signum = body["exit_code"], body["signal"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(code, int) or not (signum is None or isinstance(signum, int)):
        return None
    return ExitRecord(code, signum)


def main(argv: list[str]) -> int:
    for signum in CAUGHT_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # one the agent ignored stays so for the workload
            signal.signal(signum, _ignore)
    exit_file, ready_fd = Path(argv[1]), int(argv[2])
    request = json.loads(sys.stdin.buffer.read())
    command = [str(arg) for arg in request["argv"]]
    try:
        user = {}
        if "uid" in request:  # the agent's --run-as: the workload alone drops to that user
            user = {"user": int(request["uid"]), "group": int(request["gid"]), "extra_groups": []}
        workload = subprocess.Popen(
            command, env=request["env"], stdin=subprocess.DEVNULL, close_fds=True, **user
        )
    except OSError as error:
        why = _why(command[0], request["env"], error)
        _answer(ready_fd, f"cannot start {command[0]!r}: {why}".encode())
        missing = why.startswith("not found") or isinstance(error, FileNotFoundError)
        return NOT_FOUND if missing else NOT_RUNNABLE
    _answer(ready_fd, STARTED)
    returncode = workload.wait()
    ended = ExitRecord(128 - returncode, -returncode) if returncode < 0 else ExitRecord(returncode, None)
    try:
        _write_durably(exit_file, {"pid": os.getpid(), "exit_code": ended.exit_code, "signal": ended.signal})
    except OSError as error:
        print(f"suanli supervisor: cannot write {exit_file}: {error}", file=sys.stderr, flush=True)
    if ended.signal is not None:
        _end_by(ended.signal)
    return ended.exit_code


NOT_FOUND, NOT_RUNNABLE = 127, 126  # a shell's statuses for a command it cannot find, or find but not run


def _why(program: str, env: dict[str, str], error: OSError) -> str:
    """Why `program` could not start: "not found" when no directory of the workload's PATH holds it, even if
    one it could not search made exec say "Permission denied" (a uid of its own cannot enter /root)."""
    if "/" in program:
        return str(error)
    path = env.get("PATH", os.defpath)
    if any(os.path.exists(os.path.join(folder or ".", program)) for folder in path.split(os.pathsep)):
        return str(error)
    return f"not found in PATH ({path})"


def _answer(ready_fd: int, message: bytes) -> None:
    """Tell the agent whether the workload started; an agent gone meanwhile does not stop this one."""
    with contextlib.suppress(OSError):
        os.write(ready_fd, message)
    os.close(ready_fd)


def _ignore(signum: int, frame: object) -> None:
    """A handler, not SIG_IGN: an ignored signal would stay ignored in the workload; a handler does not."""


def _write_durably(path: Path, body: dict[str, object]) -> None:
    """Write JSON so that a reader finds the whole of it or nothing, also after a crash of the host."""
    partial = path.with_suffix(".tmp")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(descriptor, json.dumps(body).encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(partial, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _end_by(signum: int) -> None:
    """End this process with the signal that ended the workload (without a core dump of this one)."""
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if signum not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught, blocked or reset
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
