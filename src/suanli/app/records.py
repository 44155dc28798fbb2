"""The values use cases pass through ports: tenants, keys, rentals, events, contracts (frozen dataclasses)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from suanli.domain.billing.plans import PaymentTerms
from suanli.domain.contracts import Contract
from suanli.domain.plan import NodeAllocation
from suanli.domain.running import SPOT_FLOOR

ROLES = ("admin", "provider", "tenant")
LIVE_STATES = ("placed", "starting", "running", "stopping", "preempting")
PREEMPTIBLE_STATES = ("placed", "starting", "running")  # may be given a preemption notice
END_STATES = ("stopped", "preempted", "lost", "failed")
# A stop its agents have not confirmed this long after it was asked is billed no further, and the scheduler no
# longer counts on its GPUs coming free now: an agent that hangs must not bill its tenant, nor hold the queue
STOP_CONFIRM_S = 120
# `preempted_by` of a spot rental noticed because its bid fell below its pool's floor
BELOW_FLOOR = SPOT_FLOOR
# a pending rental's recorded expected start is rewritten when the leader's estimate moves this much earlier
# (any later move is written at once: a recorded start is at most this much later than the estimate)
EXPECTED_START_STEP_S = 60.0
# Every kind of rental event: a state it entered, or what happened to it (a restart of its workload, a
# re-queue after a lost node, a resize, a spot bid changed, growing onto more nodes, a low balance warning,
# a budget alert, a stop its agents have not confirmed in `STOP_CONFIRM_S`)
EVENT_KINDS = (
    "created",
    "pending",
    "placed",
    "starting",
    "running",
    "restarted",
    "requeued",
    "resized",
    "bid",
    "growing",
    "grown",
    "low_balance",
    "budget",
    "preempting",
    "stopping",
    "stop_overdue",
    "stopped",
    "preempted",
    "lost",
    "failed",
)


@dataclass(frozen=True, slots=True)
class Tenant:
    id: str
    name: str
    role: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    tenant_id: str
    label: str
    secret_sha256: str
    created_at: datetime
    revoked: bool = False


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the tenant behind the presented key."""

    tenant: Tenant
    key_id: str

    @property
    def is_admin(self) -> bool:
        return self.tenant.role == "admin"


@dataclass(frozen=True, slots=True)
class RentalSpec:
    """What a tenant asked for, as submitted (the wire request's fields)."""

    gpu_model: str | None = None
    gpus: int = 1
    mig_profile: str | None = None
    share_milli: int | None = None
    share_memory_mib: int = 0
    nodes: int = 1
    cpu_milli: int = 0
    memory_mib: int = 0
    tier: str = "on_demand"
    bid_micros_per_gpu_hour: int | None = None
    regions: tuple[str, ...] = ()
    jurisdictions: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    max_duration_s: int | None = None
    image: str | None = None  # a catalogue key or an image reference: the workload runs in that container
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    restart: str = "never"  # or "on-failure": the agent restarts a failed workload, a lost one is re-queued
    max_restarts: int = 0
    name: str | None = None  # the tenant's own name for it (not unique)
    idle_stop_s: int | None = None  # stopped once its GPUs have been idle this long (`domain/idle.py`)
    # the workload saves its state on notice and resumes: preempted, it goes back to the queue instead of
    # ending, and the backfill queue may lend it GPUs that would idle while it waits (`borrowed`)
    checkpoints: bool = False
    # elastic: when it does not fit whole it may start on as few as this many GPUs in all (fewer on its
    # node, or fewer whole nodes), and the leader grows it toward its size as GPUs free (`wants_resize`)
    min_gpus: int | None = None


@dataclass(frozen=True, slots=True)
class Rental:
    id: str
    tenant_id: str
    state: str
    spec: RentalSpec
    created_at: datetime
    pending_reason: str | None = None
    price_micros_per_hour: int | None = None
    idempotency_key: str | None = None
    fingerprint: str = ""
    placed_at: datetime | None = None
    preempted_by: str | None = None  # the rental its capacity is promised to (state `preempting`)
    notice_deadline: datetime | None = None  # killed at this time unless it leaves first
    quote: Mapping[str, object] | None = None  # the price breakdown at creation (`suanli.app.billing`)
    # head of the backfill queue: its reserved start; a preemptor: its victims' last deadline
    expected_start_at: datetime | None = None
    reserved_nodes: tuple[str, ...] = ()  # the nodes held for its expected start (a head's drain, a booking)
    promise: tuple[NodeAllocation, ...] | None = None  # preemptor: where it was promised capacity
    time_limit_at: datetime | None = None  # placed with a max duration: when the leader stops it
    last_busy_at: datetime | None = None  # with `idle_stop_s`: its GPUs' last busy reading (`domain/idle.py`)
    borrowed: bool = False  # placed on lent GPUs (`checkpoints`): the queue may take them back with notice
    placements: int = 0  # times placed: a run belongs to one (`RentalRun.placement`), a re-placed one's anew
    # preempting in part (an elastic rental's trim): what it keeps at its notice deadline, and runs on with
    notice_keeps: tuple[NodeAllocation, ...] | None = None
    # resumed from a checkpoint: what is left of its max duration (for its full size), with a resumption's
    # `RESUME_S`; it declares that, and is stopped there, when placed again (None: all of it)
    time_left_s: float | None = None
    # pending: its reason in words with the figures of the last cycle ("quota 8 GPUs, 6 in use"); the
    # `pending` events say only when the reason changed, so their messages' figures may be old
    pending_message: str | None = None
    # elastic, its limit capped by a shrink at a start planned on its nodes: where the work it has left
    # would put its limit, so a growth before the cap gives that work back (`follow_size`)
    uncapped_limit_at: datetime | None = None
    # its rendezvous port (`SUANLI_MASTER_PORT`), chosen when placed: none other live on its nodes holds it
    master_port: int | None = None

    @property
    def kept_gpus(self) -> int | None:
        """The whole GPUs it runs on with after a trim's deadline (None: not preempted in part)."""
        return None if self.notice_keeps is None else round(sum(a.gpus for a in self.notice_keeps))


@dataclass(frozen=True, slots=True)
class RentalEvent:
    """One entry of a rental's timeline (and of its webhooks' deliveries): `kind` is one of `EVENT_KINDS`."""

    at: datetime
    kind: str
    reason: str | None = None
    message: str = ""

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:  # a new kind goes into EVENT_KINDS, where webhooks' filters check
            raise ValueError(f"unknown rental event kind {self.kind!r}")


@dataclass(frozen=True, slots=True)
class RentalView:
    """A rental with its allocation and timeline, for reading."""

    rental: Rental
    allocation: tuple[NodeAllocation, ...]
    events: tuple[RentalEvent, ...]
    rate_changes: tuple[tuple[datetime, int], ...] = ()  # (from, rate micros/h) since placement, if any
    charged_micros: int = 0  # what the meter has charged it so far (cash and grants), from the ledger


@dataclass(frozen=True, slots=True)
class RentalPage:
    """A page of rentals, newest first, and whether more (older) follow its last one."""

    views: tuple[RentalView, ...]
    more: bool


@dataclass(frozen=True, slots=True)
class Trial:
    """A dry run's answer (`Scheduler.trial`): the nodes a rental would start on now and its rate there, or
    how many lower-tier rentals it would give notice to, or the pending reason and message it would wait
    with; and how many rentals are waiting (the trial took it in the queue's order with them)."""

    nodes: tuple[str, ...]
    victims: int
    reason: str | None
    message: str | None
    waiting: int
    price_micros_per_hour: int | None = None
    covered_gpu_milli: int = 0  # of it, what the tenant's open contracts would cover there
    # waiting: when capacity would be reserved for it (it would head the backfill queue, or be booked by the
    # conservative queue), as its `expected_start_at` would show
    expected_start_at: datetime | None = None
    # waiting behind another blocked head, with no start of its own: that head's reserved start
    head_start_at: datetime | None = None
    gpus: float | None = None  # starting now, or promised: the GPUs it would hold (fewer when elastic)


@dataclass(frozen=True, slots=True)
class DryRun:
    """`RentalService.dry_run`: the trial; the rate it would pay (the trial's where it would start, else its
    quote's); its quote (the most it pays per hour, as created now); that rate over its declared max
    duration, when it has one."""

    trial: Trial
    price_micros_per_hour: int | None
    quote_micros_per_hour: int | None
    max_cost_micros: int | None = None


@dataclass(frozen=True, slots=True)
class Booking:
    """One booked slice position: UNIQUE (node, gpu_index, slot) in the store."""

    node: str
    gpu_index: int
    slot: int


@dataclass(frozen=True, slots=True)
class ContractRecord:
    id: str
    tenant_id: str
    gpu_model: str
    count: int
    region: str
    starts_at: datetime
    ends_at: datetime
    created_at: datetime
    price_micros: int = 0  # the prepaid price posted at signing


def domain_contract(record: ContractRecord) -> Contract:
    """The domain's view of a stored contract (what admission, holds and transfers check)."""
    return Contract(
        record.id, record.tenant_id, record.gpu_model, record.region, record.count,
        record.starts_at.timestamp(), record.ends_at.timestamp(),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ContractOffer:
    """A contract an operator offers one tenant at a negotiated prepaid price, open until `expires_at`: the
    tenant accepts it (signing the contract at that price, if the fleet can still honour it) or declines."""

    id: str
    tenant_id: str
    gpu_model: str
    count: int
    region: str
    starts_at: datetime
    ends_at: datetime
    price_micros: int
    expires_at: datetime
    created_at: datetime
    state: str = "open"  # open, accepted or declined; an open one past `expires_at` is expired
    contract_id: str | None = None  # the contract its acceptance signed
    decided_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class MaintenanceWindow:
    """An operator's scheduled maintenance of a node over [starts_at, ends_at): no placements there, its
    rentals get notice to end by the start, and its GPUs back no contract then."""

    id: str
    node: str
    starts_at: datetime
    ends_at: datetime
    reason: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class FleetDocument:
    version: int
    toml: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class BillableRental:
    """What the meter reads of a rental that holds or held an allocation."""

    rental: Rental
    node: str  # its first node (whose provider is paid)
    run_started_at: datetime | None  # the earliest start an agent reported
    run_ended_at: datetime | None  # the latest end an agent reported (a lost node: its last heartbeat)
    ended_at: datetime | None  # the time of its end event (stopped, failed, lost, preempted)
    stop_asked_at: datetime | None = None  # its latest `stopping` event: when a stop was asked


@dataclass(frozen=True, slots=True)
class HeldAllocation:
    """One node a rental held and when (`RentalRepo.held_allocations`): the meter pays each provider for the
    GPU-seconds on its own nodes. `booked_at` None: booked before migration 0016, when is unknown."""

    node: str
    gpu_milli: int
    booked_at: datetime | None
    released_at: datetime | None  # None while held (or released before 0016)


@dataclass(frozen=True, slots=True)
class MeterRental:
    """What one meter pass reads of a rental still open for billing (`RentalRepo.meter_page`): the fields of
    `BillableRental` the charge needs, without the spec (read in bulk, 100,000s per pass)."""

    id: str
    tenant_id: str
    state: str
    price_micros_per_hour: int | None
    quote_micros_per_hour: int | None  # the quote's final price, read only when there is no price
    placed_at: datetime | None
    notice_deadline: datetime | None
    node: str
    run_started_at: datetime | None
    run_ended_at: datetime | None
    ended_at: datetime | None
    heartbeat_at: datetime | None = None  # the latest heartbeat of its open runs' nodes: usage confirmed
    stop_asked_at: datetime | None = None  # its latest `stopping` event: when a stop was asked
    time_limit_at: datetime | None = None  # placement + its declared max duration: billed no further


@dataclass(frozen=True, slots=True)
class PriceEntry:
    """An admin's price book entry, per GPU-hour in micros: a list price (tier on_demand or reserved), an
    explicit MIG instance price (`mig_profile` set: micros per hour of one instance) or a spot floor (tier
    spot). `region` "*" is any region. In force from `effective_from` until a later entry of the same key;
    `effective_from` None (on input only) means now. `id` and `created_at` are set once stored."""

    gpu_model: str
    region: str
    tier: str
    price_micros_per_gpu_hour: int
    effective_from: datetime | None = None
    source: str = ""
    mig_profile: str | None = None
    id: int | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class MoneyFacts:
    """What pricing and the funds check read about a tenant at once: one database round trip per new rental.

    `price_stamp` keys the cached price book; the counts say whether plans and contracts need reading at all.
    """

    price_stamp: tuple[int, int]
    plan_count: int
    contract_count: int
    cash_micros: int
    grants_micros: int
    terms: PaymentTerms | None  # None: the tenant has no terms of its own (the platform default applies)


@dataclass(frozen=True, slots=True)
class Webhook:
    """A tenant's URL that gets its rentals' events as they happen (`app/webhooks.py`)."""

    id: str
    tenant_id: str
    url: str
    secret: str  # signs each delivery (HMAC-SHA256); shown to the tenant once, at creation
    created_at: datetime
    after_event_id: int  # the last rental event sent to it (or before it was made: none older is sent)
    failures: int = 0  # deliveries failed in a row
    retry_at: datetime | None = None  # after a failure: not tried again before this
    last_error: str | None = None
    delivered_at: datetime | None = None
    event_kinds: tuple[str, ...] = ()  # the event kinds it gets (`EVENT_KINDS`); empty: every kind


@dataclass(frozen=True, slots=True)
class SentEvent:
    """A rental event as a webhook delivers it: its id orders and dedups them."""

    id: int
    rental_id: str
    event: RentalEvent
