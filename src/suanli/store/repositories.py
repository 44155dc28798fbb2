"""Repositories implementing `suanli.app.ports` on one SQLAlchemy session, and their unit of work."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from types import TracebackType

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from suanli.app.errors import BookingConflict, Duplicate
from suanli.app.records import (
    ApiKey,
    ContractRecord,
    FleetDocument,
    Tenant,
)
from suanli.store import windows
from suanli.store.ledger_repositories import SqlLedger
from suanli.store.maintenance_repositories import SqlMaintenance
from suanli.store.offer_repositories import SqlContractOffers
from suanli.store.outage_repositories import SqlOutages
from suanli.store.plan_repositories import SqlTerms
from suanli.store.price_repositories import SqlPrices
from suanli.store.rental_repositories import SqlRentals
from suanli.store.rows import (
    AgentNodeRow,
    ApiKeyRow,
    ContractRow,
    FleetDocumentRow,
    JoinTokenRow,
    NodeRow,
    TenantRow,
)
from suanli.store.webhook_repositories import SqlWebhooks


class SqlTenants:
    def __init__(self, session: Session) -> None:
        self.s = session

    def add(self, tenant: Tenant) -> None:
        self.s.add(TenantRow(id=tenant.id, name=tenant.name, role=tenant.role, created_at=tenant.created_at))
        try:
            self.s.flush()
        except IntegrityError as error:  # another writer took the name since `named` looked
            raise Duplicate(f"a tenant named {tenant.name!r} exists", field="name") from error

    def get(self, tenant_id: str, *, lock: bool = False) -> Tenant | None:
        """The tenant; `lock`: FOR NO KEY UPDATE on PostgreSQL, so two lockers go in turn while rows that
        refer to the tenant (a rental, a posting) are still written meanwhile."""
        held = {"key_share": True} if lock else None
        row = self.s.get(TenantRow, tenant_id, with_for_update=held, populate_existing=lock)
        return None if row is None else _tenant(row)

    def named(self, name: str) -> Tenant | None:
        """The tenant whose name matches `name` regardless of case (names are unique that way)."""
        row = self.s.scalar(select(TenantRow).where(func.lower(TenantRow.name) == name.lower()))
        return None if row is None else _tenant(row)

    def list(self) -> list[Tenant]:
        return [
            _tenant(r) for r in self.s.scalars(select(TenantRow).order_by(TenantRow.created_at, TenantRow.id))
        ]

    def has_admin(self) -> bool:
        return self.s.scalar(select(func.count()).select_from(TenantRow).where(TenantRow.role == "admin")) > 0


class SqlKeys:
    def __init__(self, session: Session) -> None:
        self.s = session

    def add(self, key: ApiKey) -> None:
        self.s.add(
            ApiKeyRow(
                id=key.id,
                tenant_id=key.tenant_id,
                label=key.label,
                secret_sha256=key.secret_sha256,
                created_at=key.created_at,
                revoked=key.revoked,
            )
        )
        self.s.flush()

    def get(self, key_id: str) -> ApiKey | None:
        row = self.s.get(ApiKeyRow, key_id)
        return None if row is None else _key(row)

    def by_digest(self, secret_sha256: str) -> ApiKey | None:
        row = self.s.scalar(select(ApiKeyRow).where(ApiKeyRow.secret_sha256 == secret_sha256))
        return None if row is None else _key(row)

    def list_for(self, tenant_id: str) -> list[ApiKey]:
        rows = self.s.scalars(
            select(ApiKeyRow).where(ApiKeyRow.tenant_id == tenant_id).order_by(ApiKeyRow.created_at)
        )
        return [_key(r) for r in rows]

    def revoke(self, key_id: str) -> None:
        self.s.execute(update(ApiKeyRow).where(ApiKeyRow.id == key_id).values(revoked=True))


class SqlFleet:
    def __init__(self, session: Session) -> None:
        self.s = session

    def current(self) -> FleetDocument | None:
        row = self.s.scalar(select(FleetDocumentRow).order_by(FleetDocumentRow.version.desc()).limit(1))
        return None if row is None else FleetDocument(row.version, row.toml, row.updated_at)

    def current_version(self) -> int | None:
        return self.s.scalar(select(func.max(FleetDocumentRow.version)))

    def lock_changes(self, *, shared: bool) -> None:
        """Until this transaction ends, a fleet change (exclusive) and the bookings of a scheduling cycle
        (shared) take turns, so a change's check of the nodes' live rentals cannot miss a booking committed
        meanwhile (PostgreSQL: an advisory lock; SQLite's transactions are serialised already)."""
        if self.s.get_bind().dialect.name == "postgresql":
            call = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
            self.s.execute(text(f"SELECT {call}(:key)"), {"key": FLEET_LOCK})

    def put(self, toml: str, node_names: Sequence[str], now: datetime) -> FleetDocument:
        row = FleetDocumentRow(toml=toml, updated_at=now)
        self.s.add(row)
        known = set(self.s.scalars(select(NodeRow.name)))
        wanted = set(node_names)
        if known - wanted:
            self.s.execute(delete(NodeRow).where(NodeRow.name.in_(sorted(known - wanted))))
        self.s.add_all(NodeRow(name=name, schedulable=True) for name in sorted(wanted - known))
        self.s.flush()
        return FleetDocument(row.version, toml, now)

    def revoke_agents(self, nodes: Sequence[str]) -> None:
        if nodes:
            self.s.execute(delete(AgentNodeRow).where(AgentNodeRow.node.in_(list(nodes))))
            unspent = JoinTokenRow.node.in_(list(nodes)) & JoinTokenRow.used_at.is_(None)
            self.s.execute(delete(JoinTokenRow).where(unspent))

    def cordoned(self) -> set[str]:
        return set(self.s.scalars(select(NodeRow.name).where(NodeRow.schedulable.is_(False))))

    def gpu_mismatches(self) -> dict[str, str]:
        query = select(AgentNodeRow.node, AgentNodeRow.gpu_mismatch).where(
            AgentNodeRow.gpu_mismatch.is_not(None)
        )
        return {node: str(reason) for node, reason in self.s.execute(query)}

    def imageless(self) -> set[str]:
        return set(self.s.scalars(select(AgentNodeRow.node).where(AgentNodeRow.runs_images.is_(False))))

    def mig_layouts_revision(self) -> tuple[int, int]:
        counted = select(
            func.count(AgentNodeRow.node), func.coalesce(func.sum(AgentNodeRow.mig_layouts_revision), 0)
        )
        count, total = self.s.execute(counted).one()
        return int(count), int(total)

    def mig_layouts(self) -> dict[str, dict[int, tuple[tuple[int, str, bool], ...]]]:
        query = select(AgentNodeRow.node, AgentNodeRow.mig_layouts).where(
            AgentNodeRow.mig_layouts.is_not(None)
        )
        return {
            node: {
                int(index): tuple((start, name, busy) for start, name, busy in instances)
                for index, instances in stored.items()
            }
            for node, stored in self.s.execute(query)
        }

    def set_schedulable(self, node: str, schedulable: bool) -> bool:
        result = self.s.execute(update(NodeRow).where(NodeRow.name == node).values(schedulable=schedulable))
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def set_drained(self, node: str, drained: bool) -> bool:
        """An operator's drain or undrain; False: no such node. A drain is the operator's from now on, even
        of a node the reaper cordoned (its agent's return no longer undoes it); an undrain of a node whose
        agent is down, or whose host's GPUs are not the fleet's, leaves it cordoned until the agent comes
        back or its GPUs match, as the agent's side cordoned it."""
        agents = AgentNodeRow.__table__
        agent = self.s.execute(
            select(agents.c.up, agents.c.gpu_mismatch).where(agents.c.node == node)
        ).one_or_none()
        kept_out = agent is not None and (agent.up is False or agent.gpu_mismatch is not None)
        self.s.execute(
            update(agents).where(agents.c.node == node).values(cordoned_by_agent=kept_out and not drained)
        )
        return self.set_schedulable(node, not drained and not kept_out)


SIGNING_LOCK = 0x5A4C_0003  # PostgreSQL advisory lock: contract signings take turns
FLEET_LOCK = 0x5A4C_0004  # and fleet changes with the scheduling cycles' bookings


class SqlContracts:
    def __init__(self, session: Session) -> None:
        self.s = session

    def lock_signing(self) -> None:
        """Until this transaction ends, no other signs a contract: the contracts read next are all there
        are, so an admission check cannot miss one committed meanwhile (PostgreSQL: an advisory lock;
        SQLite's transactions are serialised already)."""
        if self.s.get_bind().dialect.name == "postgresql":
            self.s.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SIGNING_LOCK})

    def add(self, contract: ContractRecord) -> None:
        self.s.add(ContractRow(**asdict(contract)))
        self.s.flush()

    def get(self, contract_id: str, *, lock: bool = False) -> ContractRecord | None:
        """The contract; `lock`: its row held until the transaction ends (PostgreSQL: FOR UPDATE, read as
        committed by whoever held it before)."""
        row = self.s.get(ContractRow, contract_id, with_for_update=lock, populate_existing=lock)
        return None if row is None else _contract(row)

    def list(self, tenant_id: str | None) -> list[ContractRecord]:
        query = select(ContractRow).order_by(ContractRow.created_at, ContractRow.id)
        if tenant_id is not None:
            query = query.where(ContractRow.tenant_id == tenant_id)
        return [_contract(r) for r in self.s.scalars(query)]

    def set_tenant(self, contract_id: str, tenant_id: str) -> None:
        self.s.execute(update(ContractRow).where(ContractRow.id == contract_id).values(tenant_id=tenant_id))

    def coverage_due(self, now: datetime) -> list[tuple[ContractRecord, int]]:
        """(contract, stage reached) of each contract whose start (stage 0) or end (stage 1) is at or before
        `now` and not followed yet: a partial index's rows, the open and future contracts, never history."""
        query = select(ContractRow).where(
            windows.due(ContractRow.coverage_stage, ContractRow.starts_at, ContractRow.ends_at, now)
        )
        return [(_contract(r), r.coverage_stage) for r in self.s.scalars(query)]

    def to_recognize(self, now: datetime) -> list[str]:
        """Priced contracts started by `now` with value still to recognize: a partial index's rows, never the
        contracts whose value is all earned."""
        query = (
            select(ContractRow.id)
            .where(ContractRow.recognized_micros < ContractRow.price_micros, ContractRow.starts_at < now)
            .order_by(ContractRow.starts_at, ContractRow.id)
        )
        return list(self.s.scalars(query))

    def set_recognized(self, contract_id: str, micros: int) -> None:
        self.s.execute(
            update(ContractRow)
            .where(ContractRow.id == contract_id)
            .values(recognized_micros=micros)
            .execution_options(synchronize_session=False)
        )

    def mark_coverage(self, contract_id: str, stage: int) -> bool:
        """Record that the coverage job followed the contract to `stage`; False when it was there already
        (another pass did it first: this one's work must be rolled back)."""
        return windows.advance(self.s, contract_id, ContractRow.coverage_stage, stage)


class SqlUnitOfWork:
    """One session, one transaction: `commit()` keeps the work, leaving without it rolls back."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def __enter__(self) -> SqlUnitOfWork:
        self.session = self.sessions()
        self.tenants = SqlTenants(self.session)
        self.keys = SqlKeys(self.session)
        self.fleet = SqlFleet(self.session)
        self.rentals = SqlRentals(self.session)
        self.contracts = SqlContracts(self.session)
        self.contract_offers = SqlContractOffers(self.session)
        self.ledger = SqlLedger(self.session)
        self.terms = SqlTerms(self.session)
        self.prices = SqlPrices(self.session)
        self.outages = SqlOutages(self.session)
        self.maintenance = SqlMaintenance(self.session)
        self.webhooks = SqlWebhooks(self.session)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.session.rollback()
        self.session.close()

    def commit(self) -> None:
        try:
            self.session.commit()
        except IntegrityError as error:
            raise BookingConflict("the database refused the change (a unique key is taken)") from error

    def read_snapshot(self) -> None:
        """Every read in this unit sees the database as of its first one, so a view of several tables is
        consistent: REPEATABLE READ on PostgreSQL (its default, READ COMMITTED, sees each statement's own
        moment); SQLite's transactions are serialised already (`BEGIN IMMEDIATE`). Call before any read."""
        if self.session.get_bind().dialect.name == "postgresql":
            self.session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def _tenant(row: TenantRow) -> Tenant:
    return Tenant(row.id, row.name, row.role, row.created_at)


def _key(row: ApiKeyRow) -> ApiKey:
    return ApiKey(row.id, row.tenant_id, row.label, row.secret_sha256, row.created_at, row.revoked)


def _contract(row: ContractRow) -> ContractRecord:
    return ContractRecord(
        row.id,
        row.tenant_id,
        row.gpu_model,
        row.count,
        row.region,
        row.starts_at,
        row.ends_at,
        row.created_at,
        row.price_micros,
    )
