"""When a request is sent again (a lost answer, a gateway's "try again", a 429, a server restarting) and
how a deadline bounds each send and retry: the rules, as tenacity policies."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import httpx
from tenacity import (
    RetryCallState,
    retry,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    stop_before_delay,
    wait_exponential,
)

from suanli.client.errors import GATEWAY_RETRY_STATUSES, GatewayError, ServerUnreachable

T = TypeVar("T")
P = ParamSpec("P")

MIN_REQUEST_TIMEOUT_S = 0.1  # what a request bounded by a deadline (`wait`) gets at least, however near it is
MAX_RATE_WAIT_S = 30.0  # the longest a 429's Retry-After is waited out before sending again
# how long following a rental's output or waiting for its state goes on asking a server that does not answer
# (a restart, a new leader) before it gives up
RECONNECT_S = 120.0
# failures after which a safe request is sent again: its answer was lost, whether or not the server acted
LOST_ANSWER_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
# what a long wait (`wait`, following `output`) rides out: a server that does not answer, or a gateway in
# front of it that answers 502/503/504 for it (nginx, a load balancer, while the server restarts)
SERVER_AWAY_ERRORS = (ServerUnreachable, GatewayError)


def timeout_until(timeout: httpx.Timeout, deadline: float | None) -> httpx.Timeout:
    """The client's `timeout`, each of its phases cut to what is left before `deadline` (when given)."""
    if deadline is None:
        return timeout
    left_s = max(deadline - time.monotonic(), MIN_REQUEST_TIMEOUT_S)
    phases = {"connect": timeout.connect, "read": timeout.read, "write": timeout.write, "pool": timeout.pool}
    return httpx.Timeout(**{name: left_s if s is None else min(s, left_s) for name, s in phases.items()})


def _stop(attempts: int, within_s: float | None):
    """Stop after `attempts` sends, or (given `within_s`) before a retry that would start past it."""
    after_attempts = stop_after_attempt(max(attempts, 1))
    return after_attempts if within_s is None else after_attempts | stop_before_delay(max(within_s, 0.0))


def retry_on_connection_errors(attempts: int, within_s: float | None = None):
    """Retry a safe send whose answer did not come (a connection refused, reset or timed out, whether or not
    the server got it) or that a gateway in front answered with "try again" (502/503/504), with exponential
    backoff (0.2 s doubling, capped at 3 s), none that would start past `within_s`. The last failure is
    raised, or its reply returned."""
    return retry(
        retry=retry_if_exception_type(LOST_ANSWER_ERRORS) | retry_if_result(_gateway_failed),
        stop=_stop(attempts, within_s),
        wait=wait_exponential(multiplier=0.2, max=3.0),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome is not None else None,
    )


def ride_out_restarts(
    reconnect_s: float,
    poll_s: float,
    within_s: float | None = None,
    on_unreachable: Callable[[ServerUnreachable], None] | None = None,
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Call again a call that found the server away, its own retries spent: not answering
    (`ServerUnreachable`: a restart, a change of leader) or a gateway in front of it answering 502/503/504
    for it (`GatewayError`: nginx or a load balancer while it restarts). Every `poll_s`, or after the
    gateway's Retry-After, each wait cut to end by `reconnect_s` from the first try and by `within_s`; none
    starts past either. `on_unreachable` is told before the first wait. The last failure is raised, a
    gateway's as `ServerUnreachable` naming its status. Following output and waiting for a rental's state
    share this rule."""

    def tell(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        if on_unreachable is not None and state.attempt_number == 1 and isinstance(error, SERVER_AWAY_ERRORS):
            on_unreachable(_as_unreachable(error, state.seconds_since_start))

    def pause_s(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        wanted_s = poll_s
        if isinstance(error, GatewayError) and error.retry_after_s is not None:
            wanted_s = error.retry_after_s
        left_s = min(reconnect_s, float("inf") if within_s is None else within_s) - state.seconds_since_start
        return max(min(wanted_s, left_s), 0.0)

    stop = stop_after_delay(max(reconnect_s, 0.0))
    retried = retry(
        retry=retry_if_exception_type(SERVER_AWAY_ERRORS),
        stop=stop if within_s is None else stop | stop_after_delay(max(within_s, 0.0)),
        wait=pause_s,
        before_sleep=tell,
        reraise=True,
    )

    def ride_out(call: Callable[P, T]) -> Callable[P, T]:
        asking = retried(call)  # tenacity retries a coroutine function with AsyncRetrying

        @functools.wraps(call)
        def riding_out(*args: P.args, **kwargs: P.kwargs) -> T:
            started = time.monotonic()
            try:
                return asking(*args, **kwargs)
            except GatewayError as error:
                raise _as_unreachable(error, time.monotonic() - started) from None

        @functools.wraps(call)
        async def riding_out_awaited(*args: P.args, **kwargs: P.kwargs) -> Any:
            started = time.monotonic()
            try:
                return await asking(*args, **kwargs)
            except GatewayError as error:
                raise _as_unreachable(error, time.monotonic() - started) from None

        return riding_out_awaited if inspect.iscoroutinefunction(call) else riding_out

    return ride_out


def _as_unreachable(error: ServerUnreachable | GatewayError, asked_s: float | None) -> ServerUnreachable:
    """A gateway's 502/503/504 as the `ServerUnreachable` it stands for (the server behind it is away),
    naming the status and how long it was asked; a `ServerUnreachable` as it is."""
    if isinstance(error, ServerUnreachable):
        return error
    for_s = f" for {asked_s:.1f} s" if asked_s else ""
    message = f"{error.answered}{for_s} (a gateway's answer: the server behind it is away)"
    return ServerUnreachable(message, last_status=error.status)


def _gateway_failed(response: httpx.Response) -> bool:
    return response.status_code in GATEWAY_RETRY_STATUSES


def retry_when_rate_limited(attempts: int, within_s: float | None = None):
    """Send again after a 429, once its Retry-After has passed (at most `MAX_RATE_WAIT_S` a time), unless that
    would be past `within_s`: the server did nothing with a limited request, so any method may be sent again.
    The last 429 is returned."""

    def retry_after(state: RetryCallState) -> float:
        response = state.outcome.result() if state.outcome is not None else None
        try:
            wait_s = float(response.headers.get("Retry-After", "1")) if response is not None else 1.0
        except ValueError:  # an HTTP date: not what this server sends
            wait_s = 1.0
        return min(max(wait_s, 0.0), MAX_RATE_WAIT_S)

    return retry(
        retry=retry_if_result(lambda response: response.status_code == 429),
        stop=_stop(attempts, within_s),
        wait=retry_after,
        retry_error_callback=lambda state: state.outcome.result() if state.outcome is not None else None,
    )
