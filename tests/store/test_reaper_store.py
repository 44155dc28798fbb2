"""The reaper loop on the real store (SQLite and PostgreSQL): a node that missed its heartbeats is marked
down, but not on the first tick after the reaper's own process paused (its heartbeats may wait unread)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import agent_service
from suanli.app.records import Caller, Tenant
from suanli.loops.agent_reaper import ReaperLoop
from suanli.store.leader import Leadership

FLEET = (Path(__file__).resolve().parents[2] / "examples" / "fleet.toml").read_text()
NODE = "h100-a-01"
T0 = datetime(2030, 1, 1, tzinfo=UTC)
ADMIN = Caller(Tenant("ten_admin", "admin", "admin", T0), "key_admin")
TIMEOUT = timedelta(seconds=30)  # 3 heartbeats 10 s apart


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.at_s = 0.0

    def __call__(self) -> float:
        return self.at_s


def _reaper(store, clock, ticks):
    engine, factory = store
    with factory() as u:
        u.tenants.add(ADMIN.tenant)
        u.fleet.put(FLEET, [NODE], T0)
        u.commit()
    agents = agent_service(engine, clock)
    _, secret = agents.create_token(ADMIN, NODE)
    key = agents.register(secret, {})[1]
    return ReaperLoop(agents, Leadership(engine), 5.0, monotonic_s=ticks), key


def _up(reaper) -> bool:
    with reaper.agents.uow() as uow:
        (node,) = [n for n in uow.agents.nodes() if n.node == NODE]
        return node.up


def test_a_node_silent_past_the_timeout_is_marked_down_on_the_next_tick(store, clock) -> None:
    clock.at, ticks = T0, Ticks()
    reaper, key = _reaper(store, clock, ticks)
    reaper.agents.heartbeat(key, [], [])
    reaper.work()
    clock.at, ticks.at_s = T0 + TIMEOUT + timedelta(seconds=1), 5.0
    reaper.work()
    assert not _up(reaper)


def test_after_the_reaper_itself_paused_a_node_is_marked_down_only_if_still_silent_a_tick_later(
    store, clock
) -> None:
    """A leader stopped longer than the timeout (SIGSTOP, a VM paused, a long GC) reaped at once on waking,
    before the heartbeats waiting in its sockets were read, and ended healthy nodes' rentals lost. The first
    tick after the pause marks nothing; a heartbeat read before the next keeps the node up; silence does
    not."""
    clock.at, ticks = T0, Ticks()
    reaper, key = _reaper(store, clock, ticks)
    reaper.agents.heartbeat(key, [], [])
    reaper.work()
    clock.at, ticks.at_s = T0 + timedelta(seconds=45), 45.0  # the process stood still 45 s
    reaper.work()
    assert _up(reaper)  # its heartbeats may wait unread
    reaper.agents.heartbeat(key, [], [])  # they did: read now
    clock.at, ticks.at_s = T0 + timedelta(seconds=50), 50.0
    reaper.work()
    assert _up(reaper)
    clock.at, ticks.at_s = T0 + timedelta(seconds=125), 125.0  # paused again, and no heartbeat this time
    reaper.work()
    assert _up(reaper)
    clock.at, ticks.at_s = T0 + timedelta(seconds=130), 130.0
    reaper.work()
    assert not _up(reaper)
