"""Request and response bodies of execs (a command run inside a rental) and port forwards."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from suanli.wire.base import Argv, RequestModel, WireModel


class ExecCreateRequest(RequestModel):
    """A command to run inside a running rental, on one of its nodes, as its workload runs."""

    command: Argv = Field(min_length=1, max_length=1000, description='argv, e.g. ["nvidia-smi"].')
    node_rank: int = Field(default=0, ge=0, le=4095, description="Which of the rental's nodes (0: first).")
    timeout_s: int = Field(
        default=60, ge=1, le=8 * 3600, description="Killed after this long (at most 1 h; attached, 8 h)."
    )
    stdin: bool = Field(
        default=False,
        description="Attached: its input and output stream over the WebSocket "
        "`/v1/rentals/{id}/execs/{exec_id}/attach` (binary frames both ways) instead of being kept; it "
        "waits up to a minute for the client to attach.",
    )
    tty: bool = Field(
        default=False,
        description="With stdin: run it on a terminal (a pseudo-terminal on the node), for a shell; the "
        'client sends its size as the text frame {"rows": R, "cols": C}.',
    )
    separate_stderr: bool = Field(
        default=False,
        description="With stdin and without tty: its stdout and stderr apart, as kubectl exec keeps them; "
        "every binary frame of its output then starts with one byte saying which, 1 (stdout) or 2 (stderr), "
        "as Kubernetes' channel protocol does. Without it they come together, unmarked.",
    )


class ForwardCreateRequest(RequestModel):
    """A port forward to a running rental: TCP connections to `port` on one of its nodes, carried over the
    WebSocket `/v1/rentals/{id}/execs/{exec_id}/attach` (see the answer's id)."""

    port: int = Field(ge=1, le=65535, description="The rental's port on its node, e.g. 8888 for Jupyter.")
    node_rank: int = Field(default=0, ge=0, le=4095, description="Which of the rental's nodes (0: first).")
    timeout_s: int = Field(default=8 * 3600, ge=1, le=8 * 3600, description="Closed after this long.")


class ExecResponse(WireModel):
    nul_replaced = frozenset({"output", "message"})  # rows stored before NULs were kept as U+FFFD
    id: str
    rental_id: str
    node: str
    command: list[str]
    timeout_s: int
    state: Literal["queued", "running", "exited", "failed", "lost"] = Field(
        description="queued (for the node's agent's next heartbeat), running, exited (see exit_code), "
        "failed (it could not run: see message) or lost (no answer from the agent, or the rental ended)."
    )
    exit_code: int | None = Field(default=None, description="Exited: its status (128+N: killed by signal N).")
    output: str = Field(
        default="",
        description="The end of its stdout and stderr together (64 Ki characters at most), as it runs too.",
    )
    output_truncated: bool = False
    output_chars: int = Field(
        default=0,
        description="Characters it has printed so far: `output` is the last of them, so a client that has "
        "shown N of them shows `output[N - (output_chars - len(output)):]` next.",
    )
    message: str = ""
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    stdin: bool = Field(default=False, description="Attached: its output streamed, not kept here.")
    tty: bool = False
    port: int | None = Field(default=None, description="A port forward (no command): to this port.")
    separate_stderr: bool = False
