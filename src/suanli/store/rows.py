"""Database rows (SQLAlchemy 2 typed mappings). `BookingRow`'s primary key (node, gpu_index, slot) makes a
double booking of a slice position impossible, whichever process writes it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on the way out, on SQLite (which drops the zone) as on PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class TenantRow(Base):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    role: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


Index("uq_tenants_lower_name", func.lower(TenantRow.name), unique=True)  # `acme` and `ACME` are one tenant


class ApiKeyRow(Base):
    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    label: Mapped[str] = mapped_column(String(100))
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)


class FleetDocumentRow(Base):
    __tablename__ = "fleet_documents"
    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    toml: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class NodeRow(Base):
    __tablename__ = "nodes"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    schedulable: Mapped[bool] = mapped_column(Boolean, default=True)


class RentalRow(Base):
    __tablename__ = "rentals"
    __table_args__ = (
        UniqueConstraint("tenant_id", "idempotency_key", name="uq_rentals_tenant_idempotency_key"),
        Index("ix_rentals_state_created", "state", "created_at"),
        Index("ix_rentals_tenant_name", "tenant_id", "name"),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    state: Mapped[str] = mapped_column(String(16))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    pending_reason: Mapped[str | None] = mapped_column(String(40), nullable=True)
    # pending: the reason in words, with its figures as the leader last worked them out (0044)
    pending_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    price_micros_per_hour: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    fingerprint: Mapped[str] = mapped_column(String(64), default="")
    placed_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    preempted_by: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    notice_deadline: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # preempting in part (an elastic rental's trim): the placement it keeps at the deadline (0042)
    notice_keeps: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    # pending at the head of the backfill queue: its reserved start, as the leader last worked it out (0011)
    expected_start_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # pending: a preemptor's promised placement, and the nodes drained for the blocked head (0013)
    promise: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    reserved_nodes: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    quote: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # the container image the tenant named (0017): a catalogue key or an image reference; the spec's `image`
    image: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # set by the meter once the rental has ended and its final charge is posted (0006): not metered again
    billing_closed_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # placed with a declared max duration: when the leader stops it (placement + the duration; 0025)
    time_limit_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True, index=True)
    # with idle_stop_s in its spec (0032): the last heartbeat that read any of its GPUs busy
    last_busy_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # the tenant's name for it, as in its spec (0028): `GET /v1/rentals?name=` filters on it
    name: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # placed on GPUs the backfill queue lent it (it checkpoints): taken back with notice when needed (0040)
    borrowed: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    # how many times it was placed (0041): its runs name the placement they belong to
    placements: Mapped[int] = mapped_column(Integer, server_default="0")
    # back in the queue from a checkpoint: what is left of its max duration (0043)
    time_left_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # an elastic rental whose limit a shrink capped at a start planned on its nodes: its limit uncapped (0045)
    uncapped_limit_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # its rendezvous port, chosen when placed so that no other live rental on its nodes holds it (0046)
    master_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # when a change the API shows was last written, by the server's wall clock (0054, which stamped the rows
    # already there with its time): set by `SqlRentals.add`, by every UPDATE of the row unless the statement
    # keeps it, and by `SqlRentals.touch` (an event, an allocation); a charge's is in `rental_charge_stamps`
    updated_at: Mapped[datetime | None] = mapped_column(
        UtcDateTime(), nullable=True, onupdate=lambda: datetime.now(UTC)
    )


# a tenant's rentals newest first, a page past a (created_at, id) keyset at a time: GET /v1/rentals (0050)
Index("ix_rentals_tenant_newest", RentalRow.tenant_id, RentalRow.created_at.desc(), RentalRow.id)
# every tenant's, for an admin (0053)
Index("ix_rentals_newest", RentalRow.created_at.desc(), RentalRow.id)
# what changed since a moment: GET /v1/rentals?updated_after= (0054), a tenant's and every tenant's
Index("ix_rentals_tenant_updated", RentalRow.tenant_id, RentalRow.updated_at)
Index("ix_rentals_updated", RentalRow.updated_at)


class RentalChargeStampRow(Base):
    """When a live rental's charge to date last changed as the API shows it (0055): the meter's stamps, kept
    off `rentals` (a row of its own, three narrow indexes) because restamping the wide row rewrote its twelve
    indexes for every rental on the meter's first pass. `GET /v1/rentals?updated_after=` reads both."""

    __tablename__ = "rental_charge_stamps"
    rental_id: Mapped[str] = mapped_column(String(40), primary_key=True)  # no foreign key: see 0055
    tenant_id: Mapped[str] = mapped_column(String(40))
    stamped_at: Mapped[datetime] = mapped_column(UtcDateTime())


Index("ix_rental_charge_stamps_tenant", RentalChargeStampRow.tenant_id, RentalChargeStampRow.stamped_at)
Index("ix_rental_charge_stamps_stamped", RentalChargeStampRow.stamped_at)


class RentalEventRow(Base):
    __tablename__ = "rental_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rental_id: Mapped[str] = mapped_column(ForeignKey("rentals.id"), index=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    kind: Mapped[str] = mapped_column(String(40))
    reason: Mapped[str | None] = mapped_column(String(40), nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")


class AllocationRow(Base):
    __tablename__ = "allocations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rental_id: Mapped[str] = mapped_column(ForeignKey("rentals.id"), index=True)
    ordinal: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(200))
    cpu_milli: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    released: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    # when it was booked and released (0016; empty on rows from before): the meter's provider shares
    booked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    released_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class SliceRow(Base):
    __tablename__ = "slices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    allocation_id: Mapped[int] = mapped_column(ForeignKey("allocations.id"), index=True)
    ordinal: Mapped[int] = mapped_column(Integer)
    gpu_index: Mapped[int] = mapped_column(Integer)
    milli: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    mig_profile: Mapped[str | None] = mapped_column(String(20), nullable=True)
    mig_start: Mapped[int | None] = mapped_column(Integer, nullable=True)


class BookingRow(Base):
    """One booked slice position; see `suanli.app.booking` for what each GPU mode books."""

    __tablename__ = "bookings"
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    rental_id: Mapped[str] = mapped_column(ForeignKey("rentals.id"), index=True)
    allocation_id: Mapped[int] = mapped_column(ForeignKey("allocations.id"), index=True)


class ContractRow(Base):
    __tablename__ = "contracts"
    __table_args__ = (
        Index(
            "ix_contracts_coverage_to_follow",
            "coverage_stage",
            postgresql_where=text("coverage_stage < 2"),
            sqlite_where=text("coverage_stage < 2"),
        ),
        Index(
            "ix_contracts_to_recognize",
            "starts_at",
            postgresql_where=text("recognized_micros < price_micros"),
            sqlite_where=text("recognized_micros < price_micros"),
        ),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    gpu_model: Mapped[str] = mapped_column(String(60))
    count: Mapped[int] = mapped_column(Integer)
    region: Mapped[str] = mapped_column(String(100))
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    price_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    # how far the meter loop's coverage job has followed the window: 0 not yet, 1 its start, 2 its end
    coverage_stage: Mapped[int] = mapped_column(SmallInteger, default=0, server_default="0")
    # how much of `price_micros` the meter loop has recognized as earned: the contract is read until all is
    recognized_micros: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


# --- agents (issue 6): join tokens, registered nodes, workload runs, logs --------------------------------


class JoinTokenRow(Base):
    """A single-use join token for one node name; stored as a digest."""

    __tablename__ = "join_tokens"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_by: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())
    used_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class AgentNodeRow(Base):
    """The agent of one node: its key digest, inventory, last heartbeat and whether it is up."""

    __tablename__ = "agent_nodes"
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    key_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    registered_at: Mapped[datetime] = mapped_column(UtcDateTime())
    inventory: Mapped[dict[str, Any]] = mapped_column(JSON)
    telemetry: Mapped[list[Any]] = mapped_column(JSON, default=list)
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    up: Mapped[bool] = mapped_column(Boolean, default=True)
    cordoned_by_agent: Mapped[bool] = mapped_column(Boolean, default=False)
    # why the GPUs its agent reports are not the fleet's (the node is cordoned meanwhile); null: they match
    gpu_mismatch: Mapped[str | None] = mapped_column(String(500), nullable=True)
    runs_images: Mapped[bool | None] = mapped_column(Boolean, nullable=True)  # its executor; null: not said
    # the host's MIG instances as last reported, {"<GPU index>": [[start, profile, busy], ...]}; null: unsaid
    mig_layouts: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # bumped on every change of `mig_layouts`: the leader reads the layouts again only when a sum moved
    mig_layouts_revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class GpuMinuteRow(Base):
    """One GPU's heartbeat readings in one minute (`suanli.app.gpu_history`): sums and counts for the means,
    the most memory used; kept a week."""

    __tablename__ = "gpu_minutes"
    __table_args__ = (Index("ix_gpu_minutes_node_minute", "node", "minute"),)
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    gpu_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    minute: Mapped[datetime] = mapped_column(UtcDateTime(), primary_key=True)
    utilization_sum: Mapped[float] = mapped_column(Float, default=0.0)
    utilization_count: Mapped[int] = mapped_column(Integer, default=0)
    memory_max_mib: Mapped[int | None] = mapped_column(Integer, nullable=True)
    power_sum_w: Mapped[float] = mapped_column(Float, default=0.0)
    power_count: Mapped[int] = mapped_column(Integer, default=0)


class RentalRunRow(Base):
    """A rental's workload on one node in one of its placements, as its agent reported it; `ended_at` is
    where billing stops."""

    __tablename__ = "rental_runs"
    rental_id: Mapped[str] = mapped_column(ForeignKey("rentals.id"), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    # the rental's `placements` when it ran (0041): placed again on the node, it has a new run there
    placement: Mapped[int] = mapped_column(Integer, primary_key=True, server_default="0")
    state: Mapped[str] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # restarts its agent made by itself after failures (a one-node on-failure rental), as last reported
    restarts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    energy_j: Mapped[float] = mapped_column(Float, default=0.0)  # measured GPU energy attributed to it
    measured_s: Mapped[float] = mapped_column(Float, default=0.0)  # the seconds those samples cover
    measured_gpu_s: Mapped[float] = mapped_column(Float, default=0.0)  # those seconds x its GPUs there


class RentalExecRow(Base):
    """A one-off command a tenant runs inside its running rental on one node (`suanli exec`): queued until
    that node's agent takes it from its heartbeat answer, then its exit code and the end of its output."""

    __tablename__ = "rental_execs"
    __table_args__ = (Index("ix_rental_execs_node_state", "node", "state"),)
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    rental_id: Mapped[str] = mapped_column(ForeignKey("rentals.id"), index=True)
    node: Mapped[str] = mapped_column(String(200))
    command: Mapped[list[str]] = mapped_column(JSON)
    timeout_s: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))  # queued, running, exited, failed, lost
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    output: Mapped[str] = mapped_column(Text, default="")
    output_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    # characters of output the command printed so far (`output` keeps the last of them)
    output_chars: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    message: Mapped[str] = mapped_column(String(500), default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # attached: its input and output stream through the server (`suanli exec -i`), on a terminal with `tty`
    stdin: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    tty: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    port: Mapped[int | None] = mapped_column(Integer, nullable=True)  # a port forward: no command
    # attached without a terminal: stderr in frames of its own
    separate_stderr: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))


class RentalLogRow(Base):
    """One chunk of a rental's output from one node; `node_offset` is its byte offset in that node's log."""

    __tablename__ = "rental_logs"
    __table_args__ = (
        UniqueConstraint("rental_id", "node", "node_offset", name="uq_rental_logs_chunk"),
        Index("ix_rental_logs_rental_char", "rental_id", "char_start"),
        Index("ix_rental_logs_node_char", "rental_id", "node", "node_char_start"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rental_id: Mapped[str] = mapped_column(ForeignKey("rentals.id"), index=True)
    node: Mapped[str] = mapped_column(String(200))
    node_offset: Mapped[int] = mapped_column(BigInteger)
    size_bytes: Mapped[int] = mapped_column(Integer)
    data: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    # where `data` starts, in characters, in the rental's output (every node's, as it came) and in its node's
    # (0024; set on every chunk stored)
    char_start: Mapped[int | None] = mapped_column(BigInteger)
    node_char_start: Mapped[int | None] = mapped_column(BigInteger)
    chars: Mapped[int | None] = mapped_column(Integer)


# --- billing (issue 5): the hash-chained ledger; append-only (no update or delete path) -------------------


class LedgerTransactionRow(Base):
    """One balanced transaction; `postings_sum` (CHECK = 0) and UNIQUE `prev_hash` (no fork): see 0004."""

    __tablename__ = "ledger_transactions"
    __table_args__ = (
        CheckConstraint("postings_sum = 0", name="ck_ledger_transactions_balanced"),
        UniqueConstraint("key", name="uq_ledger_transactions_key"),
        UniqueConstraint("prev_hash", name="uq_ledger_transactions_prev_hash"),
        UniqueConstraint("hash", name="uq_ledger_transactions_hash"),
        Index("ix_ledger_transactions_ref", "ref"),
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))
    at_s: Mapped[int] = mapped_column(BigInteger)
    ref: Mapped[str] = mapped_column(String(60))
    memo: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
    postings_sum: Mapped[int] = mapped_column(BigInteger)


class LedgerPostingRow(Base):
    __tablename__ = "ledger_postings"
    __table_args__ = (
        CheckConstraint("amount_micros <> 0", name="ck_ledger_postings_non_zero"),
        Index("ix_ledger_postings_tx_seq", "tx_seq"),
        Index("ix_ledger_postings_account", "owner", "account_kind"),
        Index("ix_ledger_postings_owner_seq", "owner", "tx_seq"),  # a tenant's ledger pages (keyset)
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tx_seq: Mapped[int] = mapped_column(ForeignKey("ledger_transactions.seq"))
    account_kind: Mapped[str] = mapped_column(String(24))
    owner: Mapped[str] = mapped_column(String(200))
    amount_micros: Mapped[int] = mapped_column(BigInteger)


class LedgerBalanceRow(Base):
    """Each account's balance, kept in the transaction that appends its postings (see migration 0008)."""

    __tablename__ = "ledger_balances"
    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    account_kind: Mapped[str] = mapped_column(String(24), primary_key=True)
    balance_micros: Mapped[int] = mapped_column(BigInteger)


class LedgerPayoutLineRow(Base):
    """A provider's payable per rental (a transaction's `ref`): the sum and count of its postings, kept in the
    transaction that appends them (see migration 0051); a payouts page is a keyset range on it."""

    __tablename__ = "ledger_payout_lines"
    __table_args__ = (
        Index(
            "ix_ledger_payout_lines_open",
            "owner",
            "ref",
            postgresql_where=text("amount_micros <> 0"),
            sqlite_where=text("amount_micros <> 0"),
        ),
    )
    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    ref: Mapped[str] = mapped_column(String(60), primary_key=True)
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    transactions: Mapped[int] = mapped_column(Integer)


# --- plans, grants, revenue reports, payment terms, outages (issue 5): see migration 0005 ----------------


class TenantPlanRow(Base):
    """A plan a tenant is on over [starts_at, ends_at): membership or revenue share (pay as you go: none)."""

    __tablename__ = "tenant_plans"
    __table_args__ = (
        Index(
            "ix_tenant_plans_window_to_follow",
            "window_stage",
            postgresql_where=text("window_stage < 2"),
            sqlite_where=text("window_stage < 2"),
        ),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    discount_bp: Mapped[int] = mapped_column(Integer)
    fee_micros: Mapped[int] = mapped_column(BigInteger)
    revenue_share_bp: Mapped[int] = mapped_column(Integer)
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    # how far the meter loop has followed the window (fee and re-pricing): 0 not yet, 1 its start, 2 its end
    window_stage: Mapped[int] = mapped_column(SmallInteger, default=0, server_default="0")


class GrantRow(Base):
    """Credits given to a tenant (the ledger holds the money); `expires_at` ends what is left of it."""

    __tablename__ = "grants"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    amount_micros: Mapped[int] = mapped_column(BigInteger)
    granted_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    memo: Mapped[str] = mapped_column(Text, default="")


class RevenueReportRow(Base):
    """Revenue a revenue-share tenant reports for one month (`yyyy-mm`); one report per month."""

    __tablename__ = "revenue_reports"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    month: Mapped[str] = mapped_column(String(7), primary_key=True)
    revenue_micros: Mapped[int] = mapped_column(BigInteger)
    reported_at: Mapped[datetime] = mapped_column(UtcDateTime())


class TenantLimitsRow(Base):
    """A tenant's GPU quotas (model name or `*` -> most GPUs held at once) and daily / monthly spend caps (the
    operator's), and its own daily / monthly budget (the tenant's)."""

    __tablename__ = "tenant_limits"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    gpu_quota: Mapped[dict[str, Any]] = mapped_column(JSON)
    daily_cap_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    monthly_cap_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    budget_daily_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    budget_monthly_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # the tenant asked for its running rentals to stop once its own budget is spent
    budget_stops_running: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    fair_share_weight: Mapped[float] = mapped_column(Float, default=1.0)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class BudgetAlertRow(Base):
    """A budget alert sent: `threshold_pct` of a tenant's limit was reached in `period` (a UTC day or
    month); the key makes each one go out once."""

    __tablename__ = "budget_alerts"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    limit_name: Mapped[str] = mapped_column(String(40), primary_key=True)
    period: Mapped[str] = mapped_column(String(10), primary_key=True)
    threshold_pct: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    spent_micros: Mapped[int] = mapped_column(BigInteger)
    sent_at: Mapped[datetime] = mapped_column(UtcDateTime())


class FairShareRow(Base):
    """A tenant's decayed GPU-seconds as of `as_of` (the backfill queue's fair share, saved by the leader)."""

    __tablename__ = "fair_share_usage"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    usage_gpu_s: Mapped[float] = mapped_column(Float)
    as_of: Mapped[datetime] = mapped_column(UtcDateTime())


class PaymentTermsRow(Base):
    """How a tenant pays: prepaid (stopped after a grace once below 0) or postpaid with a credit limit."""

    __tablename__ = "payment_terms"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    mode: Mapped[str] = mapped_column(String(10))
    credit_limit_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    warned_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class OutageRow(Base):
    """A node out of service over [started_at, ended_at) (open while ended_at is null): SLA evidence."""

    __tablename__ = "outages"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(200), index=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    cause: Mapped[str] = mapped_column(String(200), default="")


class ContractOfferRow(Base):
    """A contract offered to one tenant at a negotiated price; `state` open, accepted or declined."""

    __tablename__ = "contract_offers"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    gpu_model: Mapped[str] = mapped_column(String(60))
    count: Mapped[int] = mapped_column(Integer)
    region: Mapped[str] = mapped_column(String(100))
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime())
    price_micros: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    state: Mapped[str] = mapped_column(String(20), default="open")
    contract_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class MaintenanceWindowRow(Base):
    """An operator's scheduled maintenance of a node over [starts_at, ends_at), with its reason."""

    __tablename__ = "maintenance_windows"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), index=True)
    starts_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ends_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    reason: Mapped[str] = mapped_column(String(500), default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class PriceEntryRow(Base):
    """An admin's price book entry: a list price (tier on_demand/reserved) or a spot floor (tier spot),
    per GPU-hour, in force from `effective_from` until a later entry of the same key."""

    __tablename__ = "price_entries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    gpu_model: Mapped[str] = mapped_column(String(60))
    region: Mapped[str] = mapped_column(String(100))
    tier: Mapped[str] = mapped_column(String(16))
    mig_profile: Mapped[str | None] = mapped_column(String(20), nullable=True)
    price_micros_per_gpu_hour: Mapped[int] = mapped_column(BigInteger)
    effective_from: Mapped[datetime] = mapped_column(UtcDateTime())
    source: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class RentalSizeRow(Base):
    """A resized rental's size from `from_at` on (see migration 0014)."""

    __tablename__ = "rental_sizes"
    __table_args__ = (UniqueConstraint("rental_id", "from_at", name="uq_rental_sizes_rental_from"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rental_id: Mapped[str] = mapped_column(ForeignKey("rentals.id"), index=True)
    from_at: Mapped[datetime] = mapped_column(UtcDateTime())
    nodes: Mapped[int] = mapped_column(Integer)
    gpus_per_node: Mapped[float] = mapped_column(Float)


class RentalRateRow(Base):
    """A rental's rate from `from_at` on (a spot rental follows its pool's spot price; see migration 0007),
    and the plan discounts that priced it (0052)."""

    __tablename__ = "rental_rates"
    __table_args__ = (UniqueConstraint("rental_id", "from_at", name="uq_rental_rates_rental_from"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rental_id: Mapped[str] = mapped_column(ForeignKey("rentals.id"), index=True)
    from_at: Mapped[datetime] = mapped_column(UtcDateTime())
    rate_micros_per_hour: Mapped[int] = mapped_column(BigInteger)
    # [{label, micros_per_hour}] of the quote that priced it (migration 0052); None: not recorded
    discounts: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)


class WebhookRow(Base):
    """A tenant's URL that gets its rentals' events, signed with `secret`; `after_event_id`: the last sent."""

    __tablename__ = "webhooks"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    url: Mapped[str] = mapped_column(String(2000))
    secret: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    after_event_id: Mapped[int] = mapped_column(BigInteger)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    retry_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    last_error: Mapped[str | None] = mapped_column(String(500), nullable=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    event_kinds: Mapped[str | None] = mapped_column(String(400), nullable=True)  # comma-separated; None: all
