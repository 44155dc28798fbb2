"""The agent's end of an attached command (`suanli exec -it RENTAL -- bash`): the command runs on a
pseudo-terminal (or two pipes, without `tty`) and a thread relays its bytes to and from the server's
WebSocket (`suanli.api.exec_attach`), which relays them to the tenant's client.

* Input comes as binary frames; a text frame is `{"rows": R, "cols": C}` (the terminal's size) or
  `{"eof": true}` (no more input: the pipe is closed; on a terminal, ^D is typed).
* Output goes as binary frames until the command and every process holding its terminal are gone, then the
  socket is closed; the exit code goes with the usual report (`ExecRunner.poll`). With `separate_stderr`
  stderr has a pipe of its own, and each frame starts with its stream: `STDOUT` or `STDERR`.
* When the socket closes first (the client went, or none came), the command's session is hung up (SIGHUP),
  and killed `HANGUP_GRACE_S` later if it is still there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from dataclasses import dataclass, field

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection

from suanli.agent.executors import Attachment
from suanli.client import ApiError, Client, ServerUnreachable
from suanli.client.streams import STDERR, STDOUT, control_message

log = logging.getLogger(__name__)
READ_BYTES = 16 * 1024  # of output per frame: small frames keep what waits behind a ^C short
POLL_S = 0.2  # how often a quiet command is checked for its end
HANGUP_GRACE_S = 5.0  # after SIGHUP, before SIGKILL, when the client went first
LARGEST_SIZE = 10_000  # rows or columns a terminal may be set to


@dataclass
class Ends:
    """The agent's ends of an attached command's input and output, and the child's (given to it at start,
    closed here once it runs)."""

    child: Attachment
    input_fd: int  # input goes here (a terminal's master side, or a pipe)
    output_fd: int  # output comes from here (the same master, or another pipe)
    error_fd: int | None = None  # stderr comes from here when it is kept apart (a third pipe)
    closed: set[int] = field(default_factory=set)  # never closed twice: the number may be reused

    @classmethod
    def open(cls, tty: bool, separate_stderr: bool = False) -> Ends:
        if tty:
            master, slave = pty.openpty()
            return cls(Attachment(slave, slave, tty=True), master, master)
        in_read, in_write = os.pipe()
        out_read, out_write = os.pipe()
        if not separate_stderr:
            return cls(Attachment(in_read, out_write, tty=False), in_write, out_read)
        err_read, err_write = os.pipe()
        child = Attachment(in_read, out_write, tty=False, stderr_fd=err_write)
        return cls(child, in_write, out_read, err_read)

    def streams(self) -> dict[int, bytes]:
        """The output's ends, each with what marks its frames (nothing when stderr goes with stdout)."""
        if self.error_fd is None:
            return {self.output_fd: b""}
        return {self.output_fd: bytes([STDOUT]), self.error_fd: bytes([STDERR])}

    def close_child(self) -> None:
        self._close(self.child.stdin_fd, self.child.stdout_fd, *self._child_stderr())

    def close_input(self) -> None:
        if self.input_fd != self.output_fd:
            self._close(self.input_fd)

    def close(self) -> None:
        self._close(self.child.stdin_fd, self.child.stdout_fd, self.input_fd, self.output_fd)
        self._close(*self._child_stderr(), *([] if self.error_fd is None else [self.error_fd]))

    def _child_stderr(self) -> list[int]:
        return [] if self.child.stderr_fd is None else [self.child.stderr_fd]

    def _close(self, *fds: int) -> None:
        for fd in set(fds) - self.closed:
            self.closed.add(fd)
            with contextlib.suppress(OSError):
                os.close(fd)


class AttachedSession:
    """Relays one attached command's bytes to and from the server, on threads of its own."""

    def __init__(self, client: Client, exec_id: str, process: subprocess.Popen[bytes], ends: Ends) -> None:
        self.client, self.exec_id, self.process, self.ends = client, exec_id, process, ends
        self.input_open = True
        self.thread = threading.Thread(target=self._run, name=f"attach-{exec_id}", daemon=True)

    def start(self) -> None:
        self.ends.close_child()  # the command holds them now; its end of output is its last holder going
        self.thread.start()

    def _run(self) -> None:
        try:
            socket = self.client.attach_agent_exec(self.exec_id)
        except (ApiError, ServerUnreachable) as error:
            log.warning(
                "exec %s: cannot attach to the server (%s); its command is hung up", self.exec_id, error
            )
            self._hang_up()
            self.ends.close()
            return
        reader = threading.Thread(
            target=self._input, args=(socket,), name=f"input-{self.exec_id}", daemon=True
        )
        reader.start()
        try:
            self._output(socket)
        finally:
            with contextlib.suppress(Exception):
                socket.close()
            reader.join(timeout=5)
            self.ends.close()

    def _output(self, socket: ClientConnection) -> None:
        """Send what the command prints until it and every holder of its output are gone."""
        ended_at: float | None = None
        streams = self.ends.streams()
        while streams:
            ready, _, _ = select.select(list(streams), [], [], POLL_S)
            for fd in ready:
                try:
                    block = os.read(fd, READ_BYTES)
                except OSError as error:  # EIO: the terminal's last holder closed it
                    if error.errno != errno.EIO:
                        raise
                    block = b""
                if not block:
                    del streams[fd]
                    continue
                try:
                    socket.send(streams[fd] + block)
                except ConnectionClosed:
                    self._hang_up()
                    return
            if ready:
                continue
            if self.process.poll() is not None:  # ended: a child it left may hold the output; not waited for
                ended_at = ended_at or time.monotonic()
                if time.monotonic() - ended_at >= POLL_S * 2:
                    return

    def _input(self, socket: ClientConnection) -> None:
        """Write what the client sends to the command; when the socket closes while it runs, hang it up."""
        try:
            for message in socket:
                if isinstance(message, bytes):
                    self._write(message)
                else:
                    self._control(message)
        except ConnectionClosed:
            pass
        if self.process.poll() is None:
            log.info("exec %s: its client went; the command is hung up", self.exec_id)
            self._hang_up()

    def _write(self, data: bytes) -> None:
        if not self.input_open:
            return
        try:
            os.write(self.ends.input_fd, data)
        except OSError:  # the command no longer reads it
            self.input_open = False

    def _control(self, text: str) -> None:
        if (control := control_message(text)) is None:
            return
        if control.get("eof") is True:
            if self.ends.child.tty:
                self._write(b"\x04")
            else:
                self.input_open = False
                self.ends.close_input()
        rows, cols = control.get("rows"), control.get("cols")
        if self.ends.child.tty and _size(rows) and _size(cols):
            with contextlib.suppress(OSError):
                fcntl.ioctl(self.ends.output_fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def _hang_up(self) -> None:
        """SIGHUP to the command's session (as a terminal that went away), SIGKILL a grace later."""
        pid = self.process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGHUP)
        deadline = time.monotonic() + HANGUP_GRACE_S
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def _size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= LARGEST_SIZE
