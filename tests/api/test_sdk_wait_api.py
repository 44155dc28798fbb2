"""`Client.wait` against the real app (SQLite and PostgreSQL): it returns the rental once in a state asked
for, and says at once when the rental has ended in another, which it can never leave; `wait` and `wait_exec`
past their time are the SDK's errors, built-in TimeoutErrors too."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from conftest import AppTransport, running_share
from suanli.client import Client, ClientError, ExecWaitTimeout, RentalEnded, RentalWaitTimeout


def test_waiting_for_running_on_a_rental_that_failed_says_how_it_ended_at_once(
    client: TestClient, tenant
) -> None:
    _, owner = tenant("launcher")
    rental_id, node_headers = running_share(client, owner)
    failed = {"workloads": [{"rental_id": rental_id, "state": "failed", "exit_code": 3}]}
    client.post("/v1/agents/heartbeat", json=failed, headers=node_headers)
    key = owner["Authorization"].split()[1]
    started = time.monotonic()
    with Client("http://testserver", key, transport=AppTransport(client)) as sdk:
        with pytest.raises(RentalEnded) as ended:
            sdk.wait(rental_id, {"running", "stopping"}, timeout_s=5, poll_s=0.05)
        assert sdk.wait(rental_id, timeout_s=5).state == "failed"  # an end asked for is returned
    assert time.monotonic() - started < 4
    assert isinstance(ended.value, ClientError) and ended.value.rental.state == "failed"
    said = str(ended.value)
    assert said.startswith(f"{rental_id} ended failed, not running or stopping") and "exit code 3" in said, (
        said
    )


def test_a_wait_past_its_timeout_is_the_sdks_error_naming_the_rental_and_both_states(
    client: TestClient, tenant
) -> None:
    """`wait(timeout_s=)` raised the built-in TimeoutError: not a ClientError, and with no rental to read.
    Now it is `RentalWaitTimeout`, both a ClientError and a TimeoutError (an `except TimeoutError` still
    catches it), carrying the rental as last seen."""
    _, owner = tenant("patient")
    rental_id, _ = running_share(client, owner)
    key = owner["Authorization"].split()[1]
    sdk = Client("http://testserver", key, transport=AppTransport(client))
    with sdk, pytest.raises(RentalWaitTimeout) as late:
        sdk.wait(rental_id, {"stopped", "failed"}, timeout_s=0.3, poll_s=0.05)
    error = late.value
    assert isinstance(error, ClientError) and isinstance(error, TimeoutError)
    assert error.rental.id == rental_id and error.rental.state == "running"
    assert error.until == {"stopped", "failed"} and error.timeout_s == 0.3
    assert str(error) == f"{rental_id} is running after 0.3 s, not failed or stopped", str(error)


def test_a_wait_for_a_command_past_within_s_is_the_sdks_error_naming_the_command(
    client: TestClient, tenant
) -> None:
    """`wait_exec(within_s=)` raised the built-in TimeoutError: not a ClientError, and with no command to
    read, while `wait` raised `RentalWaitTimeout`. Now it is `ExecWaitTimeout`, both a ClientError and a
    TimeoutError (an `except TimeoutError`, as `suanli forward` has, still catches it), carrying the command
    as last seen."""
    _, owner = tenant("patient-exec")
    rental_id, _ = running_share(client, owner)  # its agent never takes the command: it stays queued
    key = owner["Authorization"].split()[1]
    with Client("http://testserver", key, transport=AppTransport(client)) as sdk:
        queued = sdk.exec(rental_id, ["sleep", "600"])
        with pytest.raises(ExecWaitTimeout) as late:
            sdk.wait_exec(rental_id, queued.id, poll_s=0.05, within_s=0.3)
    error = late.value
    assert isinstance(error, ClientError) and isinstance(error, TimeoutError)
    assert (error.exec.id, error.exec.state, error.within_s) == (queued.id, "queued", 0.3)
    assert str(error) == f"command {queued.id} is queued after 0.3 s, not ended", str(error)
