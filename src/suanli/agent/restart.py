"""Restart policy on the host: `never`, or `on-failure` up to a limit, as a small pure state machine.

`RestartTracker.on_exit(exit_code, stopped)` says what to do when a workload ends: restart it, or settle it as
succeeded / failed / stopped. A workload the agent stopped (stop, preemption, kill) is never restarted;
a clean exit (code 0) is never restarted; a failure is restarted while `on-failure` has restarts left.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from suanli.domain.errors import SuanliError


class RestartMode(StrEnum):
    NEVER = "never"
    ON_FAILURE = "on-failure"


class Outcome(StrEnum):
    RESTART = "restart"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


class RestartPolicyError(SuanliError):
    """A restart policy that cannot be: unknown mode, or a bad limit."""


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    mode: RestartMode = RestartMode.NEVER
    max_restarts: int = 0  # only for on-failure

    @classmethod
    def never(cls) -> RestartPolicy:
        return cls()

    @classmethod
    def on_failure(cls, max_restarts: int) -> RestartPolicy:
        return cls.parse(RestartMode.ON_FAILURE.value, max_restarts)

    @classmethod
    def parse(cls, mode: str, max_restarts: int = 0) -> RestartPolicy:
        """Check a policy from the wire: `never` (limit 0) or `on-failure` with a limit of at least 1."""
        try:
            checked = RestartMode(mode)
        except ValueError:
            allowed = ", ".join(m.value for m in RestartMode)
            raise RestartPolicyError(f"unknown restart policy {mode!r}; use one of {allowed}") from None
        if checked is RestartMode.NEVER and max_restarts != 0:
            raise RestartPolicyError("restart policy 'never' takes no restart limit")
        if checked is RestartMode.ON_FAILURE and max_restarts < 1:
            raise RestartPolicyError(f"on-failure needs a restart limit of at least 1, got {max_restarts}")
        return cls(checked, max_restarts)


@dataclass(frozen=True, slots=True)
class RestartTracker:
    """How many times a rental's workload has been restarted under its policy. Immutable: each step is new."""

    policy: RestartPolicy
    restarts: int = 0

    def can_restart(self) -> bool:
        return self.policy.mode is RestartMode.ON_FAILURE and self.restarts < self.policy.max_restarts

    def on_exit(self, exit_code: int, *, stopped: bool = False) -> tuple[Outcome, RestartTracker]:
        """The outcome of an exit and the tracker after it (restarts counted when the outcome is RESTART)."""
        if stopped:
            return Outcome.STOPPED, self
        if exit_code == 0:
            return Outcome.SUCCEEDED, self
        if self.can_restart():
            return Outcome.RESTART, replace(self, restarts=self.restarts + 1)
        return Outcome.FAILED, self
