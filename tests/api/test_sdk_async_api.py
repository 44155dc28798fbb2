"""`AsyncClient` against the real app (SQLite and PostgreSQL): many rentals created, listed, waited for and
stopped at once from one event loop, under the same idempotency keys, errors and waiting rules as `Client`,
riding out a server that does not answer for a while."""

from __future__ import annotations

import ast
import asyncio
import inspect
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from conftest import SHARE, AppTransport, AsyncAppTransport, running_share
from suanli.client import (
    ApiError,
    AsyncClient,
    Client,
    ClientError,
    ExecWaitTimeout,
    InvalidArgument,
    RentalEnded,
    RentalWaitTimeout,
    ServerUnreachable,
)
from suanli.client import aio as aio_module
from suanli.wire.schemas import RentalCreateRequest

URL = "http://testserver"


def _key(headers: dict[str, str]) -> str:
    return headers["Authorization"].split()[1]


def test_twenty_rentals_created_at_once_are_each_rented_once_listed_waited_for_and_stopped(
    client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Launching many rentals from asyncio code: 20 creates awaited at once each rent one rental, sent again
    under their keys they return the same 20, the list follows its pages (of 7 here) to all of them, and
    all 20 are waited for, placed then stopped, at once."""
    _, owner = tenant("launcher-async")
    monkeypatch.setattr(aio_module, "RENTALS_PAGE_LIMIT", 7)
    transport = AsyncAppTransport(client)
    request = RentalCreateRequest.model_validate({**SHARE, "name": "batch"})

    async def launch() -> tuple[list[str], list[str], list[str], list[str], list[str]]:
        async with AsyncClient(URL, _key(owner), transport=transport) as cloud:
            keys = [f"batch-{i}" for i in range(20)]
            created = await asyncio.gather(*(cloud.create_rental(request, key) for key in keys))
            again = await asyncio.gather(*(cloud.create_rental(request, key) for key in keys))
            ids = [rental.id for rental in created]
            placed = await asyncio.gather(
                *(cloud.wait(i, {"placed"}, timeout_s=30, poll_s=0.02) for i in ids)
            )
            listed = [rental.id for rental in await cloud.rentals(name="batch")]
            await asyncio.gather(*(cloud.stop(i) for i in ids))
            ended = await asyncio.gather(*(cloud.wait(i, timeout_s=30, poll_s=0.02) for i in ids))
            return ids, [r.id for r in again], [r.state for r in placed], listed, [r.state for r in ended]

    ids, again, placed, listed, ended = asyncio.run(launch())
    assert len(set(ids)) == 20 and again == ids
    assert placed == ["placed"] * 20 and ended == ["stopped"] * 20
    newest_first = [r["id"] for r in client.get("/v1/rentals?name=batch", headers=owner).json()]
    assert listed == newest_first and sorted(listed) == sorted(ids)
    assert transport.most_at_once > 1  # the calls were in flight together, not one after another


def test_an_async_wait_past_its_timeout_and_on_a_failed_rental_raises_what_the_sync_wait_does(
    client: TestClient, tenant
) -> None:
    _, owner = tenant("patient-async")
    rental_id, node_headers = running_share(client, owner)

    async def wait(until: set[str], timeout_s: float) -> None:
        async with AsyncClient(URL, _key(owner), transport=AsyncAppTransport(client)) as cloud:
            await cloud.wait(rental_id, until, timeout_s=timeout_s, poll_s=0.05)

    started = time.monotonic()
    with pytest.raises(RentalWaitTimeout) as late:
        asyncio.run(wait({"stopped", "failed"}, 0.3))
    assert time.monotonic() - started < 5
    error = late.value
    assert isinstance(error, ClientError) and isinstance(error, TimeoutError)
    assert (error.rental.id, error.rental.state, error.until) == (rental_id, "running", {"stopped", "failed"})
    assert str(error) == f"{rental_id} is running after 0.3 s, not failed or stopped", str(error)

    failed = {"workloads": [{"rental_id": rental_id, "state": "failed", "exit_code": 3}]}
    client.post("/v1/agents/heartbeat", json=failed, headers=node_headers)
    with pytest.raises(RentalEnded) as ended:
        asyncio.run(wait({"running"}, 5))
    assert ended.value.rental.state == "failed" and str(ended.value).startswith(f"{rental_id} ended failed")


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda sdk: sdk.rental("rnt_missing"), id="rental"),
        pytest.param(lambda sdk: sdk.stop("rnt_missing"), id="stop"),
        pytest.param(lambda sdk: sdk.logs("rnt_missing"), id="logs"),
        pytest.param(lambda sdk: sdk.rentals(after="rnt_missing"), id="rentals-after"),
    ],
)
def test_the_async_client_raises_the_same_error_as_the_sync_one(client: TestClient, tenant, call) -> None:
    """The status, code, message and field of an error answer are read once (`client.exchange`) for both."""
    _, owner = tenant("mistaken-async")

    async def asynchronously() -> None:
        async with AsyncClient(URL, _key(owner), transport=AsyncAppTransport(client)) as cloud:
            await call(cloud)

    with Client(URL, _key(owner), transport=AppTransport(client)) as sdk, pytest.raises(ApiError) as sync:
        call(sdk)
    with pytest.raises(ApiError) as awaited:
        asyncio.run(asynchronously())
    assert type(awaited.value) is type(sync.value) and sync.value.status in (400, 404)
    seen = (awaited.value.status, awaited.value.code, awaited.value.message, awaited.value.field)
    assert seen == (sync.value.status, sync.value.code, sync.value.message, sync.value.field)


def test_a_refused_url_is_refused_as_the_sync_client_refuses_it() -> None:
    with pytest.raises(ValueError, match="is not a server URL") as sync:
        Client("localhost:8080")
    with pytest.raises(ValueError, match="is not a server URL") as awaited:
        AsyncClient("localhost:8080")
    assert str(awaited.value) == str(sync.value)


class _AsyncOutage(httpx.AsyncBaseTransport):
    """The app behind a network that refuses the next `failing` connections: a server restarting."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner, self.failing = inner, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.failing:
            self.failing -= 1
            raise httpx.ConnectError("connection refused", request=request)
        return await self.inner.handle_async_request(request)


def test_an_async_wait_and_output_ride_out_a_server_that_does_not_answer_for_a_while(
    client: TestClient, tenant
) -> None:
    """As `Client.wait` and `output` do (`ride_out_restarts`, the same tenacity rule awaited): a wait and a
    follow go on once the server answers again, telling `on_unreachable` once, and give up past
    `reconnect_s`."""
    _, owner = tenant("restarted-async")
    rental_id, node_headers = running_share(client, owner)
    shipped = {"rental_id": rental_id, "offset": 0, "data": "a\n", "size_bytes": 2}
    assert client.post("/v1/agents/logs", json=shipped, headers=node_headers).status_code == 200
    network = _AsyncOutage(AsyncAppTransport(client))
    told_wait: list[ServerUnreachable] = []
    told_output: list[ServerUnreachable] = []

    async def ride_out() -> tuple[str, str, str]:
        async with AsyncClient(URL, _key(owner), transport=network, retries=1) as cloud:
            pieces = cloud.output(rental_id, poll_s=0.01, on_unreachable=told_output.append)
            first = await anext(pieces)
            network.failing = 5
            waiting = asyncio.create_task(
                cloud.wait(
                    rental_id, {"stopping"}, timeout_s=30, poll_s=0.01, on_unreachable=told_wait.append
                )
            )
            while network.failing:
                await asyncio.sleep(0.01)
            await asyncio.to_thread(client.post, f"/v1/rentals/{rental_id}/stop", headers=owner)
            stopping = await waiting
            more = {**shipped, "offset": 2, "data": "b\n"}
            await asyncio.to_thread(client.post, "/v1/agents/logs", json=more, headers=node_headers)
            network.failing = 5
            second = await anext(pieces)
            await pieces.aclose()
            network.failing = 10**6
            with pytest.raises(ServerUnreachable):
                await cloud.wait(rental_id, {"stopped"}, poll_s=0.01, reconnect_s=0.05)
            return first, stopping.state, second

    assert asyncio.run(ride_out()) == ("a\n", "stopping", "b\n")
    assert len(told_wait) == 1 and len(told_output) == 1


def test_the_readmes_asyncio_example_names_what_the_async_client_has() -> None:
    """The snippet needs a server with GPUs to run (the tests above make the same calls); here it compiles
    and every call it makes on the client is an `AsyncClient` coroutine or async iterator."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    snippet = readme.split("From asyncio code", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    called = {
        node.func.attr
        for node in ast.walk(ast.parse(snippet))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "cloud"
    }
    assert called == {"create_rental", "output", "wait"}
    assert all(inspect.iscoroutinefunction(getattr(AsyncClient, name)) for name in ("create_rental", "wait"))
    assert inspect.isasyncgenfunction(AsyncClient.output)


def test_an_async_command_is_queued_streamed_and_waited_for_as_the_sync_client_does(
    client: TestClient, tenant
) -> None:
    """`AsyncClient.exec` and `wait_exec`: the same pieces of output handed on as they come (a gap's size
    with the piece after it), the same end, `ExecWaitTimeout` past `within_s`, and a refused argument an
    `InvalidArgument` naming it before anything is sent."""
    _, owner = tenant("exec-async")
    rental_id, node_headers = running_share(client, owner)
    pieces: list[tuple[str, int]] = []
    reports: list[dict] = []

    def send(exec_id: str, state: str, output: str, start: int, **more) -> None:
        body = {"state": state, "output": output, "output_from_chars": start, **more}
        answer = client.post(f"/v1/agents/execs/{exec_id}", json=body, headers=node_headers)
        assert answer.status_code == 200, answer.text

    def on_output(text: str, skipped: int) -> None:
        pieces.append((text, skipped))
        if reports:
            send(**reports.pop(0))

    async def run() -> tuple:
        async with AsyncClient(URL, _key(owner), transport=AsyncAppTransport(client)) as cloud:
            with pytest.raises(InvalidArgument, match="command"):
                await cloud.exec(rental_id, [])
            queued = await cloud.exec(rental_id, ["train"], timeout_s=30)
            reports.extend(
                [
                    {"exec_id": queued.id, "state": "running", "output": "epoch 9\n", "start": 40},
                    {
                        "exec_id": queued.id,
                        "state": "exited",
                        "output": "done\n",
                        "start": 48,
                        "exit_code": 0,
                    },
                ]
            )
            send(queued.id, "running", "epoch 1\n", 0)
            ended = await cloud.wait_exec(rental_id, queued.id, poll_s=0.01, on_output=on_output)
            idle = await cloud.exec(rental_id, ["sleep", "600"])
            with pytest.raises(ExecWaitTimeout) as late:
                await cloud.wait_exec(rental_id, idle.id, poll_s=0.05, within_s=0.3)
            listed = await cloud.execs(rental_id)
            return queued, ended, late.value, listed

    queued, ended, late, listed = asyncio.run(run())
    assert queued.state == "queued" and queued.command == ["train"]
    assert pieces == [("epoch 1\n", 0), ("epoch 9\n", 32), ("done\n", 0)]
    assert (ended.state, ended.exit_code, ended.output_chars, ended.output_truncated) == (
        "exited",
        0,
        53,
        True,
    )
    assert isinstance(late, TimeoutError) and late.exec.state == "queued"
    assert [e.id for e in listed] == [late.exec.id, queued.id]
