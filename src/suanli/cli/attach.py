"""The client's end of an attached command (`suanli exec -it`): this terminal's keys go to the command and
its output comes back, through the server's WebSocket. With a terminal on both sides this one is put in
raw mode (every key, ^C included, goes to the remote command) and its size follows the window."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import termios
import threading
import tty
from collections.abc import Iterator

from websockets.exceptions import ConnectionClosed, ConnectionClosedOK
from websockets.sync.client import ClientConnection

from suanli.client.forward import REFUSED, Refused
from suanli.client.streams import END_OF_INPUT, READ_BYTES, STDERR, output_stream

ENDED_BEFORE_ITS_AGENT = 4410  # the command ended (it failed to start) before its node's agent came


def relay(
    socket: ClientConnection, stdin_fd: int, stdout_fd: int, terminal: bool, stderr_fd: int | None = None
) -> None:
    """Relay `stdin_fd` to the command and its output to `stdout_fd` until the server closes the socket;
    `terminal`: this side's stdin is a terminal to put in raw mode and size the remote one by; `stderr_fd`:
    the command keeps its stderr apart (`separate_stderr`), which goes there."""
    with _raw(stdin_fd, terminal), _window_size(socket, stdin_fd, terminal):
        threading.Thread(target=_send_input, args=(socket, stdin_fd), daemon=True).start()
        try:
            for message in socket:
                if not isinstance(message, bytes):
                    continue
                if stderr_fd is None:
                    _write_all(stdout_fd, message)
                elif (marked := output_stream(message)) is not None:
                    stream, data = marked
                    _write_all(stderr_fd if stream == STDERR else stdout_fd, data)
        except ConnectionClosedOK:
            pass
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else 1006
            if code >= REFUSED:
                raise Refused(code, closed.rcvd.reason if closed.rcvd is not None else "") from None
            raise
    code = socket.close_code or 1000
    if code >= REFUSED:
        raise Refused(code, socket.close_reason or "")


def _send_input(socket: ClientConnection, stdin_fd: int) -> None:
    """This side's input to the command, then `{"eof": true}` at its end."""
    with contextlib.suppress(ConnectionClosed, OSError):
        while block := os.read(stdin_fd, READ_BYTES):
            socket.send(block)
        socket.send(END_OF_INPUT)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextlib.contextmanager
def _raw(fd: int, terminal: bool) -> Iterator[None]:
    if not terminal:
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSANOW)  # not TCSAFLUSH: keys typed ahead are kept
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _window_size(socket: ClientConnection, fd: int, terminal: bool) -> Iterator[None]:
    """Send this terminal's size now and whenever its window changes (SIGWINCH)."""
    if not terminal or threading.current_thread() is not threading.main_thread():
        yield
        return

    changes: queue.SimpleQueue[bool] = queue.SimpleQueue()  # the handler only notes it: sends take a lock

    def send_sizes() -> None:
        while changes.get():
            with contextlib.suppress(OSError, ConnectionClosed):
                size = os.get_terminal_size(fd)
                socket.send(json.dumps({"rows": size.lines, "cols": size.columns}))

    threading.Thread(target=send_sizes, daemon=True).start()
    changes.put(True)
    previous = signal.signal(signal.SIGWINCH, lambda *_: changes.put(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)
        changes.put(False)
