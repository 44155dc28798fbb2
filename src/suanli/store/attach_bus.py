"""Frames of attached commands between server processes on PostgreSQL: `NOTIFY` on one channel, `LISTEN` in
every process (`suanli.api.exec_attach` relays through it).

The tenant's client and the node's agent may reach different server processes (`suanli server --workers
N`, or several servers on one database), so on PostgreSQL every frame goes through the database: each end's
frames are sent with `pg_notify`, one after another, and every process's listener hands those addressed to
an end it holds to that end. PostgreSQL delivers the notifications of one sender in the order they were
committed. A payload holds at most 8000 bytes, so a binary frame goes in base64 pieces of `PIECE_BYTES`,
all but the last marked `more`, and the listener joins them into the frame again before it hands it on: a
frame's boundaries carry meaning (a port forward's connection number, a stream's mark leads each). On
SQLite there is one server process, and the relay keeps frames in memory.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from sqlalchemy import Engine, text

CHANNEL = "suanli_attach"
PIECE_BYTES = 5000  # of a binary frame per notification: 6,668 characters in base64, under 8000 with the rest
POLL_S = 0.5  # how often the listener checks that it should go on
RETRY_S = 1.0  # after a lost connection

log = logging.getLogger(__name__)
Message = dict[str, Any]


def piece_count(data: bytes | str) -> int:
    """How many notifications a frame takes."""
    return max(1, -(-len(data) // PIECE_BYTES)) if isinstance(data, bytes) else 1


def encode(message: Message) -> Iterator[str]:
    """The payloads of `message`: one, or for a binary frame (`data` bytes) one per piece."""
    data = message.get("data")
    if not isinstance(data, bytes):
        yield json.dumps(message, separators=(",", ":"))
        return
    count = piece_count(data)
    for index in range(count):
        piece = base64.b64encode(data[index * PIECE_BYTES : (index + 1) * PIECE_BYTES]).decode()
        more = {"more": True} if index < count - 1 else {}
        yield json.dumps({**message, "data": None, "b64": piece, **more}, separators=(",", ":"))


def decode(payload: str) -> Message | None:
    """A message from its payload (a binary piece's data as bytes); None when it is not one of ours."""
    try:
        message = json.loads(payload)
        if not isinstance(message, dict):
            return None
        if "b64" in message:
            message["data"] = base64.b64decode(message.pop("b64"))
        return message
    except (ValueError, TypeError):
        return None


class Joiner:
    """Binary pieces joined into their frames again, by the exec and end they go to (one sender's pieces of a
    frame are sent in one transaction, so they arrive together and in order)."""

    def __init__(self) -> None:
        self.partial: dict[tuple[object, object], bytearray] = {}

    def add(self, message: Message) -> Message | None:
        """The whole message once its last piece came (a message in one piece at once); None before."""
        data = message.get("data")
        if not isinstance(data, bytes):
            return message
        key = (message.get("exec"), message.get("to"))
        if message.pop("more", False):
            self.partial.setdefault(key, bytearray()).extend(data)
            return None
        if (before := self.partial.pop(key, None)) is not None:
            message["data"] = bytes(before + data)
        return message


class AttachBus:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.enabled = engine.dialect.name == "postgresql"
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._thread: threading.Thread | None = None

    def publish(self, message: Message) -> None:
        """Send `message` to every process (in order after what this caller sent before)."""
        with self.engine.connect() as connection:
            for payload in encode(message):
                connection.execute(
                    text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": payload}
                )
            connection.commit()

    def listen(self, deliver: Callable[[Message], None]) -> None:
        """Call `deliver` (in a daemon thread) with each message until `stop`; returns once it listens."""
        if not self.enabled or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(deliver,), name="suanli-attach", daemon=True)
        self._thread.start()
        self._listening.wait(timeout=10)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self, deliver: Callable[[Message], None]) -> None:
        dsn = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        while not self._stop.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    joiner = Joiner()  # a frame cut by a lost connection is dropped with it
                    while not self._stop.is_set():
                        for notification in connection.notifies(timeout=POLL_S):
                            piece = decode(notification.payload)
                            if piece is None or (message := joiner.add(piece)) is None:
                                continue
                            try:
                                deliver(message)
                            except Exception:  # one bad frame must not end the listener
                                log.exception("attached frame not delivered")
            except psycopg.Error as error:
                log.warning("attach listener lost its connection (%s); retrying", error)
                self._stop.wait(RETRY_S)
