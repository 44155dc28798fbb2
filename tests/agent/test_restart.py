"""Restart policy: never, or on-failure up to a limit; stopped and clean exits are never restarted."""

from __future__ import annotations

import pytest

from suanli.agent.restart import Outcome, RestartPolicy, RestartPolicyError, RestartTracker


@pytest.mark.parametrize(
    ("policy", "exits", "expected"),
    [
        (RestartPolicy.never(), [1], [Outcome.FAILED]),
        (RestartPolicy.never(), [0], [Outcome.SUCCEEDED]),
        (RestartPolicy.on_failure(2), [1, 137, 1], [Outcome.RESTART, Outcome.RESTART, Outcome.FAILED]),
        (RestartPolicy.on_failure(2), [1, 0], [Outcome.RESTART, Outcome.SUCCEEDED]),
        (RestartPolicy.on_failure(1), [3], [Outcome.RESTART]),
    ],
    ids=["never-fails", "never-succeeds", "on-failure-runs-out", "on-failure-then-success", "one-restart"],
)
def test_exits_under_a_policy(policy: RestartPolicy, exits: list[int], expected: list[Outcome]) -> None:
    tracker = RestartTracker(policy)
    outcomes = []
    for code in exits:
        outcome, tracker = tracker.on_exit(code)
        outcomes.append(outcome)
    assert outcomes == expected
    assert tracker.restarts == outcomes.count(Outcome.RESTART)


def test_a_stopped_workload_is_never_restarted() -> None:
    tracker = RestartTracker(RestartPolicy.on_failure(5))
    assert tracker.on_exit(143, stopped=True) == (Outcome.STOPPED, tracker)


@pytest.mark.parametrize(
    ("mode", "limit", "message"),
    [
        ("always", 0, "unknown restart policy"),
        ("never", 2, "takes no restart limit"),
        ("on-failure", 0, "at least 1"),
    ],
    ids=["unknown", "never-with-limit", "on-failure-without-limit"],
)
def test_bad_policies_are_refused(mode: str, limit: int, message: str) -> None:
    with pytest.raises(RestartPolicyError, match=message):
        RestartPolicy.parse(mode, limit)


def test_a_policy_from_the_wire() -> None:
    assert RestartPolicy.parse("on-failure", 3) == RestartPolicy.on_failure(3)
    assert RestartPolicy.parse("never") == RestartPolicy.never()
