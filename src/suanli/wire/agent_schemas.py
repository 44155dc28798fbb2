"""Bodies of the agent API (join tokens, register, heartbeat, logs) and of rental logs and runs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from suanli.wire.base import RequestModel, WireModel
from suanli.wire.rental_schemas import SliceResponse

MAX_LOG_CHUNK_BYTES = 4 * 1024 * 1024  # one upload: agents send 256 KiB at most

WorkloadStateName = Literal["starting", "running", "succeeded", "failed", "stopped"]


class JoinTokenCreateRequest(RequestModel):
    node: str = Field(min_length=1, max_length=200, description="The fleet node this token may register.")
    ttl_s: float | None = Field(default=None, gt=0, description="Lifetime; default from the server.")


class JoinTokenResponse(WireModel):
    id: str
    node: str
    expires_at: datetime
    token: str = Field(description="The join token itself (jt_...): shown once, single use.")


class AgentRegisterRequest(RequestModel):
    token: str = Field(min_length=1, max_length=200)
    inventory: dict[str, Any] = Field(description="The host's GPUs: index, UUID, model, MIG devices.")


class AgentRegisterResponse(WireModel):
    node: str
    node_key: str = Field(description="The node's key (nk_...): the agent authenticates with it from now on.")
    heartbeat_interval_s: float


class GpuTelemetryReport(RequestModel):
    index: int = Field(ge=0, le=1023)
    utilization_pct: int | None = Field(default=None, ge=0, le=100)
    memory_used_mib: int | None = Field(default=None, ge=0, le=10**9)
    power_w: float | None = Field(default=None, ge=0, le=10_000, allow_inf_nan=False)


class WorkloadReportBody(RequestModel):
    nul_replaced = frozenset({"message"})
    rental_id: str
    state: WorkloadStateName
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    message: str = Field(default="", max_length=500)
    attempt: int = Field(
        default=0,
        ge=0,
        le=2**31 - 1,
        description="The assignment's `attempt` this run follows: an end reported for an earlier one is "
        "ignored.",
    )
    restarts: int = Field(
        default=0,
        ge=0,
        le=10_000,
        description="Times the agent has restarted this workload by itself after a failure (a one-node "
        "rental's `on-failure`); each new one is a `restarted` event.",
    )
    failed_exit_code: int | None = Field(
        default=None,
        ge=-(2**31),
        le=2**31 - 1,
        description="The exit code of the failure the last of those restarts followed.",
    )
    placement: int | None = Field(
        default=None,
        ge=0,
        le=2**31 - 1,
        description="The assignment's `placement` this run follows: a report on an earlier placement's run "
        "only ends that run. Absent: the rental's current placement.",
    )
    ran_s: float | None = Field(
        default=None,
        ge=0,
        le=10 * 365 * 24 * 3600,
        description="Seconds since the agent started the workload, ended or not: the run's start is this "
        "long before the report, so a workload that ends between two heartbeats has its start too. Absent "
        "(an adopted workload): the first `running` report is its start.",
    )
    since_exit_s: float | None = Field(
        default=None,
        ge=0,
        le=10 * 365 * 24 * 3600,
        description="With an ended state: seconds since the agent saw the workload exit, so a run whose end "
        "could not reach the server at once (a server outage) ends, and is billed, to its exit, not to the "
        "report's arrival (never before its start). Absent (an older agent): its end is the report's "
        "arrival.",
    )


class MigInstanceReport(RequestModel):
    profile: str = Field(min_length=1, max_length=32, description="The MIG profile, e.g. 3g.40gb.")
    start_slot: int = Field(ge=0, le=7, description="Its placement start, as `nvidia-smi mig -lgi` shows it.")
    busy: bool = Field(
        default=False,
        description="Processes run on it that no rental of this node was given (not suanli's): the "
        "scheduler neither places on it nor destroys it.",
    )


class MigLayoutReport(RequestModel):
    index: int = Field(ge=0, le=1023, description="The GPU's index on the host.")
    instances: list[MigInstanceReport] = Field(
        max_length=8, description="Every instance on it, busy or idle."
    )


class HeartbeatRequest(RequestModel):
    workloads: list[WorkloadReportBody] = Field(default_factory=list)
    telemetry: list[GpuTelemetryReport] = Field(default_factory=list)
    runs_images: bool | None = Field(
        default=None,
        description="Whether this agent runs container images (its executor). False keeps rentals that name "
        "an image off the node; absent leaves what was last said.",
    )
    gpu_models: list[Annotated[str, Field(max_length=200)]] | None = Field(
        default=None,
        max_length=1024,
        description="The model of each of the host's GPUs, by index, as its probe names them (catalogue "
        "names where it knows them): a node whose GPUs are not the fleet's (model, count) is cordoned, and "
        "back once they are. Absent leaves what was last said (at registration, its inventory's).",
    )
    mig_layouts: list[MigLayoutReport] | None = Field(
        default=None,
        max_length=1024,
        description="The MIG instances of each GPU in MIG mode, as the host has them (made by the agent or "
        "by hand): the scheduler places MIG slices on them instead of the fleet's declared layout. Absent "
        "leaves what was last said.",
    )

    @model_validator(mode="after")
    def _one_layout_per_gpu(self) -> HeartbeatRequest:
        indexes = [layout.index for layout in self.mig_layouts or ()]
        if len(indexes) != len(set(indexes)):
            raise ValueError("mig_layouts: one layout per GPU index")
        return self


class AssignmentResponse(WireModel):
    rental_id: str
    action: Literal["run", "stop"]
    slices: list[SliceResponse]
    command: list[str]
    env: dict[str, str]
    image: str | None = Field(
        default=None,
        description="The container image the tenant named (a catalogue key or an image reference); the agent "
        "resolves a key to its pinned reference. Set: run in that container (without a command, its "
        "entrypoint); an agent that runs host processes reports the workload failed instead.",
    )
    restart: Literal["never", "on-failure"] = "never"
    max_restarts: int = 0
    notice_deadline: datetime | None = Field(
        default=None, description="Preemption notice: SIGTERM and the notice file now, SIGKILL at this time."
    )
    notice_cause: Literal["higher_tier", "spot_floor", "maintenance", "reclaimed"] | None = Field(
        default=None,
        description="Why the notice (with `notice_deadline`): a higher tier needs the GPUs, the spot floor "
        "rose above the bid, the node goes into maintenance, or the idle GPUs it borrowed are taken back "
        "(the notice file's `cause`).",
    )
    notice_keeps_gpus: int | None = Field(
        default=None,
        ge=0,
        description="Preempted in part (an elastic rental trimmed): the notice file now (with these GPUs), "
        "no signal, and no kill at `notice_deadline`: the rental then runs on with this many GPUs, as after "
        "any resize (new GPUs here: its workload restarts on them; a node it gives up is not assigned).",
    )
    notice_releases_node: bool = Field(
        default=False,
        description="With `notice_keeps_gpus`: the trim gives up this node (a gang runs on with its other "
        "nodes), so its part here ends at `notice_deadline`; the notice file says `released: true`.",
    )
    peers: list[str] = Field(
        default_factory=list,
        description="The host names of all the rental's nodes in rank order, as their agents registered them "
        "(rank 0 first); it changes when the rental grows or shrinks.",
    )
    node_rank: int = Field(default=0, ge=0, description="This node's rank among `peers`.")
    master_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="The rental's rendezvous port on rank 0's host (`SUANLI_MASTER_PORT`): the server picks "
        "one that no other live rental on its nodes holds when it places the rental.",
    )
    attempt: int = Field(
        default=0,
        ge=0,
        description="How many times a multi-node rental's workload was restarted on all its nodes "
        "(on-failure: a failure on one node restarts every node's part); a higher one than the agent's "
        "run restarts it.",
    )
    restarts: int = Field(
        default=0,
        ge=0,
        description="Restarts this node's agent has made by itself (one node, on-failure), as it last "
        "reported them: an agent that restarted counts on from them, so max_restarts holds across it.",
    )
    placement: int = Field(
        default=0,
        ge=0,
        description="How many times the rental has been placed: a rental re-queued (a lost node, or "
        "preempted while it checkpoints) and placed on this node again has a higher one than the run the "
        "agent remembers, and starts anew here.",
    )


class ExecAssignmentResponse(WireModel):
    """A command a tenant asked to run inside one of this node's running rentals (`suanli exec`)."""

    id: str
    rental_id: str
    command: list[str]
    timeout_s: int = Field(description="Killed after this long, even if the agent dies.")
    state: Literal["queued", "running"] = Field(
        description="running: this node's agent said it started it (an agent that does not know it restarted "
        "meanwhile, and reports it failed)."
    )
    stdin: bool = Field(
        default=False,
        description="Attached: the agent streams its input and output over the WebSocket "
        "`/v1/agents/execs/{id}/attach`.",
    )
    tty: bool = Field(default=False, description="Attached on a pseudo-terminal.")
    separate_stderr: bool = Field(
        default=False,
        description="Attached without a terminal: every output frame starts with its stream, 1 (stdout) or "
        "2 (stderr).",
    )
    port: int | None = Field(
        default=None,
        description="A port forward (no command): the agent opens a TCP connection to this port of the "
        'rental for each {"open": N} the client sends, and carries it in frames that start with N (4 bytes).',
    )


class HeartbeatResponse(WireModel):
    node: str
    heartbeat_interval_s: float
    server_time: datetime | None = Field(
        default=None,
        description="The server's clock as it answered: an agent counts notice deadlines on it, not on its "
        "host's clock (one running ahead killed victims at once, with no notice).",
    )
    assignments: list[AssignmentResponse] = Field(
        description="Every rental placed on this node; a workload not listed here must be killed."
    )
    execs: list[ExecAssignmentResponse] = Field(
        default_factory=list, description="Commands to run inside this node's running rentals, oldest first."
    )


class ExecReportRequest(RequestModel):
    """An agent's word on a command: it started it, or how it ended."""

    nul_replaced = frozenset({"output", "message"})

    state: Literal["running", "exited", "failed"]
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    output: str = Field(
        default="",
        max_length=1_048_576,
        description="Its stdout and stderr from character `output_from_chars` on; without it, the end of "
        "them (sent once, at the end).",
    )
    output_truncated: bool = False
    message: str = Field(default="", max_length=2000)
    output_from_chars: int | None = Field(
        default=None,
        ge=0,
        le=2**53,
        description="Where `output` starts in everything the command printed (characters): a `running` "
        "report sends what it printed since the last one the server took, as it runs.",
    )


class LogChunkRequest(RequestModel):
    nul_replaced = frozenset({"data"})
    rental_id: str
    offset: int = Field(
        ge=0, le=2**53, description="Byte offset of this chunk in the node's log of the rental."
    )
    data: str = Field(description="The chunk, UTF-8 (invalid bytes replaced).")
    size_bytes: int = Field(
        ge=0, le=MAX_LOG_CHUNK_BYTES, description="The chunk's length in bytes as read from the log file."
    )

    @model_validator(mode="after")
    def _size_fits_data(self) -> LogChunkRequest:
        """Each byte read decodes to at most one character and a character takes at most 4 bytes: a size
        outside that is not this chunk's (and would leave the log's next offset where no chunk can follow)."""
        if not len(self.data) <= self.size_bytes <= 4 * len(self.data):
            chars = len(self.data)
            raise ValueError(f"size_bytes {self.size_bytes} does not fit a chunk of {chars} characters")
        return self


class LogChunkResponse(WireModel):
    stored_bytes: int = Field(
        description="What the server holds for this node; send the next chunk from here."
    )


class LogResponse(WireModel):
    nul_replaced = frozenset({"data"})  # rows stored before NULs were kept as U+FFFD
    rental_id: str
    offset: int
    next_offset: int
    data: str
    done: bool = Field(description="The rental has ended and every stored line has been read.")


class RentalGpuResponse(WireModel):
    """A GPU slice the rental holds now, with its GPU's last reading from the node's agent."""

    node: str
    gpu_index: int
    milli: int = Field(description="Thousandths of the GPU: 1000 whole, less for a MIG instance or share.")
    mig_profile: str | None = None
    utilization_pct: int | None = None
    memory_used_mib: int | None = None
    power_w: float | None = None
    read_at: datetime | None = Field(default=None, description="The heartbeat that carried it (None: none).")
    whole_gpu: bool = Field(
        description="The reading is this slice's own; false for a MIG instance or a share, which read the "
        "whole GPU they are part of (NVML reports per GPU)."
    )


class GpuMinuteResponse(WireModel):
    minute: datetime = Field(description="The minute's start (UTC).")
    utilization_pct: float | None = Field(default=None, description="Mean of the minute's readings.")
    memory_used_mib: int | None = Field(default=None, description="The most read in the minute.")
    power_w: float | None = Field(default=None, description="Mean of the minute's readings.")


class RentalGpuHistoryResponse(WireModel):
    """A GPU slice the rental held, with its GPU's readings by minute while it held it."""

    node: str
    gpu_index: int
    milli: int
    mig_profile: str | None = None
    whole_gpu: bool = Field(description="False for a MIG instance or a share: the readings are the GPU's.")
    since: datetime = Field(description="From when it held it (or the window's start).")
    until: datetime | None = Field(default=None, description="When it gave it back (None: it holds it).")
    minutes: list[GpuMinuteResponse] = Field(
        description="Minutes with readings, oldest first (none read: absent)."
    )


class RentalRunResponse(WireModel):
    node: str
    state: str
    exit_code: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = Field(default=None, description="Where billing stops for this node.")
    last_heartbeat_at: datetime | None = None
    restarts: int = Field(default=0, description="Restarts its agent made by itself after failures.")
    placement: int = Field(
        default=0,
        description="The rental's placement it ran in: a re-queued rental placed again has a run per "
        "placement.",
    )
