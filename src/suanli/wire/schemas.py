"""Request and response bodies of the REST API, shared by `suanli.api` and `suanli.client`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from suanli.wire.images import image_reference

Role = Literal["admin", "provider", "tenant"]
TierName = Literal["reserved", "on_demand", "spot"]
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


LATEST_MOMENT = datetime(9000, 1, 1, tzinfo=UTC)  # far beyond any rental, and a year plus a month from 9999
MAX_DURATION_S = 10 * 366 * 86_400  # a declared run time: ten years at most (a start must stay a date)
# per node: far above any server, well inside a 64-bit column (PostgreSQL BIGINT) and exact in a float
MAX_CPU_MILLI, MAX_MEMORY_MIB = 10**9, 10**12
MAX_BID_MICROS = 10**15  # a bid per GPU-hour (a billion units)
MAX_MIN_GPUS = 64 * 256  # a least size: whole GPUs per node times nodes, at most
# a share is whole percents of a GPU: the unit the scheduler books (app.booking.SHARE_UNIT_MILLI)
SHARE_STEP_MILLI = 10
# what Linux's execve takes, which starts every workload and exec: one argument or `NAME=value` of at most
# MAX_ARG_STRLEN (131,072 bytes with its NUL), all of them (with their NULs) within ARG_MAX, 2 MiB under the
# default 8 MiB stack; a rental's command and env get half of that, the rest is the agent's own environment
EXEC_STRING_MAX_BYTES = 131_071
EXEC_TOTAL_MAX_BYTES = 1_048_576


def _in_range(moment: datetime) -> datetime:
    """A time the platform can store and compute with (UTC, before the year 9000)."""
    try:
        utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:
        raise ValueError("must be before the year 9000 (UTC)") from None
    if utc >= LATEST_MOMENT:
        raise ValueError("must be before the year 9000 (UTC)")
    return moment


TENANT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$"
RENTAL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
NAME_QUERY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*\*?$"  # a rental name, or a prefix of one ending in `*`
MONTH_PATTERN = r"^[0-9]{4}-[0-9]{2}$"
PAYOUT_CURSOR_PATTERN = r"^.+/[^/]*$"  # provider/rental: a provider name, then a rental id (no '/')
# what a value refused by a pattern should look like, said in words rather than as the regex
PATTERN_TEXT = {
    TENANT_NAME_PATTERN: "use letters, digits, spaces, '.', '_' and '-', starting with a letter or digit",
    RENTAL_NAME_PATTERN: "use letters, digits, '.', '_' and '-', starting with a letter or digit",
    NAME_QUERY_PATTERN: "a name (letters, digits, '.', '_' and '-', starting with a letter or digit), or "
    "the start of one followed by '*'",
    MONTH_PATTERN: "a month as yyyy-mm, e.g. 2026-12",
    PAYOUT_CURSOR_PATTERN: "a payouts page's cursor, provider/rental, as the Link header's next URL gives it",
}


BOUNDS = {
    "less_than_equal": ("at most", "le"),
    "greater_than_equal": ("at least", "ge"),
    "less_than": ("under", "lt"),
    "greater_than": ("over", "gt"),
}


def problem_text(problem: Mapping[str, Any], *, money_in_units: bool = False) -> str:
    """The message for one pydantic error, in words: for a value its pattern refused, what the value should
    be; for one out of bounds, the bound with its unit (a field in micros or seconds, by its name), money in
    currency units when `money_in_units` (the CLI, whose options take units); for one off its step, the
    step."""
    context = problem.get("ctx") or {}
    kind = str(problem.get("type", ""))
    if kind == "string_pattern_mismatch" and context.get("pattern") in PATTERN_TEXT:
        return PATTERN_TEXT[context["pattern"]]
    location = problem.get("loc") or ()
    name = str(location[-1]) if location else ""
    if kind in BOUNDS and isinstance(context.get(BOUNDS[kind][1]), int | float):
        words, key = BOUNDS[kind]
        limit = context[key]
        if "micros" in name:
            return f"{words} {limit / 1_000_000:,.4f}" if money_in_units else f"{words} {limit} micros"
        if name.endswith("_s"):
            days = limit / 86_400
            whole_days = limit >= 86_400 and days == int(days)
            return f"{words} {days:g} days" if whole_days else f"{words} {limit:g} s"
    if kind == "multiple_of" and isinstance(step := context.get("multiple_of"), int):
        unit = " milli (1% of a GPU)" if name == "share_milli" else ""
        return f"a multiple of {step}{unit}"
    message = str(problem.get("msg", "invalid value"))
    # a validator's own words, without pydantic's prefix
    return message.removeprefix("Value error, ") if kind == "value_error" else message


# a time in a request: a clear 4xx, never an overflow later (`+ 1 year`, epoch seconds, `astimezone`)
Moment = Annotated[datetime, AfterValidator(_in_range)]
# a container image: a catalogue key or a reference in the distribution spec's grammar (422 otherwise)
ImageName = Annotated[str, AfterValidator(image_reference)]


def exec_bytes(strings: list[str]) -> int:
    """What `strings` take of execve's ARG_MAX: each one's UTF-8 bytes and its NUL."""
    return sum(len(text.encode()) + 1 for text in strings)


def check_exec_strings(strings: list[str], kind: str, spent_bytes: int = 0) -> None:
    """Raise unless execve takes each of `strings` (one `kind`: an argument, a NAME=value) and, after the
    `spent_bytes` already taken, all of them together (it would fail with E2BIG on the node)."""
    for text in strings:
        if (size := len(text.encode())) > EXEC_STRING_MAX_BYTES:
            raise ValueError(
                f"{kind} of {size:,} bytes: execve takes at most {EXEC_STRING_MAX_BYTES:,} bytes in one"
            )
    if (total := spent_bytes + exec_bytes(strings)) > EXEC_TOTAL_MAX_BYTES:
        raise ValueError(
            f"the command and env take {total:,} bytes (each string's UTF-8 and its NUL): at most "
            f"{EXEC_TOTAL_MAX_BYTES:,} bytes"
        )


def _argv_fits_execve(command: list[str]) -> list[str]:
    check_exec_strings(command, "an argument")
    return command


# a command line the agent starts with execve: each argument and all of them within its limits (422 otherwise)
Argv = Annotated[list[str], AfterValidator(_argv_fits_execve)]


def _takes_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold a JSON `true`/`false` (a nested model checks its own fields)."""
    if annotation is bool or annotation is Any:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_takes_bool(arg) for arg in get_args(annotation))


def _holds(value: Any, found: Callable[[Any], bool]) -> bool:
    """Whether `value`, or anything in the lists and mappings it holds (keys included), is `found`."""
    if found(value):
        return True
    if isinstance(value, Mapping):
        return any(_holds(key, found) or _holds(item, found) for key, item in value.items())
    return isinstance(value, list | tuple) and any(_holds(item, found) for item in value)


def _nests_model(annotation: Any) -> bool:
    """Whether a field of this type holds a nested model, which checks its own fields' text."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_nests_model(arg) for arg in get_args(annotation))


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _has_nul(value: Any) -> bool:
    return isinstance(value, str) and "\x00" in value


# half of a UTF-16 pair alone (JSON's "\ud800"): Python holds it, but no UTF-8 text, column or answer can
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# what printed text cannot keep as it is: a NUL or a lone surrogate (each becomes one U+FFFD)
_UNKEEPABLE_IN_OUTPUT = re.compile("[\x00\ud800-\udfff]")


def _has_lone_surrogate(value: Any) -> bool:
    return isinstance(value, str) and LONE_SURROGATE.search(value) is not None


def escape_lone_surrogates(value: Any) -> Any:
    """`value` with each lone surrogate in its text (lists and mappings, keys included) written as its
    escape (`\\ud800`): what an answer sends of a row stored before requests were checked for them."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, Mapping):
        return {escape_lone_surrogates(key): escape_lone_surrogates(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(escape_lone_surrogates(item) for item in value)
    return value


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # fields of text a workload printed: a NUL or a lone surrogate there becomes U+FFFD (one character for
    # one), not a refusal
    nul_replaced: ClassVar[frozenset[str]] = frozenset()
    # what a client or an agent sends (`RequestModel`) refuses a lone surrogate; an answer escapes one
    refuses_lone_surrogates: ClassVar[bool] = False

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers_or_unstorable_text(cls, value: Any, info: ValidationInfo) -> Any:
        """A JSON `true` is never a number: pydantic's lax mode reads it as 1 (a 1-micro credit, a quota of
        1), and its strict mode would refuse the ISO times and arrays JSON sends as strings and lists. And no
        text holds a NUL (U+0000): PostgreSQL stores none, in text or JSON; nor a lone surrogate, which no
        UTF-8 answer can carry (every answer that quoted one failed, a node's heartbeat for good)."""
        if info.field_name is None:
            return value
        annotation = cls.model_fields[info.field_name].annotation
        if _holds(value, _is_bool) and not _takes_bool(annotation):
            raise ValueError("a number or text, not true or false")
        if info.field_name in cls.nul_replaced and isinstance(value, str):
            return _UNKEEPABLE_IN_OUTPUT.sub("\ufffd", value)
        if _holds(value, _has_nul):
            raise ValueError("text with a NUL character (U+0000), which nothing here holds")
        if not _nests_model(annotation) and _holds(value, _has_lone_surrogate):
            if cls.refuses_lone_surrogates:
                raise ValueError("text with a lone surrogate (U+D800 to U+DFFF), which UTF-8 cannot encode")
            return escape_lone_surrogates(value)
        return value


class RequestModel(WireModel):
    """What a client or an agent sends: text with a lone surrogate is refused (422 naming the field)."""

    refuses_lone_surrogates = True


class ErrorDetail(WireModel):
    nul_replaced = frozenset({"code", "message", "field"})  # a refusal may quote the NUL it refuses
    code: str = Field(description="Machine-readable code, e.g. not_found, invalid, conflict, unauthorized.")
    message: str
    field: str | None = Field(default=None, description="The request field at fault, when there is one.")


class ErrorResponse(WireModel):
    error: ErrorDetail


# --- tenants and keys ---------------------------------------------------------------------------------


class TenantCreateRequest(RequestModel):
    name: str = Field(min_length=1, max_length=100, pattern=TENANT_NAME_PATTERN)
    role: Role = "tenant"


class TenantResponse(WireModel):
    id: str
    name: str
    role: Role
    created_at: datetime


class KeyCreateRequest(RequestModel):
    label: str = Field(default="", max_length=100)


class KeyResponse(WireModel):
    id: str
    tenant_id: str
    label: str
    created_at: datetime
    revoked: bool
    secret: str | None = Field(default=None, description="The key itself: shown once, at creation.")


class MeResponse(WireModel):
    tenant: TenantResponse
    key_id: str


# --- fleet --------------------------------------------------------------------------------------------


class FleetResponse(WireModel):
    regions: int
    nodes: int
    gpus: int
    short_contracts: list[str] = Field(
        default_factory=list,
        description="Forced: the signed contracts the new fleet leaves short of GPUs, or shorter.",
    )
    shortfalls: list[ContractShortfallResponse] = Field(
        default_factory=list,
        description="Forced: each of those contracts with how short it is left, and when.",
    )


class MigInstanceResponse(WireModel):
    gpu_index: int
    start_slot: int
    profile: str
    busy: bool


class NodeResponse(WireModel):
    name: str
    region: str
    topology: str
    gpu_model: str
    gpu_count: int
    gpu_mode: Literal["whole", "mig", "shared"]
    cpu_milli: int
    memory_mib: int
    provider: str
    labels: dict[str, str]
    schedulable: bool
    free_gpu_milli: int = Field(description="Idle GPU capacity in milli-GPUs (1000 = one GPU).")
    maintenance_until: datetime | None = Field(
        default=None,
        description="While a maintenance window (or its notice lead) keeps the node out: the window's end.",
    )
    mig_instances: list[MigInstanceResponse] = Field(
        default_factory=list,
        description="A MIG node's instances as the scheduler lays them out (busy: a rental holds it).",
    )
    mig_host_gpus: list[int] = Field(
        default_factory=list,
        description="The GPUs laid out as their host's agent reported them (instances made by hand or by "
        "earlier rentals); the others as the fleet declares.",
    )
    gpu_mismatch: str | None = Field(
        default=None,
        description="While the GPUs its agent's probe reports are not the ones the fleet declares (model, "
        "count): how they differ. The node is cordoned meanwhile, and back once a report matches.",
    )


class ContractShortfallResponse(WireModel):
    """A signed contract a forced drain or maintenance window leaves short of GPUs, and by how much."""

    contract_id: str
    tenant_id: str = Field(description="The contract's holder.")
    gpu_model: str
    region: str
    count: int = Field(description="GPUs the contract holds.")
    starts_at: datetime
    ends_at: datetime
    short_at: datetime = Field(
        description="When its pool (model and region) is shortest inside the window (the first such instant)."
    )
    contracted_gpus: int = Field(
        description="GPUs the pool's contracts open then hold, this one's among them."
    )
    in_service_gpus: int = Field(description="GPUs of the pool left in service then.")
    short_gpus: int = Field(
        description="contracted_gpus - in_service_gpus: the GPUs sold that are not there."
    )


class NodeDrainResponse(NodeResponse):
    """A node just drained, with the signed contracts a forced drain left short."""

    short_contracts: list[str] = Field(
        default_factory=list, description="Forced: the contracts this drain leaves short of GPUs."
    )
    shortfalls: list[ContractShortfallResponse] = Field(
        default_factory=list,
        description="Forced: each of those contracts with how short it is left, and when.",
    )


# --- offers -------------------------------------------------------------------------------------------


class OfferResponse(WireModel):
    gpu_model: str
    region: str
    jurisdiction: str
    tier: TierName
    interconnect: str | None
    free_gpus: int = Field(
        description="Whole idle GPUs of this model in this region; on a row with a `mig_profile`, the "
        "instances of that profile that could run at once now (each profile counted on its own)."
    )
    max_gpus_per_node: int = Field(description="The most of those on one node.")
    nodes_with_free_gpus: int
    price_micros_per_gpu_hour: int = Field(
        description="One whole GPU per hour if placed now: the price book's list price, or for spot the "
        "pool's spot price at its current utilization (a spot rental pays it, never above its bid), less "
        "the searching tenant's plan discount (`plan_discount_bp`)."
    )
    mig_profile: str | None = Field(None, description="A MIG profile: the row offers instances of it.")
    unit_price_micros_per_hour: int = Field(
        0,
        description="One unit per hour: a whole GPU (a share pays its fraction), or one instance of "
        "`mig_profile`.",
    )
    shares: bool = Field(
        False,
        description="The row offers shares of a GPU: `free_gpus` counts the GPUs with room for one (some "
        "compute and memory free), `largest_share_milli` the largest share one of them can take (the "
        "compute it has free, at most 990: a whole GPU is rented as a count).",
    )
    largest_share_milli: int | None = None
    share_memory_mib: int | None = Field(
        None,
        description="On a shares row: the GPU memory (MiB) free on a GPU with `largest_share_milli` free "
        "(the most among such GPUs).",
    )
    plan_discount_bp: int = Field(
        0,
        description="The searching tenant's plan discount (basis points) on this tier, already taken off "
        "the prices: a one-unit rental placed now is quoted at `unit_price_micros_per_hour`.",
    )


# --- rentals ------------------------------------------------------------------------------------------


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


# --- contracts ----------------------------------------------------------------------------------------


class ContractCreateRequest(RequestModel):
    gpu_model: str
    count: int = Field(ge=1, le=100_000)
    region: str
    starts_at: Moment
    ends_at: Moment
    tenant_id: str | None = Field(default=None, description="Admins may sign for a tenant; else the caller.")


class ContractTransferRequest(RequestModel):
    to_tenant_id: str


class ContractResponse(WireModel):
    id: str
    tenant_id: str
    gpu_model: str
    count: int
    region: str
    starts_at: datetime
    ends_at: datetime
    created_at: datetime
    price_micros: int = Field(
        default=0, description="Prepaid at signing: the reserved list price x GPUs x window hours."
    )


class ContractQuoteResponse(WireModel):
    tenant_id: str
    gpu_model: str
    count: int
    region: str
    starts_at: datetime
    ends_at: datetime
    price_micros_per_gpu_hour: int = Field(description="The reserved list price at the window's start.")
    price_micros: int = Field(description="Prepaid at signing: that price x GPUs x window hours.")
    payable: bool = Field(description="Whether the holder's cash and payment terms cover the price now.")


class ContractOfferRequest(ContractCreateRequest):
    """Admin: offer a tenant a contract at a negotiated prepaid price."""

    tenant_id: str = Field(max_length=40, description="The tenant the offer is for.")  # type: ignore[assignment]
    price_micros: int = Field(ge=0, le=10**15, description="The whole contract's prepaid price.")
    expires_at: Moment | None = Field(
        default=None, description="Open until then: a week from now when not given, never past ends_at."
    )


class ContractOfferResponse(ContractResponse):
    price_micros: int = Field(description="The negotiated price, prepaid when the tenant accepts.")
    expires_at: datetime
    state: Literal["open", "accepted", "declined", "expired"]
    contract_id: str | None = Field(default=None, description="The contract its acceptance signed.")
    decided_at: datetime | None = None


class MaintenanceCreateRequest(RequestModel):
    node: str = Field(max_length=200, description="The node to take out of service.")
    starts_at: Moment
    ends_at: Moment
    reason: str = Field(default="", max_length=500)
    force: bool = Field(
        default=False, description="Schedule it even when it leaves contracts short (they are named)."
    )


class MaintenanceResponse(WireModel):
    id: str
    node: str
    starts_at: datetime
    ends_at: datetime
    reason: str
    created_at: datetime
    short_contracts: list[str] = Field(
        default_factory=list, description="Forced: the contracts this window leaves short of GPUs."
    )
    shortfalls: list[ContractShortfallResponse] = Field(
        default_factory=list,
        description="Forced: each of those contracts with how short it is left, and when.",
    )


# --- webhooks -------------------------------------------------------------------------------------------


class WebhookCreateRequest(RequestModel):
    url: str = Field(
        min_length=1,
        max_length=2000,
        description="http(s) URL that gets your rentals' events as they happen, POSTed as JSON "
        "(`{webhook_id, events: [{id, rental_id, at, kind, reason, message}]}`, oldest first, at least once: "
        'dedup by `id`), signed in `X-Suanli-Signature: t=<unix s>,sha256=<HMAC-SHA256 of "<t>." + body '
        "under the secret>` (refuse a `t` more than 5 min from your clock: a replay).",
    )
    events: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="The event kinds it gets (created, placed, running, restarted, stopped, failed, "
        "preempting, preempted, lost, requeued, ...); empty: every kind.",
    )


class WebhookChangeRequest(RequestModel):
    url: str | None = Field(
        default=None, min_length=1, max_length=2000, description="A new URL (None: as is)."
    )
    events: list[str] | None = Field(
        default=None, max_length=20, description="New event kinds ([]: every kind; None: as they are)."
    )


class WebhookResponse(WireModel):
    id: str
    url: str
    created_at: datetime
    failures: int = Field(description="Deliveries failed in a row (0: the last one went through).")
    retry_at: datetime | None = Field(default=None, description="After a failure: the next try.")
    last_error: str | None = None
    delivered_at: datetime | None = Field(default=None, description="The last delivery that went through.")
    secret: str | None = Field(default=None, description="The signing secret: shown once, at creation.")
    events: list[str] = Field(default_factory=list, description="The event kinds it gets; empty: every kind.")


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
