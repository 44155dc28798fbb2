"""`SqlAgents` (the agent port of `suanli.app.agents`) and a unit of work that adds it to the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Text, func, insert, literal, select, update
from sqlalchemy.orm import Session, sessionmaker

from suanli.app.agent_records import AgentNode, JoinToken, RentalRun
from suanli.app.execs import OPEN_STATES, Exec
from suanli.store.gpu_minute_repositories import SqlGpuMinutes
from suanli.store.ledger_repositories import one_of
from suanli.store.repositories import SqlUnitOfWork
from suanli.store.rows import (
    AgentNodeRow,
    AllocationRow,
    JoinTokenRow,
    NodeRow,
    RentalExecRow,
    RentalLogRow,
    RentalRow,
    RentalRunRow,
    SliceRow,
    UtcDateTime,
)


class SqlAgents:
    def __init__(self, session: Session) -> None:
        self.s = session

    def node_exists(self, node: str) -> bool:
        return self.s.get(NodeRow, node) is not None

    def add_token(self, token: JoinToken) -> None:
        self.s.add(
            JoinTokenRow(
                id=token.id,
                node=token.node,
                token_sha256=token.token_sha256,
                created_by=token.created_by,
                created_at=token.created_at,
                expires_at=token.expires_at,
                used_at=token.used_at,
            )
        )
        self.s.flush()

    def token_by_digest(self, token_sha256: str) -> JoinToken | None:
        row = self.s.scalar(select(JoinTokenRow).where(JoinTokenRow.token_sha256 == token_sha256))
        if row is None:
            return None
        return JoinToken(
            row.id, row.node, row.token_sha256, row.created_by, row.created_at, row.expires_at, row.used_at
        )

    def use_token(self, token_id: str, now: datetime) -> bool:
        result = self.s.execute(
            update(JoinTokenRow)
            .where(JoinTokenRow.id == token_id, JoinTokenRow.used_at.is_(None))
            .values(used_at=now)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def put_node(self, node: str, key_sha256: str, inventory: Mapping[str, Any], now: datetime) -> None:
        row = self.s.get(AgentNodeRow, node)
        if row is None:
            self.s.add(
                AgentNodeRow(
                    node=node,
                    key_sha256=key_sha256,
                    registered_at=now,
                    inventory=dict(inventory),
                    telemetry=[],
                    last_heartbeat_at=now,
                    up=True,
                    cordoned_by_agent=False,
                )
            )
        else:
            row.key_sha256, row.registered_at, row.inventory = key_sha256, now, dict(inventory)
            row.last_heartbeat_at = now
        self.s.flush()

    def node_by_key(self, key_sha256: str) -> AgentNode | None:
        row = self.s.scalar(select(AgentNodeRow).where(AgentNodeRow.key_sha256 == key_sha256))
        return None if row is None else _node(row)

    def nodes(self) -> list[AgentNode]:
        return [_node(r) for r in self.s.scalars(select(AgentNodeRow).order_by(AgentNodeRow.node))]

    def nodes_named(self, names: Sequence[str]) -> list[AgentNode]:
        query = select(AgentNodeRow).where(AgentNodeRow.node.in_(list(names))).order_by(AgentNodeRow.node)
        return [_node(r) for r in self.s.scalars(query)] if names else []

    def beat(
        self,
        node: str,
        telemetry: Sequence[Mapping[str, Any]],
        now: datetime,
        runs_images: bool | None = None,
    ) -> datetime | None:
        # the row is locked (PostgreSQL) so that two beats of one node cannot both measure from one previous
        previous = self.s.scalar(
            select(AgentNodeRow.last_heartbeat_at).where(AgentNodeRow.node == node).with_for_update()
        )
        values: dict[str, Any] = {"last_heartbeat_at": now, "telemetry": [dict(t) for t in telemetry]}
        if runs_images is not None:
            values["runs_images"] = runs_images
        self.s.execute(update(AgentNodeRow).where(AgentNodeRow.node == node).values(**values))
        return previous

    def set_mig_layouts(self, node: str, layouts: Mapping[int, Sequence[tuple[int, str, bool]]]) -> bool:
        stored = {
            str(index): [[start, name, busy] for start, name, busy in sorted(instances)]
            for index, instances in layouts.items()
        }
        before = self.s.scalar(select(AgentNodeRow.mig_layouts).where(AgentNodeRow.node == node))
        if before == stored:
            return False
        revision = AgentNodeRow.mig_layouts_revision + 1
        self.s.execute(
            update(AgentNodeRow)
            .where(AgentNodeRow.node == node)
            .values(mig_layouts=stored, mig_layouts_revision=revision)
        )
        return True

    def running_slices(self, node: str) -> dict[str, list[tuple[int, int]]]:
        query = (
            select(AllocationRow.rental_id, SliceRow.gpu_index, SliceRow.milli)
            .join(SliceRow, SliceRow.allocation_id == AllocationRow.id)
            .join(
                RentalRunRow,
                (RentalRunRow.rental_id == AllocationRow.rental_id)
                & (RentalRunRow.node == AllocationRow.node),
            )
            .where(
                AllocationRow.node == node,
                AllocationRow.released.is_(False),
                RentalRunRow.state == "running",
                RentalRunRow.placement == _placements_of(AllocationRow.rental_id),  # not an earlier one's
            )
            .order_by(AllocationRow.rental_id, SliceRow.id)
        )
        found: dict[str, list[tuple[int, int]]] = {}
        for rental_id, gpu_index, milli in self.s.execute(query):
            found.setdefault(rental_id, []).append((gpu_index, milli))
        return found

    def add_energy(
        self, rental_id: str, node: str, energy_j: float, seconds: float, gpu_seconds: float
    ) -> None:
        self.s.execute(
            update(RentalRunRow)
            .where(
                RentalRunRow.rental_id == rental_id,
                RentalRunRow.node == node,
                RentalRunRow.placement == _placements_of(RentalRunRow.rental_id),
            )
            .values(
                energy_j=RentalRunRow.energy_j + energy_j,
                measured_s=RentalRunRow.measured_s + seconds,
                measured_gpu_s=RentalRunRow.measured_gpu_s + gpu_seconds,
            )
            .execution_options(synchronize_session=False)
        )

    def measured(self, rental_ids: Sequence[str]) -> dict[str, tuple[float, float, float]]:
        found: dict[str, tuple[float, float, float]] = {}
        wanted = sorted(set(rental_ids))
        for start in range(0, len(wanted), 500):
            query = (
                select(
                    RentalRunRow.rental_id,
                    func.sum(RentalRunRow.energy_j),
                    func.sum(RentalRunRow.measured_s),
                    func.sum(RentalRunRow.measured_gpu_s),
                )
                .where(RentalRunRow.rental_id.in_(wanted[start : start + 500]), RentalRunRow.measured_s > 0)
                .group_by(RentalRunRow.rental_id)
            )
            for rental_id, energy_j, measured_s, gpu_s in self.s.execute(query):
                found[rental_id] = (float(energy_j or 0.0), float(measured_s or 0.0), float(gpu_s or 0.0))
        return found

    def set_up(self, node: str, up: bool, cordoned_by_agent: bool) -> None:
        self.s.execute(
            update(AgentNodeRow)
            .where(AgentNodeRow.node == node)
            .values(up=up, cordoned_by_agent=cordoned_by_agent)
        )

    def set_gpu_mismatch(self, node: str, reason: str | None) -> None:
        stored = None if reason is None else reason[:500]
        self.s.execute(update(AgentNodeRow).where(AgentNodeRow.node == node).values(gpu_mismatch=stored))

    def live_rentals_on(self, node: str) -> list[str]:
        query = (
            select(AllocationRow.rental_id)
            .where(AllocationRow.node == node, AllocationRow.released.is_(False))
            .distinct()
            .order_by(AllocationRow.rental_id)
        )
        return list(self.s.scalars(query))

    def hostnames(self, nodes: Sequence[str]) -> dict[str, str]:
        query = select(AgentNodeRow.node, AgentNodeRow.inventory).where(AgentNodeRow.node.in_(list(nodes)))
        return {
            node: str((inventory or {}).get("hostname") or node) for node, inventory in self.s.execute(query)
        }

    def had_allocation(self, rental_id: str, node: str) -> bool:
        query = select(AllocationRow.id).where(
            AllocationRow.rental_id == rental_id, AllocationRow.node == node
        )
        return self.s.scalar(query.limit(1)) is not None

    def run(self, rental_id: str, node: str, placement: int) -> RentalRun | None:
        row = self.s.get(RentalRunRow, (rental_id, node, placement))
        return None if row is None else _run(row)

    def runs_on(self, node: str, rental_ids: Sequence[str]) -> dict[str, RentalRun]:
        """The runs of these rentals on `node` in their current placements, by rental, in one query."""
        if not rental_ids:
            return {}
        query = select(RentalRunRow).where(
            RentalRunRow.node == node,
            RentalRunRow.placement == _placements_of(RentalRunRow.rental_id),
            one_of(self.s, RentalRunRow.rental_id, rental_ids),
        )
        return {row.rental_id: _run(row) for row in self.s.scalars(query)}

    def put_run(self, run: RentalRun) -> None:
        row = self.s.get(RentalRunRow, (run.rental_id, run.node, run.placement))
        if row is None:
            row = RentalRunRow(rental_id=run.rental_id, node=run.node, placement=run.placement)
            self.s.add(row)
        row.state, row.exit_code, row.restarts = run.state, run.exit_code, run.restarts
        row.started_at, row.ended_at, row.last_heartbeat_at = (
            run.started_at,
            run.ended_at,
            run.last_heartbeat_at,
        )
        self.s.flush()

    def runs(self, rental_id: str) -> list[RentalRun]:
        """Every run of the rental, of all its placements, by node and placement."""
        rows = self.s.scalars(
            select(RentalRunRow)
            .where(RentalRunRow.rental_id == rental_id)
            .order_by(RentalRunRow.node, RentalRunRow.placement)
        )
        return [_run(r) for r in rows]

    def log_size(self, rental_id: str, node: str) -> int:
        """Bytes of the node's log stored: chunks are contiguous (each starts where the stored ones end), so
        the last one's end, found on the (rental, node, offset) unique index."""
        query = (
            select(RentalLogRow.node_offset + RentalLogRow.size_bytes)
            .where(RentalLogRow.rental_id == rental_id, RentalLogRow.node == node)
            .order_by(RentalLogRow.node_offset.desc())
            .limit(1)
        )
        return int(self.s.scalar(query) or 0)

    def add_log(
        self, rental_id: str, node: str, node_offset: int, size_bytes: int, data: str, now: datetime
    ) -> None:
        """Store a chunk after the rental's output so far (and its node's), numbering where its text starts
        in the same statement; uploads from the rental's nodes take turns (an advisory lock per rental on
        PostgreSQL, taken first, so the statement sees the chunk stored before it; SQLite's writers are
        serialised already), so no two chunks get the same start."""
        if self.s.get_bind().dialect.name == "postgresql":
            self.s.execute(select(func.pg_advisory_xact_lock(func.hashtext("rental_logs:" + rental_id))))
        of_rental = RentalLogRow.rental_id == rental_id
        of_node = of_rental & (RentalLogRow.node == node)
        numbered = select(
            literal(rental_id),
            literal(node),
            literal(node_offset, BigInteger),
            literal(size_bytes),
            literal(data, Text),
            literal(now, UtcDateTime()),
            func.coalesce(_end_of(of_rental, RentalLogRow.char_start).scalar_subquery(), 0),
            func.coalesce(_end_of(of_node, RentalLogRow.node_char_start).scalar_subquery(), 0),
            literal(len(data)),
        )
        columns = ("rental_id", "node", "node_offset", "size_bytes", "data", "at", "char_start")
        self.s.execute(insert(RentalLogRow).from_select([*columns, "node_char_start", "chars"], numbered))

    def _log_end(self, where: Any, start_column: Any) -> int:
        """Characters of output so far where `where` holds."""
        return int(self.s.scalar(_end_of(where, start_column)) or 0)

    def log_length(self, rental_id: str, node: str | None) -> int:
        """Characters of the rental's output (or `node`'s) stored so far."""
        where = RentalLogRow.rental_id == rental_id
        if node is None:
            return self._log_end(where, RentalLogRow.char_start)
        return self._log_end(where & (RentalLogRow.node == node), RentalLogRow.node_char_start)

    def log_page(self, rental_id: str, node: str | None, offset: int, limit: int) -> tuple[str, int]:
        """Up to `limit` characters of the rental's output (or `node`'s) from character `offset`, read from
        the chunks that hold them only, and the output's length so far."""
        where = RentalLogRow.rental_id == rental_id
        start = RentalLogRow.char_start
        if node is not None:
            where = where & (RentalLogRow.node == node)
            start = RentalLogRow.node_char_start
        total = self._log_end(where, start)
        if offset >= total:
            return "", total
        first = self.s.scalar(select(func.max(start)).where(where, start <= offset))  # the chunk holding it
        query = (
            select(start, RentalLogRow.data)
            .where(where, start >= (first or 0), start < offset + limit)
            .order_by(start)
        )
        text = "".join(data[max(0, offset - first) :] for first, data in self.s.execute(query))
        return text[:limit], total


def _end_of(where: Any, start_column: Any) -> Any:
    """The last chunk's start plus its length where `where` holds: starts grow chunk by chunk (no chunk is
    empty: the service stores none), so the last one is an index seek."""
    query = select(start_column + RentalLogRow.chars).where(where).order_by(start_column.desc())
    return query.limit(1)


class SqlRunEnergy:
    """The invoice's `RunEnergyReader`: the runs' measured energy, read in a session of its own."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def measured(self, rental_ids: Sequence[str]) -> dict[str, tuple[float, float, float]]:
        if not rental_ids:
            return {}
        with self.sessions() as session:
            return SqlAgents(session).measured(rental_ids)


class SqlAgentUnitOfWork(SqlUnitOfWork):
    """The unit of work of `suanli.store.repositories` plus `agents`, `execs` and `gpu_minutes`."""

    def __enter__(self) -> SqlAgentUnitOfWork:
        super().__enter__()
        self.agents = SqlAgents(self.session)
        self.execs = SqlExecs(self.session)
        self.gpu_minutes = SqlGpuMinutes(self.session)
        return self


def _node(row: AgentNodeRow) -> AgentNode:
    return AgentNode(
        row.node,
        row.key_sha256,
        row.registered_at,
        dict(row.inventory),
        row.last_heartbeat_at,
        row.up,
        row.cordoned_by_agent,
        list(row.telemetry or []),
        row.gpu_mismatch,
    )


def _placements_of(rental_id: Any) -> Any:
    """The current placement of the rental `rental_id` names (a correlated subquery)."""
    return select(RentalRow.placements).where(RentalRow.id == rental_id).scalar_subquery()


def _run(row: RentalRunRow) -> RentalRun:
    return RentalRun(
        row.rental_id,
        row.node,
        row.state,
        row.exit_code,
        row.started_at,
        row.ended_at,
        row.last_heartbeat_at,
        row.restarts or 0,
        row.placement or 0,
    )


class SqlExecs:
    """`suanli.app.execs.ExecRepo`: the commands tenants run inside their rentals."""

    def __init__(self, session: Session) -> None:
        self.s = session

    def add(self, found: Exec) -> None:
        self.s.add(
            RentalExecRow(
                id=found.id,
                rental_id=found.rental_id,
                node=found.node,
                command=list(found.command),
                timeout_s=found.timeout_s,
                state=found.state,
                exit_code=found.exit_code,
                output=found.output,
                output_truncated=found.output_truncated,
                output_chars=found.output_chars,
                message=found.message,
                created_at=found.created_at,
                started_at=found.started_at,
                ended_at=found.ended_at,
                stdin=found.stdin,
                tty=found.tty,
                port=found.port,
                separate_stderr=found.separate_stderr,
            )
        )
        self.s.flush()

    def get(self, exec_id: str) -> Exec | None:
        row = self.s.get(RentalExecRow, exec_id)
        return None if row is None else _exec(row)

    def of_rental(self, rental_id: str, limit: int) -> list[Exec]:
        query = (
            select(RentalExecRow)
            .where(RentalExecRow.rental_id == rental_id)
            .order_by(RentalExecRow.created_at.desc(), RentalExecRow.id.desc())
            .limit(limit)
        )
        return [_exec(row) for row in self.s.scalars(query)]

    def open_count(self, rental_id: str) -> int:
        query = select(func.count(RentalExecRow.id)).where(
            RentalExecRow.rental_id == rental_id, RentalExecRow.state.in_(OPEN_STATES)
        )
        return self.s.scalar(query) or 0

    def open_on(self, node: str) -> list[Exec]:
        query = (
            select(RentalExecRow)
            .where(RentalExecRow.node == node, RentalExecRow.state.in_(OPEN_STATES))
            .order_by(RentalExecRow.created_at, RentalExecRow.id)
        )
        return [_exec(row) for row in self.s.scalars(query)]

    def update(self, found: Exec, *, expect: Sequence[str]) -> bool:
        result = self.s.execute(
            update(RentalExecRow)
            .where(RentalExecRow.id == found.id, RentalExecRow.state.in_(list(expect)))
            .values(
                state=found.state,
                exit_code=found.exit_code,
                output=found.output,
                output_truncated=found.output_truncated,
                output_chars=found.output_chars,
                message=found.message,
                started_at=found.started_at,
                ended_at=found.ended_at,
            )
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]


def _exec(row: RentalExecRow) -> Exec:
    return Exec(
        row.id,
        row.rental_id,
        row.node,
        tuple(row.command),
        row.timeout_s,
        row.state,
        row.created_at,
        row.exit_code,
        row.output,
        row.output_truncated,
        row.message,
        row.started_at,
        row.ended_at,
        row.output_chars or 0,
        bool(row.stdin),
        bool(row.tty),
        row.port,
        bool(row.separate_stderr),
    )
