"""Time bounds against a server that accepts connections and never answers (a hung process, a black-holed
proxy), refuses them (a restart) or sits behind a gateway that answers 503 (nginx while the server
restarts): `Client.wait(timeout_s=...)` gives up by its deadline, and the CLI waits per request only as long
as SUANLI_TIMEOUT_S says."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from loopback_gateway import Gateway
from suanli.cli.main import app
from suanli.client import ApiError, AsyncClient, Client, ClientError, ServerUnreachable


@pytest.fixture
def silent_server() -> Iterator[str]:
    """The URL of a socket that takes connections (the kernel's backlog completes them) and never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_wait_gives_up_by_its_own_deadline_on_a_server_that_never_answers(silent_server: str) -> None:
    """Each request waited the client's whole timeout, 4 times: `wait(timeout_s=5)` took 121.8 s."""
    started = time.monotonic()
    with Client(silent_server, "sk_x", timeout_s=20) as sdk, pytest.raises(ClientError):
        sdk.wait("rnt_x", timeout_s=1, poll_s=0.1)
    assert time.monotonic() - started < 4


@pytest.fixture
def refusing_server() -> str:
    """The URL of a loopback port nothing listens on: every connection is refused, as during a restart."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_wait_asks_a_refusing_server_again_until_its_deadline_and_no_longer(refusing_server: str) -> None:
    """`wait` rides out a restart (see tests/e2e) within its own deadline: it gave up after one poll's
    retries (~1.4 s) before, and must not ask past `timeout_s` now."""
    started = time.monotonic()
    with Client(refusing_server, "sk_x") as sdk, pytest.raises(ServerUnreachable):
        sdk.wait("rnt_x", timeout_s=3, poll_s=0.1)
    assert 2.5 <= time.monotonic() - started < 5


def test_without_a_deadline_wait_gives_up_on_a_refusing_server_past_its_reconnect_time(
    refusing_server: str,
) -> None:
    started = time.monotonic()
    with Client(refusing_server, "sk_x") as sdk, pytest.raises(ServerUnreachable):
        sdk.wait("rnt_x", poll_s=0.1, reconnect_s=2)
    assert 2 <= time.monotonic() - started < 6


@pytest.fixture
def away_gateway() -> Iterator[Gateway]:
    """A gateway (a real HTTP server on loopback) whose server is away: every request is nginx's 503."""
    with Gateway(None) as gateway:
        yield gateway


def test_wait_asks_a_gateway_answering_503_again_until_its_deadline(away_gateway: Gateway) -> None:
    """`wait` rode out a server that refused connections but raised a gateway's 503 (an ApiError) once one
    poll's retries (~1.4 s) were spent: behind nginx or a load balancer a restart of a few seconds ended it.
    Now it asks again until its deadline, then says the server is unreachable, naming the last status."""
    told: list[ServerUnreachable] = []
    started = time.monotonic()
    with Client(away_gateway.url, "sk_x") as sdk, pytest.raises(ServerUnreachable) as raised:
        sdk.wait("rnt_x", timeout_s=3, poll_s=0.1, on_unreachable=told.append)
    assert 2.5 <= time.monotonic() - started < 5
    assert raised.value.last_status == 503 and "HTTP 503" in str(raised.value), raised.value
    assert len(told) == 1 and told[0].last_status == 503, told


def test_following_output_asks_a_gateway_answering_503_again_for_its_reconnect_time(
    away_gateway: Gateway,
) -> None:
    started = time.monotonic()
    with Client(away_gateway.url, "sk_x") as sdk, pytest.raises(ServerUnreachable, match="HTTP 503"):
        list(sdk.output("rnt_x", poll_s=0.1, reconnect_s=2.5))
    assert 2.5 <= time.monotonic() - started < 5


def test_the_async_client_rides_out_a_gateway_answering_503_by_the_same_rule(away_gateway: Gateway) -> None:
    """`AsyncClient.wait` and its `output` ask again until the deadline, as the sync client's do."""

    async def wait_then_follow() -> tuple[ServerUnreachable, ServerUnreachable]:
        async with AsyncClient(away_gateway.url, "sk_x") as sdk:
            with pytest.raises(ServerUnreachable) as waited:
                await sdk.wait("rnt_x", timeout_s=2, poll_s=0.1)
            with pytest.raises(ServerUnreachable) as followed:
                async for _ in sdk.output("rnt_x", poll_s=0.1, reconnect_s=2):
                    pass
        return waited.value, followed.value

    started = time.monotonic()
    waited, followed = asyncio.run(wait_then_follow())
    assert 4 <= time.monotonic() - started < 8
    assert waited.last_status == followed.last_status == 503, (waited, followed)


def test_waiting_for_a_command_asks_a_gateway_answering_503_again_until_its_deadline(
    away_gateway: Gateway,
) -> None:
    """`wait_exec` raised a gateway's 503 (an ApiError) once one poll's retries were spent, and never rode out
    a restart at all; now it waits as `wait` does, then names the last status."""
    told: list[ServerUnreachable] = []
    started = time.monotonic()
    with Client(away_gateway.url, "sk_x") as sdk, pytest.raises(ServerUnreachable) as raised:
        sdk.wait_exec("rnt_x", "exe_x", within_s=3, poll_s=0.1, on_unreachable=told.append)
    assert 2.5 <= time.monotonic() - started < 5
    assert raised.value.last_status == 503 and len(told) == 1, (raised.value, told)


def test_waiting_for_a_command_asks_a_refusing_server_again_until_its_deadline(refusing_server: str) -> None:
    started = time.monotonic()
    with Client(refusing_server, "sk_x") as sdk, pytest.raises(ServerUnreachable):
        sdk.wait_exec("rnt_x", "exe_x", within_s=2, poll_s=0.1)
    assert 1.8 <= time.monotonic() - started < 4


def test_wait_waits_out_a_gateways_retry_after_before_asking_again(away_gateway: Gateway) -> None:
    """Between one poll's retries (0.2 s doubling) it waits the gateway's Retry-After, not its `poll_s`."""
    away_gateway.retry_after = "2"
    with Client(away_gateway.url, "sk_x") as sdk, pytest.raises(ServerUnreachable):
        sdk.wait("rnt_x", timeout_s=4, poll_s=0.1)
    asked = away_gateway.asked
    assert max(later - earlier for earlier, later in itertools.pairwise(asked)) >= 1.9, asked


def test_a_retry_after_past_the_deadline_is_waited_out_only_until_it(away_gateway: Gateway) -> None:
    away_gateway.retry_after = "60"
    started = time.monotonic()
    with Client(away_gateway.url, "sk_x") as sdk, pytest.raises(ServerUnreachable):
        sdk.wait("rnt_x", timeout_s=2.5, poll_s=0.1)
    assert 2.4 <= time.monotonic() - started < 4


def test_an_ordinary_call_keeps_its_bounded_retries_on_a_gateway_answering_503(away_gateway: Gateway) -> None:
    started = time.monotonic()
    with Client(away_gateway.url, "sk_x") as sdk, pytest.raises(ApiError) as raised:
        sdk.rentals()
    assert raised.value.status == 503 and len(away_gateway.asked) == 4
    assert time.monotonic() - started < 3


def test_suanli_timeout_s_bounds_a_whole_command_its_retries_included(silent_server: str, tmp_path) -> None:
    """Every command took ~2 min on a server that never answers (4 sends x 30 s) with no setting, then
    4 x SUANLI_TIMEOUT_S (8 s for 2): it bounded each send, not the call its retries make."""
    env = {"SUANLI_URL": silent_server, "SUANLI_API_KEY": "sk_x", "SUANLI_CONFIG_DIR": str(tmp_path)}
    started = time.monotonic()
    done = CliRunner().invoke(app, ["ls", "--json"], env={**env, "SUANLI_TIMEOUT_S": "2"})
    took_s = time.monotonic() - started
    said = " ".join(done.output.split())
    assert done.exit_code == 4 and "cannot reach the server" in said, done.output
    assert "no answer within 2" in said and "SUANLI_TIMEOUT_S" in said, said
    assert 1.9 <= took_s < 3.5, took_s


def test_a_call_timeout_bounds_each_sdk_call_its_retries_included(silent_server: str) -> None:
    started = time.monotonic()
    with (
        Client(silent_server, "sk_x", timeout_s=1, call_timeout_s=1.5) as sdk,
        pytest.raises(ServerUnreachable),
    ):
        sdk.rentals()
    assert 1.4 <= time.monotonic() - started < 2.5


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused_naming_the_variable(
    value: str, tmp_path
) -> None:
    env = {"SUANLI_URL": "http://127.0.0.1:9", "SUANLI_API_KEY": "sk_x", "SUANLI_CONFIG_DIR": str(tmp_path)}
    done = CliRunner().invoke(app, ["ls"], env={**env, "SUANLI_TIMEOUT_S": value})
    assert done.exit_code == 2 and "SUANLI_TIMEOUT_S" in done.output, done.output


def test_the_help_says_suanli_timeout_s_bounds_a_call_with_its_retries() -> None:
    shown = " ".join(CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output.split())
    assert "SUANLI_TIMEOUT_S (default 30)" in shown and "its retries included" in shown, shown
