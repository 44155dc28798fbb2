"""Wake-ups between server processes: on PostgreSQL a NOTIFY from one engine reaches a listener on another;
on SQLite there is nothing to do; a NOTIFY that cannot be sent is logged, not raised."""

from __future__ import annotations

import logging
import threading

import pytest

from suanli.store.db import make_engine
from suanli.store.wakeups import Wakeups


def test_a_notify_reaches_the_listener_of_another_process(database_url: str) -> None:
    sender_engine, listener_engine = make_engine(database_url), make_engine(database_url)
    sender, listener = Wakeups(sender_engine), Wakeups(listener_engine)
    if database_url.startswith("sqlite"):
        assert not sender.enabled
        sender.notify()  # a no-op: one server process
        return
    woken, ends = threading.Event(), []

    def on_wake(*, ended: bool = False) -> None:
        ends.append(ended)
        woken.set()

    listener.listen(on_wake)
    try:
        for _ in range(40):  # the listener's LISTEN may come a moment after start
            sender.notify()
            if woken.wait(0.25):
                break
        assert woken.is_set() and not any(ends)  # a create or resize: the scheduler only
        woken.clear()
        sender.notify(ended=True)
        assert woken.wait(5) and ends[-1]  # a rental ended: the meter runs too
    finally:
        listener.stop()
        sender_engine.dispose()
        listener_engine.dispose()


def test_a_notify_that_cannot_be_sent_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")  # nothing listens on port 1
    with caplog.at_level(logging.WARNING, logger="suanli.store.wakeups"):
        Wakeups(engine).notify()
    assert "could not wake the leader" in caplog.text
    engine.dispose()
