"""The real app through TestClient, on SQLite and PostgreSQL, with the example fleet loaded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from suanli.api.app import create_app
from suanli.api.worked_example import ReplayClock, _advance
from suanli.cli.output import api_errors
from suanli.client import Client
from suanli.config import Settings

ADMIN_KEY = "sk_admin_bootstrap_for_tests"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
FLEET = (Path(__file__).resolve().parents[2] / "examples" / "fleet.toml").read_text()


class FixedClock:
    """Now is `at`: swapped into a service to put it at a chosen moment."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


class MidMonthClock:
    """The system's clock moved to the 10th of this month at the same time of day, running: a test that steps
    hours or a day ahead stays inside the month it started in, whatever today's date."""

    def __init__(self) -> None:
        now = datetime.now(UTC)
        self.shift = now.replace(day=10) - now

    def now(self) -> datetime:
        return datetime.now(UTC) + self.shift


class SteppedClock:
    """The system's clock, running, that a test can step ahead: what a test waiting for a moment uses instead
    of sleeping until it (a loaded machine can take longer than a short margin to get there)."""

    def __init__(self) -> None:
        self.shift = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.shift

    def step_to(self, moment: datetime) -> None:
        """Move now to `moment` if it is not there yet."""
        self.shift += max(timedelta(0), moment - self.now())

    def clear_of_midnight(self) -> SteppedClock:
        """Step to 06:00 UTC tomorrow when now is within 6 h of midnight: tests whose daily caps count the
        hours left today (a cap for one rental till midnight, not two) fail in the last minutes of a day."""
        now = self.now()
        if now.hour >= 18:
            self.step_to((now + timedelta(days=1)).replace(hour=6, minute=0, second=0, microsecond=0))
        return self


@contextmanager
def app_client(database_url: str, clock: object = None, **settings: object) -> Iterator[TestClient]:
    """The real app on `database_url` with the example fleet loaded; `settings` override the defaults;
    `clock` (default: the system's) is the app's."""
    chosen = Settings(
        database_url=database_url,
        bootstrap_admin_key=ADMIN_KEY,
        scheduler_interval_s=0.05,
        # tests poll every 20 ms and fuzz as one tenant: no request limit unless a test sets one
        **{"api_rate": "", **settings},  # type: ignore[arg-type]
    )
    with TestClient(create_app(chosen, clock)) as client:  # type: ignore[arg-type]
        response = client.put(
            "/v1/fleet", content=FLEET, headers={**ADMIN, "Content-Type": "application/toml"}
        )
        assert response.status_code == 200, response.text
        yield client


@contextmanager
def replayed(database_url: str, start: datetime) -> Iterator[tuple[TestClient, ReplayClock]]:
    """The real app at `start`, its clock moved by hand; the meter runs only when a test runs its pass."""
    clock = ReplayClock(start)
    with app_client(database_url, clock, meter_interval_s=3600, prepaid=True) as client:
        yield client, clock


def meter_pass_at(client: TestClient, clock: ReplayClock, moment: datetime) -> None:
    """Move the replayed clock to `moment` and run the meter loop's pass (its jobs as the server wires)."""
    _advance(client, clock, moment - clock.now())
    client.app.state.services.meter.work()


@pytest.fixture
def client(database_url: str) -> Iterator[TestClient]:
    with app_client(database_url) as test_client:
        yield test_client


@pytest.fixture
def tenant(client: TestClient) -> Callable[[str], tuple[str, dict[str, str]]]:
    """Make a tenant; returns its id and auth headers."""
    return lambda name: make_tenant(client, name)


def make_tenant(client: TestClient, name: str) -> tuple[str, dict[str, str]]:
    """A new tenant `name` on `client`'s app, with a key: its id and auth headers."""
    tenant_id = client.post("/v1/tenants", json={"name": name}, headers=ADMIN).json()["id"]
    secret = client.post(f"/v1/tenants/{tenant_id}/keys", json={"label": "t"}, headers=ADMIN).json()["secret"]
    return tenant_id, {"Authorization": f"Bearer {secret}"}


WAIT_S = 30  # what a poll waits at most: 10 s ran out once on a loaded machine with the state on its way


def wait_for(
    client: TestClient, rental_id: str, headers: dict[str, str], state: str, reason: str = ""
) -> dict:
    """Poll until the rental reaches `state` (or, pending, carries `reason`); give up after `WAIT_S`."""
    deadline = time.monotonic() + WAIT_S
    while True:
        body = client.get(f"/v1/rentals/{rental_id}", headers=headers).json()
        if (
            body["state"] == state
            or (reason and body["pending_reason"] == reason)
            or time.monotonic() > deadline
        ):
            return body
        time.sleep(0.02)


def scheduler_cycles(client: TestClient, count: int = 3) -> None:
    """Wait until the scheduler has run `count` whole cycles from now (the first may have begun before):
    what a test that checks that nothing changes waits for, rather than a fixed sleep that a loaded machine
    may fill with no cycle at all."""
    loop = client.app.state.services.loop
    runs = loop.runs
    deadline = time.monotonic() + WAIT_S
    while loop.runs < runs + count + 1:
        assert time.monotonic() < deadline, "the scheduler did not run"
        loop.signal()
        time.sleep(0.01)


class AppTransport(httpx.BaseTransport):
    """The SDK's transport into the in-process app: each request goes through `client` (Starlette's test
    client, which speaks httpx2), its answer comes back as an httpx response."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self.client.request(
            request.method,
            str(request.url),
            headers=list(request.headers.multi_items()),
            content=request.read(),
            follow_redirects=False,
        )
        decoded = ("content-encoding", "content-length", "transfer-encoding")  # the body comes back decoded
        headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in decoded]
        return httpx.Response(answer.status_code, headers=headers, content=answer.content, request=request)


class AsyncAppTransport(httpx.AsyncBaseTransport):
    """`AppTransport` for the async SDK: each request is served in a worker thread, so requests awaited at
    once reach the app at once, as they would a server; `most_at_once` counts how many did."""

    def __init__(self, client: TestClient) -> None:
        self.inner, self.at_once, self.most_at_once = AppTransport(client), 0, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            return await asyncio.to_thread(self.inner.handle_request, request)
        finally:
            self.at_once -= 1


def logged_in_as(
    client: TestClient,
    key: str,
    sdk_class: type[Client] = Client,
    transport: httpx.BaseTransport | None = None,
) -> Callable[[], Any]:
    """A stand-in for the CLI's `logged_in`: the SDK (`sdk_class`, a spy if a test wants one) with `key`,
    talking to the in-process app (through `transport` when given: a fault in front of it)."""

    @contextmanager
    def logged_in(options: Mapping[str, str] | None = None) -> Iterator[Client]:
        carrier = transport or AppTransport(client)
        with api_errors(options), sdk_class("http://testserver", key, transport=carrier) as sdk:
            yield sdk

    return logged_in


def charged(client: TestClient, rental_id: str, headers: dict[str, str]) -> int:
    """Micros the ledger has charged for the rental (the positive postings of its charges)."""
    ledger = client.get("/v1/ledger", headers=headers).json()
    return sum(
        p["amount_micros"]
        for t in ledger
        if t["kind"] == "charge" and t["ref"] == rental_id
        for p in t["postings"]
        if p["amount_micros"] > 0
    )


def register_agent(client: TestClient, node: str) -> dict[str, str]:
    """Register an agent for `node` with a fresh join token, its host's GPUs the fleet's; the headers that
    authenticate it."""
    token = client.post("/v1/join-tokens", json={"node": node}, headers=ADMIN).json()["token"]
    answer = client.post("/v1/agents/register", json={"token": token, "inventory": fleet_host(client, node)})
    assert answer.status_code == 200, answer.text
    assert answer.json()["node_key"].startswith("nk_")
    return {"Authorization": f"Bearer {answer.json()['node_key']}"}


def fleet_host(client: TestClient, node: str) -> dict[str, Any]:
    """A registration inventory of the GPUs the fleet declares for `node`, as its probe would report them."""
    (view,) = [n for n in client.get("/v1/nodes", headers=ADMIN).json() if n["name"] == node]
    gpus = [
        {"index": i, "uuid": f"GPU-{node}-{i}", "model_name": view["gpu_model"], "memory_mib": 0}
        for i in range(view["gpu_count"])
    ]
    return {"hostname": node, "gpus": gpus}


SHARE = {"gpu_model": "L40S", "gpus": 0, "share_milli": 500, "command": ["sleep", "600"], "regions": []}


def running_share(
    client: TestClient, owner: dict[str, str], env: dict[str, str] | None = None
) -> tuple[str, dict[str, str]]:
    """A half-L40S rental (with `env`, if given) its hand-driven agent has reported running: its id and the
    node's headers."""
    body = SHARE if env is None else {**SHARE, "env": env}
    rental_id = client.post("/v1/rentals", json=body, headers=owner).json()["id"]
    node = wait_for(client, rental_id, owner, "placed")["allocation"][0]["node"]
    node_headers = register_agent(client, node)
    report = {"workloads": [{"rental_id": rental_id, "state": "running"}]}
    client.post("/v1/agents/heartbeat", json=report, headers=node_headers)
    assert client.get(f"/v1/rentals/{rental_id}", headers=owner).json()["state"] == "running"
    return rental_id, node_headers


def h100_contract(start: datetime, hours: float, count: int = 1) -> dict:
    """A contract body: `count` H100s in cn-north over [start, start + hours)."""
    return {
        "gpu_model": "H100-SXM-80GB",
        "count": count,
        "region": "cn-north",
        "starts_at": start.isoformat(),
        "ends_at": (start + timedelta(hours=hours)).isoformat(),
    }
