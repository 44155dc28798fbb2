"""What the server asks a host to run: one rental's slices, command, environment, image and restart policy.

Plain values only; the agent loop builds them from the server's assignment messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from suanli.agent.restart import RestartMode, RestartPolicy
from suanli.domain.plan import Slice


@dataclass(frozen=True, slots=True)
class Assignment:
    rental_id: str
    slices: tuple[Slice, ...]
    command: tuple[str, ...]  # argv; a single shell line is ("/bin/sh", "-c", line)
    env: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None  # for the container executor; an image reference or a catalogue key
    restart: RestartPolicy = field(default_factory=RestartPolicy.never)
    peers: tuple[str, ...] = ()  # host names of all the rental's nodes, rank order (empty: not told)
    node_rank: int = 0
    attempt: int = 0  # a multi-node rental's restarts on all its nodes so far (the server counts them)
    placement: int = 1  # its placements so far: more than one once re-queued (preempted while it checkpoints)
    # its rendezvous port, as the server chose it (None: a server that did not)
    master_port: int | None = None

    @property
    def restarts_together(self) -> bool:
        """On several nodes under on-failure: a failure is the server's to restart, on every node at once."""
        return len(self.peers) > 1 and self.restart.mode is RestartMode.ON_FAILURE

    @property
    def runs_workload(self) -> bool:
        """A command, or an image whose entrypoint runs without one; neither: a reservation holding GPUs."""
        return bool(self.command) or self.image is not None
