"""Attached commands' bytes between two server workers on PostgreSQL (`suanli server --workers 2`), with the
real CLI and agent: the CLI's and the agent's WebSockets may reach different workers, so every frame goes
through the attach bus, in notifications of 5,000 bytes joined again into frames, held to the bus's window.
A large `suanli cp` in and out, byte for byte; a port forward's large responses, whose frames each start
with their connection's number."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_process import new_database
from test_agents import FLEET, NODES, Platform, running_platform
from test_copy import WAIT_S, _cp
from test_exec_attach import _forward, _free_port, _running_rental, serving_rental


@pytest.fixture(scope="module")
def platform(postgres_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    database_url = new_database(postgres_server, "workers_attach")
    tmp = tmp_path_factory.mktemp("workers")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(
            "SUANLI_PREPAID", "false"
        )  # as `_postpaid_by_default`, which comes after a module's fixture
        workers = ("--workers", "2")
        with running_platform(tmp, FLEET, NODES[:1], database_url=database_url, server_args=workers) as p:
            yield p


def test_a_large_file_goes_in_and_out_byte_for_byte(platform: Platform, tmp_path: Path) -> None:
    running = _running_rental(platform)
    local = tmp_path / "weights.bin"
    local.write_bytes(os.urandom(24 * 1024 * 1024))
    sent = _cp(platform, str(local), f"{running.id}:weights.bin")
    assert sent.returncode == 0, sent.stderr
    back = tmp_path / "back.bin"
    received = _cp(platform, f"{running.id}:weights.bin", str(back))
    assert received.returncode == 0, received.stderr
    assert back.read_bytes() == local.read_bytes()


def test_a_port_forward_carries_large_responses(platform: Platform, tmp_path: Path) -> None:
    """Responses of 3 MiB, two at once: the agent reads 64 KiB at a time, so each frame crosses the bus in
    pieces, and a piece handed on as a frame of its own would be read as another connection's."""
    served = tmp_path / "served"
    served.mkdir()
    body = os.urandom(3 * 1024 * 1024)
    (served / "blob").write_bytes(body)
    port = _free_port()
    with platform.tenant() as api:
        rental = serving_rental(api, port, served)
        process, local = _forward(platform, rental.id, port)
        try:
            url = f"http://127.0.0.1:{local}/blob"
            with httpx.Client(timeout=WAIT_S) as http:
                assert http.get(url).content == body  # waits for the agent's next heartbeat
            with (
                httpx.Client(timeout=WAIT_S) as first,
                httpx.Client(timeout=WAIT_S) as second,
                first.stream("GET", url) as one,
                second.stream("GET", url) as two,
            ):
                assert one.read() == body and two.read() == body
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=WAIT_S) == 0
