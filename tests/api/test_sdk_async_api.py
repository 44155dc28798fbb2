"""`AsyncClient` against the real app (SQLite and PostgreSQL): many rentals created, listed, waited for and
stopped at once from one event loop, under the same idempotency keys, errors and waiting rules as `Client`,
riding out a server that does not answer for a while; and every other plain call of `Client` (accounts,
webhooks, the fleet, money, contracts) awaited, with the same keys, pages and refused arguments."""

from __future__ import annotations

import ast
import asyncio
import inspect
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from conftest import (
    ADMIN,
    ADMIN_KEY,
    FLEET,
    SHARE,
    AppTransport,
    AsyncAppTransport,
    h100_contract,
    running_share,
)
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
from suanli.wire.schemas import (
    ContractCreateRequest,
    ContractOfferRequest,
    MaintenanceCreateRequest,
    RentalCreateRequest,
)

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


# `Client`'s public calls that `AsyncClient` leaves out, on purpose (aio.py's docstring says why):
ASYNC_LEFT_OUT = {
    # streams over a WebSocket (and `forward`, whose only use is such a stream)
    "attach_exec",
    "attach_agent_exec",
    "forward",
    # the node agent's own calls (the agent runs sync) and the operator's join token that lets one register
    "register_agent",
    "heartbeat",
    "report_exec",
    "upload_log",
    "create_join_token",
    # the sync session's end: `AsyncClient.aclose` (or `async with`)
    "close",
}
# `Client` calls whose async twin takes fewer arguments: `exec` no `stdin`/`tty` (attaching is sync only),
# `output` no `on_wait` (an async caller runs its own tasks while it waits)
FEWER_ARGUMENTS = {"exec", "output"}


def test_every_public_call_of_the_sync_client_is_awaited_on_the_async_one_with_its_arguments() -> None:
    """Before, `AsyncClient` had only the rental and command calls; now every public call of `Client` but
    the streams and the agent's is there as a coroutine (or async iterator), with the same arguments and
    defaults and the same answer type."""
    public = {name for name in dir(Client) if not name.startswith("_")}
    assert public >= ASYNC_LEFT_OUT  # a name left out that `Client` no longer has is stale
    awaited = public - ASYNC_LEFT_OUT
    missing = sorted(
        name
        for name in awaited
        if not (
            inspect.iscoroutinefunction(getattr(AsyncClient, name, None))
            or inspect.isasyncgenfunction(getattr(AsyncClient, name, None))
        )
    )
    assert missing == [], missing
    unlike = sorted(
        name
        for name in awaited - FEWER_ARGUMENTS
        if inspect.signature(getattr(Client, name)) != inspect.signature(getattr(AsyncClient, name))
    )
    assert unlike == [], unlike
    assert not any(hasattr(AsyncClient, name) for name in ASYNC_LEFT_OUT)


class _Counting(AsyncAppTransport):
    """The in-process app, counting the requests that reach it."""

    def __init__(self, client: TestClient) -> None:
        super().__init__(client)
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return await super().handle_async_request(request)


def _admin(client: TestClient, transport: httpx.AsyncBaseTransport | None = None) -> AsyncClient:
    return AsyncClient(URL, ADMIN_KEY, transport=transport or AsyncAppTransport(client))


def test_an_admin_makes_a_tenant_and_its_key_and_the_tenant_keeps_its_webhooks_from_one_loop(
    client: TestClient,
) -> None:
    async def run() -> tuple:
        async with _admin(client) as admin:
            made = await admin.create_tenant("hooked-async")
            key = await admin.create_key(made.id, "laptop")
            keys, tenants = await asyncio.gather(admin.keys(made.id), admin.tenants())
            assert key.secret is not None
            async with AsyncClient(URL, key.secret, transport=AsyncAppTransport(client)) as own:
                me = await own.me()
                hook = await own.create_webhook("https://hooks.example.com/a", ["stopped"])
                changed = await own.change_webhook(hook.id, url="https://hooks.example.com/b", events=[])
                listed = await own.webhooks()
                removed = await own.remove_webhook(hook.id)
                left = await own.webhooks()
            revoked = await admin.revoke_key(made.id, key.id)
            return made, key, keys, tenants, me, hook, changed, listed, removed, left, revoked

    made, key, keys, tenants, me, hook, changed, listed, removed, left, revoked = asyncio.run(run())
    assert (made.name, made.id in [t.id for t in tenants], me.tenant.id, me.key_id) == (
        "hooked-async",
        True,
        made.id,
        key.id,
    )
    assert key.secret.startswith("sk_") and [k.id for k in keys] == [key.id] and keys[0].secret is None
    assert hook.secret and hook.events == ["stopped"]
    assert (changed.id, changed.url, changed.events) == (hook.id, "https://hooks.example.com/b", [])
    assert [w.id for w in listed] == [hook.id] and removed.id == hook.id and left == []
    assert (
        revoked.revoked
        and client.get("/v1/me", headers={"Authorization": f"Bearer {key.secret}"}).status_code == 401
    )


def test_an_admin_looks_at_drains_and_services_the_fleet_from_one_loop(client: TestClient) -> None:
    starts_at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    window = MaintenanceCreateRequest(
        node="h100-a-01", starts_at=starts_at, ends_at=starts_at + timedelta(hours=2), reason="firmware"
    )

    async def run() -> tuple:
        async with _admin(client) as admin:
            nodes, offers = await asyncio.gather(admin.nodes(), admin.offers())
            drained = await admin.drain("h100-a-01")
            cordoned = {n.name: n.schedulable for n in await admin.nodes()}["h100-a-01"]
            undrained = await admin.undrain("h100-a-01")
            scheduled = await admin.schedule_maintenance(window)
            planned = await admin.maintenance()
            cancelled = await admin.cancel_maintenance(scheduled.id)
            fleet = await admin.put_fleet(FLEET)
            return nodes, offers, drained, cordoned, undrained, scheduled, planned, cancelled, fleet

    nodes, offers, drained, cordoned, undrained, scheduled, planned, cancelled, fleet = asyncio.run(run())
    assert [n.name for n in nodes] == [n["name"] for n in client.get("/v1/nodes", headers=ADMIN).json()]
    assert len(offers) == len(client.get("/v1/offers", headers=ADMIN).json()) > 0
    assert (drained.name, drained.schedulable, cordoned, undrained.schedulable) == (
        "h100-a-01",
        False,
        False,
        True,
    )
    assert (scheduled.node, scheduled.reason) == ("h100-a-01", "firmware")
    assert [w.id for w in planned] == [scheduled.id] and cancelled.id == scheduled.id
    assert client.get("/v1/fleet/maintenance", headers=ADMIN).json() == []
    assert fleet.nodes == len(nodes) and fleet.short_contracts == []


def test_money_is_credited_once_under_one_key_invoiced_paged_and_capped_from_one_loop(
    client: TestClient, tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credit sent twice under one idempotency key posts once (the balance shows it once); the invoice (its
    lines and CSV), the ledger (in pages of 2 here) and the payouts are the server's; limits and a budget
    are set and changed; a refused argument is `InvalidArgument` naming it, with nothing sent."""
    tenant_id, owner = tenant("payer-async")
    monkeypatch.setattr(aio_module, "LEDGER_PAGE_LIMIT", 2)
    network = _Counting(client)

    async def run() -> dict:
        seen: dict = {}
        async with _admin(client, network) as admin, AsyncClient(URL, _key(owner), transport=network) as own:
            seen["prices"] = await admin.prices()
            first = await admin.credit(tenant_id, 5_000_000, memo="top-up", key="top-up-1")
            again = await admin.credit(tenant_id, 5_000_000, memo="top-up", key="top-up-1")
            seen["credits"] = (first, again)
            await admin.credit(tenant_id, 1_000_000, grant=True, memo="trial")
            seen["balance"], seen["grants"] = await asyncio.gather(own.balance(), admin.grants(tenant_id))
            rental = await own.create_rental(RentalCreateRequest(gpu_model="H100", gpus=1))
            await own.wait(rental.id, {"placed"}, timeout_s=30, poll_s=0.02)
            stopped = await own.stop(rental.id)
            await asyncio.to_thread(client.app.state.services.billing.meter)
            month = stopped.created_at.strftime("%Y-%m")
            seen["rental"], seen["month"] = rental, month
            seen["invoice"], seen["csv"] = await asyncio.gather(own.invoice(month), own.invoice_csv(month))
            seen["verified"], seen["ledger"] = await asyncio.gather(
                admin.verify_ledger(), admin.ledger(tenant_id)
            )
            seen["payouts"] = await admin.payouts()
            seen["limits"] = await admin.set_limits(
                tenant_id, {"H100-SXM-80GB": 4}, daily_cap_micros=9 * 10**9
            )
            seen["uncapped"] = await admin.change_limits(tenant_id, daily_cap_micros=None)
            await own.set_budget(daily_micros=10**9, monthly_micros=2 * 10**9)
            seen["budget"] = await own.change_budget(monthly_micros=None)
            seen["read"] = await own.limits()
            sent = network.sent
            with pytest.raises(InvalidArgument) as refused:
                await admin.credit(tenant_id, -1)
            seen["refused"], seen["sent"] = refused.value, network.sent - sent
        return seen

    seen = asyncio.run(run())
    assert len(seen["prices"]) == len(client.get("/v1/prices", headers=ADMIN).json()) > 0
    first, again = seen["credits"]
    assert first.hash == again.hash and first.seq == again.seq
    balance = seen["balance"]
    assert (balance.cash_micros, balance.grants_micros) == (5_000_000, 1_000_000)
    assert [(g.amount_micros, g.left_micros) for g in seen["grants"]] == [(1_000_000, 1_000_000)]
    whole = client.get(f"/v1/invoices/{seen['month']}", headers=owner).json()
    invoice = seen["invoice"]
    assert (
        [line.ref for line in invoice.lines]
        == [line["ref"] for line in whole["lines"]]
        == [seen["rental"].id]
    )
    assert invoice.total_micros == whole["total_micros"] > 0 and seen["rental"].id in seen["csv"]
    assert seen["verified"].ok
    every = client.get("/v1/ledger", params={"tenant": tenant_id}, headers=ADMIN).json()
    assert [t.seq for t in seen["ledger"]] == [t["seq"] for t in every] and len(every) > 2  # more than a page
    assert len(seen["payouts"]) == len(client.get("/v1/payouts", headers=ADMIN).json())
    assert (seen["limits"].gpu_quota, seen["limits"].daily_cap_micros) == ({"H100-SXM-80GB": 4}, 9 * 10**9)
    assert (seen["uncapped"].gpu_quota, seen["uncapped"].daily_cap_micros) == ({"H100-SXM-80GB": 4}, None)
    assert (seen["budget"].budget_daily_micros, seen["budget"].budget_monthly_micros) == (10**9, None)
    assert seen["read"] == seen["budget"]
    refused = seen["refused"]
    assert (refused.status, refused.code, refused.field) == (422, "invalid", "amount_micros")
    assert "amount_micros" in str(refused) and seen["sent"] == 0  # refused before anything was sent


def test_contracts_are_quoted_signed_once_under_a_key_offered_accepted_and_declined_from_one_loop(
    client: TestClient, tenant
) -> None:
    tenant_id, holder = tenant("signer-async")
    client.post(f"/v1/tenants/{tenant_id}/credit", json={"amount_micros": 10**12}, headers=ADMIN)
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
    wanted = ContractCreateRequest(**h100_contract(start, 24))

    def offered(days: int) -> ContractOfferRequest:
        window = h100_contract(start + timedelta(days=days), 24)
        return ContractOfferRequest(tenant_id=tenant_id, price_micros=3_000_000, **window)

    async def run() -> tuple:
        async with (
            _admin(client) as admin,
            AsyncClient(URL, _key(holder), transport=AsyncAppTransport(client)) as own,
        ):
            cash_before = (await own.balance()).cash_micros
            quote = await own.quote_contract(wanted)
            signed = await own.create_contract(wanted, "sign-async-1")
            again = await own.create_contract(wanted, "sign-async-1")
            cash_after = (await own.balance()).cash_micros
            kept, dropped = await asyncio.gather(
                admin.offer_contract(offered(3)), admin.offer_contract(offered(5))
            )
            open_offers = await own.contract_offers()
            accepted = await own.accept_offer(kept.id)
            declined = await own.decline_offer(dropped.id)
            contracts = await own.contracts()
            return (
                quote,
                signed,
                again,
                cash_before - cash_after,
                kept,
                dropped,
                open_offers,
                accepted,
                declined,
                contracts,
            )

    quote, signed, again, paid, kept, dropped, open_offers, accepted, declined, contracts = asyncio.run(run())
    assert signed.id == again.id and paid == quote.price_micros == signed.price_micros > 0  # charged once
    assert sorted(o.id for o in open_offers) == sorted([kept.id, dropped.id])
    assert accepted.price_micros == 3_000_000 and declined.id == dropped.id
    assert sorted(c.id for c in contracts) == sorted([signed.id, accepted.id])
    listed = client.get("/v1/contracts", headers=holder).json()
    assert sorted(c["id"] for c in listed) == sorted([signed.id, accepted.id])


ASYNC_BAD_ARGUMENTS = [
    ("set_bid", lambda sdk: sdk.set_bid("rnt_any", -1), "bid_micros_per_gpu_hour"),
    ("resize", lambda sdk: sdk.resize("rnt_any", nodes=0), "nodes"),
    ("set_budget", lambda sdk: sdk.set_budget(daily_micros=-1), "daily_micros"),
    ("set_limits", lambda sdk: sdk.set_limits("ten_any", {}, fair_share_weight=-1), "fair_share_weight"),
    ("create_webhook", lambda sdk: sdk.create_webhook(""), "url"),
    ("report_revenue", lambda sdk: sdk.report_revenue("2026-01", -1), "revenue_micros"),
]


@pytest.mark.parametrize(
    ("call", "field"), [c[1:] for c in ASYNC_BAD_ARGUMENTS], ids=[c[0] for c in ASYNC_BAD_ARGUMENTS]
)
def test_an_argument_the_request_model_refuses_is_refused_by_the_async_client_naming_it(
    call, field: str
) -> None:
    """As `Client`'s are (tests/api/test_sdk_arguments_api.py): `InvalidArgument` naming the field, raised
    when the call is awaited, before anything is sent."""
    sent: list[httpx.Request] = []

    async def refused() -> None:
        network = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(500))
        async with AsyncClient(URL, "sk_any", transport=network) as cloud:
            await call(cloud)

    with pytest.raises(InvalidArgument) as error:
        asyncio.run(refused())
    assert (error.value.status, error.value.code, error.value.field) == (422, "invalid", field)
    assert field in str(error.value) and sent == []
