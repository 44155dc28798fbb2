"""Request and response bodies of rentals: the create, resize and bid bodies, quotes, the dry run, a rental
with its allocation and events; the states a rental moves through."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from suanli.wire.base import (
    MAX_BID_MICROS,
    MAX_CPU_MILLI,
    MAX_DURATION_S,
    MAX_MEMORY_MIB,
    MAX_MIN_GPUS,
    RENTAL_NAME_PATTERN,
    SHARE_STEP_MILLI,
    Argv,
    ImageName,
    RequestModel,
    TierName,
    WireModel,
    check_exec_strings,
    exec_bytes,
)

RentalState = Literal[
    "pending",
    "placed",
    "starting",
    "running",
    "stopping",
    "preempting",
    "stopped",
    "preempted",
    "lost",
    "failed",
]
ENDED_STATES = frozenset({"stopped", "preempted", "lost", "failed"})  # a rental in one holds nothing again


class RentalCreateRequest(RequestModel):
    """A rental: `gpus` per node (whole GPUs), or one `mig_profile`, or a share (`share_milli`) per node."""

    gpu_model: str | None = Field(default=None, description="Model or family (H100, A100-80GB); unset: any.")
    gpus: int = Field(
        default=1, ge=0, le=64, description="Whole GPUs per node (0 or 1 with a MIG profile or a share)."
    )
    mig_profile: str | None = Field(default=None, description="One MIG instance per node, e.g. 3g.40gb.")
    share_milli: int | None = Field(
        default=None,
        ge=SHARE_STEP_MILLI,
        le=1000 - SHARE_STEP_MILLI,
        multiple_of=SHARE_STEP_MILLI,
        description="A share of one GPU per node, in thousandths of its compute: whole percents "
        "(10, 20 ... 990).",
    )
    share_memory_mib: int = Field(default=0, ge=0, le=MAX_MEMORY_MIB)
    nodes: int = Field(default=1, ge=1, le=256, description="Node count; more than 1 is a gang.")
    cpu_milli: int = Field(default=0, ge=0, le=MAX_CPU_MILLI)
    memory_mib: int = Field(default=0, ge=0, le=MAX_MEMORY_MIB)
    tier: TierName = "on_demand"
    bid_micros_per_gpu_hour: int | None = Field(default=None, gt=0, le=MAX_BID_MICROS)
    regions: list[str] = Field(default_factory=list)
    jurisdictions: list[str] = Field(default_factory=list)
    providers: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    max_duration_s: int | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    image: ImageName | None = Field(
        default=None,
        description="The container image the workload runs in: a catalogue key (pytorch, pytorch:2.5.1, "
        "vllm, tensorflow, jax, pytorch-ngc) or any image reference (ghcr.io/acme/trainer:1.2). Without a "
        "`command` the image's own entrypoint runs. It needs a node whose agent runs containers.",
    )
    command: Argv = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    restart: Literal["never", "on-failure"] = Field(
        default="never",
        description="on-failure: the agent restarts a failed workload (on several nodes, a failure on any "
        "restarts it on all of them together, and `SUANLI_RESTART_COUNT` counts those restarts); a lost one "
        "is re-queued.",
    )
    max_restarts: int = Field(default=0, ge=0, le=100)
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=RENTAL_NAME_PATTERN,
        description="A name of yours for it (letters, digits, `.`, `_`, `-`; not unique), shown by `ls`.",
    )
    checkpoints: bool = Field(
        default=False,
        description="The workload saves its state when told (SIGTERM, or the notice in its preemption "
        "event) and resumes from it when started again. Preempted, it goes back to the queue instead of "
        "ending, keeping its place by age; and under SUANLI_QUEUE=backfill it may start at once on GPUs "
        "that would idle while it waits (`borrowed`), which the queue takes back with notice when a "
        "rental ahead of it needs them. Each run is billed; the time in the queue is not.",
    )
    min_gpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_MIN_GPUS,
        description="Elastic: when it does not fit whole it may start on as few as this many GPUs in all "
        "(fewer on its node, or fewer whole nodes of its gang), billed for what it holds, and it is grown "
        "toward its size as GPUs free (its workload restarts on the new GPUs, as on a resize). Whole GPUs "
        "only; at most the GPUs it asks for.",
    )
    idle_stop_s: int | None = Field(
        default=None,
        ge=60,
        le=MAX_DURATION_S,
        description="Stop it once every one of its GPUs has been idle (under 5% utilization, as its nodes' "
        "agents measure it) this long, so a forgotten notebook stops costing. Whole GPUs only: a MIG "
        "instance's or a share's own use cannot be told from its GPU's.",
    )

    @field_validator("env")
    @classmethod
    def _env_fits_execve(cls, env: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        """Each `NAME=value` and, with the command, all of them within what execve takes."""
        command_bytes = exec_bytes(info.data.get("command", []))
        check_exec_strings([f"{name}={value}" for name, value in env.items()], "a NAME=value", command_bytes)
        return env

    @model_validator(mode="after")
    def _idle_stop_needs_whole_gpus(self) -> RentalCreateRequest:
        if self.idle_stop_s is not None and (self.mig_profile or self.share_milli or self.gpus == 0):
            raise ValueError("idle_stop_s: needs whole GPUs (not a MIG instance or a share)")
        return self


class RentalResizeRequest(RequestModel):
    nodes: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="Live: fewer are released at once, more are added next to its nodes when free.",
    )
    gpus: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="Whole GPUs per node. Live: changed on its own nodes by the scheduler's next cycle (more "
        "once they are free there; until then it keeps what it has); its workload restarts with them. An "
        "elastic rental resized below its `min_gpus` takes the new size as its least (growing it again does "
        "not raise it).",
    )


class RentalBidRequest(RequestModel):
    bid_micros_per_gpu_hour: int = Field(
        gt=0,
        le=MAX_BID_MICROS,
        description="A spot rental's new bid per GPU-hour. Live: at least its pool's spot floor; its rate is "
        "capped at it from the next re-pricing, and a notice for the floor is withdrawn once the bid meets "
        "it again.",
    )


class SliceResponse(WireModel):
    gpu_index: int
    milli: int
    memory_mib: int
    mig_profile: str | None = None
    mig_start: int | None = None


class NodeAllocationResponse(WireModel):
    node: str
    cpu_milli: int
    memory_mib: int
    slices: list[SliceResponse]


class RentalEventResponse(WireModel):
    nul_replaced = frozenset({"message"})  # rows stored before NULs were kept as U+FFFD
    at: datetime
    kind: str = Field(description="created, pending, placed, preempting, stopped, ...")
    reason: str | None = None
    message: str = ""


class RateChangeResponse(WireModel):
    from_at: datetime
    rate_micros_per_hour: int = Field(description="What the rental pays per hour from `from_at` on.")


class QuoteLine(WireModel):
    label: str
    micros_per_hour: int


class QuoteResponse(WireModel):
    """A rental's price breakdown. At creation (`stage` created): for the most expensive model its selector
    allows, in any region (`*`). Once placed (`stage` placed): the rate charged, from its nodes' model and
    region, with the creation quote under `created`."""

    stage: Literal["created", "placed"] = "created"
    model: str
    region: str
    tier: TierName
    at_s: int
    unit_micros_per_gpu_hour: int
    base_micros_per_hour: int
    discounts: list[QuoteLine] = Field(default_factory=list)
    contract_coverage_micros_per_hour: int = 0
    contract_covered_gpu_milli: int = Field(
        default=0, description="GPU milli drawn from the tenant's open contracts at 0 marginal price."
    )
    final_micros_per_hour: int
    minimum_s: int = 60
    source: str = ""
    created: QuoteResponse | None = None


class RentalDryRunResponse(WireModel):
    """What `POST /v1/rentals` would do with the same body now, with nothing created (as `sbatch
    --test-only`): the checks create makes (a bad field, too little balance) fail the same way."""

    starts_now: bool = Field(
        description="A cycle now would place it (`nodes`), taking it in the queue's order with the rentals "
        "waiting (under the backfill queue: it passes a blocked head only where it cannot delay it)."
    )
    nodes: list[str] = Field(default_factory=list, description="Where it would start, one entry per node.")
    preempts: int = Field(
        default=0,
        description="The lower-tier rentals it would give notice to: it starts when they leave, within "
        "their notice.",
    )
    pending_reason: str | None = Field(default=None, description="Why it would wait, as a rental's reason.")
    message: str | None = None
    price_micros_per_hour: int | None = Field(
        default=None,
        description="The rate it would pay where it would start now; else the quote's, the most it pays "
        "(the priciest model its selector allows).",
    )
    quote_micros_per_hour: int | None = Field(default=None, description="Its quote at creation, as now.")
    max_cost_micros: int | None = Field(
        default=None, description="That rate over its declared max duration (at least the 60 s minimum)."
    )
    rentals_waiting: int = Field(
        default=0, description="Rentals pending now: the trial took it in the queue's order with them."
    )
    expected_start_at: datetime | None = Field(
        default=None,
        description="Waiting: when capacity would be reserved for it (it would head the backfill queue, or "
        "the conservative queue would book it), as the rental's own `expected_start_at` would show.",
    )
    head_start_at: datetime | None = Field(
        default=None,
        description="Waiting behind the backfill queue's blocked head (another rental), with no "
        "`expected_start_at` of its own: when capacity is reserved for that head.",
    )
    contract_covered_gpus: float = Field(
        default=0.0,
        description="Of its GPUs where it would start now, those your open contracts cover (paid for "
        "already: the rate counts them at 0).",
    )


class ResizePendingResponse(WireModel):
    nodes: int = Field(description="The nodes it asked for (`request.nodes`).")
    gpus: int = Field(description="The whole GPUs per node it asked for (`request.gpus`).")
    held_nodes: int = Field(description="The nodes it holds now: `allocation` lists them.")
    held_gpus: int = Field(
        description="The whole GPUs per node it holds now, which `price_micros_per_hour` is the rate of."
    )


class RentalResponse(WireModel):
    id: str
    tenant_id: str
    state: RentalState
    request: RentalCreateRequest
    allocation: list[NodeAllocationResponse]
    pending_reason: str | None = None
    pending_message: str | None = Field(
        default=None,
        description="Pending: its reason in words, with the figures of the scheduler's last cycle (GPUs in "
        "use, money spent). Its `pending` events are written when the reason changes, so their figures may "
        "be older.",
    )
    price_micros_per_hour: int | None = None
    created_at: datetime
    events: list[RentalEventResponse] = Field(default_factory=list)
    preempted_by: str | None = Field(
        default=None,
        description="Preempting: the rental promised its capacity (`another_tenant` when it is another "
        "tenant's: its id is not shown), or `below_floor` (a spot bid below the floor) or `maintenance`.",
    )
    notice_deadline: datetime | None = Field(default=None, description="Preempting: killed at this time.")
    notice_keeps_gpus: int | None = Field(
        default=None,
        description="Preempting in part (an elastic rental, `min_gpus`): at `notice_deadline` it gives back "
        "the GPUs its preemptor needs and runs on with this many, as after a resize; it grows back toward "
        "its size as GPUs free.",
    )
    borrowed: bool = Field(
        default=False,
        description="Live on GPUs lent to it while it would have waited (it checkpoints): the queue takes "
        "them back with notice when a rental ahead of it needs them, and it goes back to the queue.",
    )
    expected_start_at: datetime | None = Field(
        default=None,
        description="Pending at the head of the backfill queue (SUANLI_QUEUE=backfill), or any pending "
        "rental the conservative queue booked (SUANLI_QUEUE=conservative): when capacity is reserved for "
        "it, the rentals ahead of it ending at their declared max duration. It starts then at the latest, "
        "sooner if they end early, unless a higher tier or a contract holder takes the capacity. A rental "
        "waiting on the preemption notice it gave (reason `preempting`, any queue): its victims' last "
        "deadline, when it starts at the latest.",
    )
    time_limit_at: datetime | None = Field(
        default=None,
        description="Live with a declared max duration: when it is stopped (its placement plus the duration; "
        "the workload gets SIGTERM, then SIGKILL after the agent's grace), as Slurm ends a job at its time "
        "limit, since the scheduler's backfill and maintenance plans count on it.",
    )
    time_left_s: float | None = Field(
        default=None,
        description="Back in the queue after a preemption it checkpointed for: what is left of its max "
        "duration (for its full size), with 300 s to resume. It is ordered and backfilled by it, and its "
        "next placement is stopped after it (null: the whole max duration).",
    )
    quote: QuoteResponse | None = Field(default=None, description="The price breakdown at creation.")
    rate_changes: list[RateChangeResponse] = Field(
        default_factory=list,
        description="The rates it paid since placement when its rate changed: a spot pool's price moved, or "
        "a resize changed its nodes or GPUs (empty: the placement rate throughout).",
    )
    resize_pending: ResizePendingResponse | None = Field(
        default=None,
        description="Live, whole GPUs, holding another shape than its request asks (a resize the "
        "scheduler's leader has not applied yet, or an elastic rental below its size): `allocation` and "
        "`price_micros_per_hour` are still those of the shape it holds. The leader applies a smaller shape "
        "in its next cycle, a larger one once the GPUs are free (an event says why it waits); null once it "
        "holds what it asks.",
    )
    charged_micros: int = Field(
        default=0,
        description="What it has been charged so far (cash and grants), as the ledger holds it: the meter "
        "charges a live rental up to its last run (every SUANLI_METER_INTERVAL_S) and an ended one in full "
        "soon after it ends. Its invoice line shows the same amount.",
    )
