"""SLA credits on the real store (SQLite and PostgreSQL): the reaper opens an outage at a silent node's last
heartbeat and its next heartbeat closes it; an operator's cordon is no outage; a node lost for 1 hour after
the rental ran 99 hours is 99.0% availability (below 99.9, not below 99: 10%), posted once after the month
with the outage as evidence, and on the invoice as a negative line in the total."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import agent_service
from suanli.app.agent_records import WorkloadReport
from suanli.app.agents import AgentService
from suanli.app.billing import BillingService
from suanli.app.errors import Conflict, Forbidden
from suanli.app.fleet import FleetCache
from suanli.app.invoices import InvoiceService
from suanli.app.records import Booking, Caller, Rental, RentalSpec, Tenant
from suanli.app.sla import SlaService
from suanli.domain.billing.ledger import AccountId, TxKind, verify
from suanli.domain.billing.money import bp_of, charge_micros
from suanli.domain.catalog_data import CATALOG
from suanli.domain.plan import NodeAllocation, Slice
from suanli.loops.meter_loop import MeterLoop

FLEET = (Path(__file__).resolve().parents[2] / "examples" / "fleet.toml").read_text()
T0 = datetime(2030, 1, 1, tzinfo=UTC)
H = timedelta(hours=1)
RATE = 2_990_000
NODE = "h100-a-01"
ADMIN = Caller(Tenant("ten_admin", "admin", "admin", T0), "key_admin")
ALICE = Caller(Tenant("ten_a", "a", "tenant", T0), "key_a")


@pytest.fixture
def env(store, clock):
    engine, factory = store
    with factory() as u:
        u.tenants.add(ADMIN.tenant)
        u.tenants.add(ALICE.tenant)
        u.fleet.put(FLEET, [NODE, "l40s-01"], T0)
        u.commit()
    agents = agent_service(engine, clock)
    billing = BillingService(factory, clock, CATALOG, FleetCache(CATALOG))
    invoices = InvoiceService(factory, clock, CATALOG, FleetCache(CATALOG))
    sla = SlaService(factory, clock)
    return factory, clock, agents, billing, sla, invoices


def _node_key(agents: AgentService, node: str) -> str:
    _, secret = agents.create_token(ADMIN, node)
    return agents.register(secret, {})[1]


def _running(factory, agents: AgentService, key: str, rental_id: str, node: str) -> None:
    with factory() as u:
        u.rentals.add(Rental(rental_id, "ten_a", "pending", RentalSpec(gpu_model="H100", gpus=1), T0))
        assert u.rentals.mark_placed(rental_id, T0, RATE)
        whole = [NodeAllocation(node, 0, 0, (Slice(0, 1000, 1024),))]
        u.rentals.book(rental_id, whole, [Booking(node, 0, 0)], at=T0)
        u.commit()
    agents.heartbeat(key, [WorkloadReport(rental_id, "running")], [])


def _outages(factory) -> list:
    with factory() as u:
        return u.outages.overlapping(T0 - 24 * H, T0 + 1000 * H)


def test_a_silent_node_opens_an_outage_at_its_last_heartbeat_and_its_return_closes_it(env) -> None:
    factory, clock, agents, _, _, _ = env
    key = _node_key(agents, NODE)
    clock.at = T0 + 2 * H
    agents.heartbeat(key, [], [])
    clock.at = T0 + 2 * H + timedelta(seconds=31)
    assert agents.reap() == [NODE]
    assert agents.reap(T0 + 3 * H) == []  # already down: one outage
    (outage,) = _outages(factory)
    assert (outage.node, outage.started_s, outage.ended_s) == (NODE, int((T0 + 2 * H).timestamp()), None)
    clock.at = T0 + 3 * H
    agents.heartbeat(key, [], [])
    (outage,) = _outages(factory)
    assert outage.ended_s == int((T0 + 3 * H).timestamp())


def test_a_node_an_operator_cordoned_is_maintenance_not_an_outage(env) -> None:
    factory, clock, agents, _, _, _ = env
    key = _node_key(agents, NODE)
    with factory() as u:
        u.fleet.set_schedulable(NODE, False)
        u.commit()
    clock.at = T0 + H
    assert agents.reap() == [NODE]
    agents.heartbeat(key, [], [])
    assert _outages(factory) == []


def test_one_hour_lost_after_99_hours_is_99_percent_and_credits_10_percent_once(env) -> None:
    factory, clock, agents, billing, sla, invoices = env
    key = _node_key(agents, NODE)
    _running(factory, agents, key, "rnt_1", NODE)
    clock.at = T0 + 99 * H
    agents.heartbeat(key, [], [])  # the last heartbeat before the outage
    clock.at = T0 + 99 * H + timedelta(seconds=31)
    assert agents.reap() == [NODE]
    billing.meter()
    charged = charge_micros(RATE, 99 * 3600)
    clock.at = T0 + 100 * H
    agents.heartbeat(key, [], [])  # back after exactly 1 hour

    statement = sla.report(ALICE, "2030-01")  # the month is running: computed up to now, not posted
    assert not statement.ended and statement.posted is None
    assert statement.report.availability_ppm == 990_000

    with pytest.raises(Conflict, match="has not ended"):
        sla.post_month(ADMIN, "2030-01")
    with pytest.raises(Forbidden):
        sla.post_month(ALICE, "2030-01")

    clock.at = datetime(2030, 2, 1, 0, 5, tzinfo=UTC)
    MeterLoop(billing, None, 60, sla).work()  # type: ignore[arg-type]  # the meter pass posts last month's
    assert sla.post_due() == 0  # remembered
    (again,) = sla.post_month(ADMIN, "2030-01")  # idempotent by key
    assert not again.new

    statement = sla.report(ALICE, "2030-01")
    report = statement.report
    (outage,) = report.outages
    assert (report.total_s, report.down_s) == (100 * 3600, 3600)
    assert report.availability_ppm == 990_000 and report.credit_bp == 1000
    assert report.affected_micros == charged
    credit = bp_of(charged, 1000)
    assert report.credit_micros == statement.posted_micros == credit
    tx = statement.posted
    assert tx is not None and tx.kind is TxKind.SLA_CREDIT and tx.key == "sla:ten_a:2030-01"
    assert f"#{outage.id} on {NODE}" in tx.memo and "availability 99.0000%" in tx.memo
    amounts = {p.account: p.amount_micros for p in tx.postings}
    assert amounts == {AccountId.platform_revenue(): -credit, AccountId.tenant_cash("ten_a"): credit}

    with factory() as u:
        transactions = u.ledger.transactions(None)
    assert sum(1 for t in transactions if t.kind is TxKind.SLA_CREDIT) == 1
    assert verify(transactions).ok

    invoice = invoices.invoice(ALICE, "2030-01")
    (line,) = invoice.sla_credit_lines
    assert line.amount_micros == -credit and f"#{outage.id}" in line.description
    assert invoice.total_micros == charged - credit
    assert invoices.invoice(ALICE, "2030-02").sla_credit_lines == ()


def test_a_month_without_outages_posts_nothing(env) -> None:
    factory, clock, agents, billing, sla, _ = env
    key = _node_key(agents, NODE)
    _running(factory, agents, key, "rnt_1", NODE)
    clock.at = T0 + 10 * H
    billing.meter()
    clock.at = datetime(2030, 2, 2, tzinfo=UTC)
    assert sla.post_month(ADMIN, "2030-01") == []
    statement = sla.report(ALICE, "2030-01")
    assert statement.report.availability_ppm == 1_000_000 and statement.report.credit_micros == 0
    assert statement.posted is None
