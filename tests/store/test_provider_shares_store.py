"""Each provider is paid for its own nodes' share of a rental, on the real store (SQLite and PostgreSQL): a
gang across two providers pays each half, a re-placed rental pays each provider for its run there, a grown
one pays the new provider from the growth on; a rental booked before allocations had times pays its first
node's provider as before. A rental re-placed in another region has each region's energy and carbon."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from conftest import agent_service
from suanli.app.agent_records import WorkloadReport
from suanli.app.billing import BillingService, Payout, PayoutLine
from suanli.app.fleet import FleetCache
from suanli.app.invoices import InvoiceService
from suanli.app.records import Booking, Caller, Rental, RentalEvent, RentalSpec, Tenant
from suanli.app.rentals import follow_size
from suanli.domain.billing.ledger import AccountId, AccountKind, TxKind
from suanli.domain.billing.money import charge_micros, round_half_up
from suanli.domain.catalog_data import CATALOG
from suanli.domain.plan import NodeAllocation, Slice
from suanli.store.rows import AllocationRow

T0 = datetime(2030, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)
RATE = 2_990_000  # one H100 per hour
ALPHA, BETA = "h100-alpha-01", "h100-beta-01"
ADMIN = Caller(Tenant("ten_admin", "admin", "admin", T0), "key_admin")
ALICE = Caller(Tenant("ten_a", "a", "tenant", T0), "key_a")
FLEET = (Path(__file__).resolve().parents[1] / "fleets" / "two_providers.toml").read_text()  # alpha, beta


def provider_part(charged_micros: int) -> int:
    return charged_micros * 8500 // 10_000  # the default 15% commission


@pytest.fixture
def env(store, clock):
    engine, factory = store
    with factory() as u:
        u.tenants.add(ADMIN.tenant)
        u.tenants.add(ALICE.tenant)
        u.fleet.put(FLEET, [ALPHA, BETA], T0)
        u.commit()
    agents = agent_service(engine, clock)
    billing = BillingService(factory, clock, CATALOG, FleetCache(CATALOG))
    return engine, factory, clock, agents, billing


def _place(factory, rental_id, nodes, at, spec=None, extend=False):
    """Placed at `at` on `nodes`, one H100 on each (or, `extend`, those nodes added to it then)."""
    with factory() as u:
        if u.rentals.get(rental_id) is None:
            spec = spec or RentalSpec(gpu_model="H100", gpus=1, nodes=len(nodes))
            u.rentals.add(Rental(rental_id, "ten_a", "pending", spec, T0))
        if not extend:
            assert u.rentals.mark_placed(rental_id, at, RATE * len(nodes))
        allocation = [NodeAllocation(node, 0, 0, (Slice(0, 1000, 1024),)) for node in nodes]
        u.rentals.book(rental_id, allocation, [Booking(node, 0, 0) for node in nodes], at=at, extend=extend)
        u.commit()


def _stop(factory, rental_id, at):
    with factory() as u:
        rental = u.rentals.get(rental_id)
        assert u.rentals.set_state(rental_id, "stopped", expect=(rental.state,), reason=None)
        u.rentals.release(rental_id, at=at)
        u.rentals.add_event(rental_id, RentalEvent(at, "stopped", None, "stopped by the test"))
        u.commit()


def _payables(factory, rental_id):
    with factory() as u:
        txs = [t for t in u.ledger.transactions(None) if t.ref == rental_id and t.kind is TxKind.CHARGE]
    paid: dict[str, int] = {}
    for tx in txs:
        for posting in tx.postings:
            if posting.account.kind is AccountKind.PROVIDER_PAYABLE:
                paid[posting.account.owner] = paid.get(posting.account.owner, 0) + posting.amount_micros
    return paid


def _charged(factory, rental_id):
    with factory() as u:
        txs = [t for t in u.ledger.transactions(None) if t.ref == rental_id and t.kind is TxKind.CHARGE]
    return sum(-p.amount_micros for t in txs for p in t.postings if p.amount_micros < 0)


def _run_on_alpha_then_beta(env, rental_id: str) -> None:
    """An `H100` rental with restarts: 100 s on alpha's node, which is then lost (re-queued, metered at
    200 s), placed again on beta's at 1,000 s and run there 900 s, then metered."""
    _, factory, clock, agents, billing = env
    key = agents.register(agents.create_token(ADMIN, ALPHA)[1], {})[1]
    spec = RentalSpec(gpu_model="H100", gpus=1, restart="on-failure", max_restarts=1)
    _place(factory, rental_id, [ALPHA], T0, spec)
    agents.heartbeat(key, [WorkloadReport(rental_id, "running")], [])  # runs on alpha's node from T0
    clock.at = T0 + 100 * S
    agents.heartbeat(key, [], [])  # its last heartbeat
    clock.at = T0 + 131 * S
    assert agents.reap() == [ALPHA]  # lost: re-queued
    billing.meter(now=T0 + 200 * S)
    clock.at = T0 + 1000 * S
    other = agents.register(agents.create_token(ADMIN, BETA)[1], {})[1]
    _place(factory, rental_id, [BETA], clock.at, spec)  # placed again on beta's node
    agents.heartbeat(other, [WorkloadReport(rental_id, "running")], [])
    clock.at = T0 + 1900 * S
    agents.heartbeat(other, [], [])
    billing.meter()


def test_a_gang_across_two_providers_pays_each_provider_its_nodes_half(env) -> None:
    _, factory, _, _, billing = env
    _place(factory, "rnt_g", [ALPHA, BETA], T0)
    for minutes in (1, 7, 30):  # the meter runs as often as it likes: each provider's total is the same
        billing.meter(now=T0 + minutes * 60 * S)
    _stop(factory, "rnt_g", T0 + 3600 * S)
    billing.meter(now=T0 + 3600 * S)
    charged = charge_micros(2 * RATE, 3600)
    assert _charged(factory, "rnt_g") == charged
    # 5,083,000 to the providers: half each (it all went to alpha, its first node's provider)
    assert _payables(factory, "rnt_g") == {"alpha": 2_541_500, "beta": 2_541_500}
    with factory() as u:
        platform = u.ledger.balances(None)[AccountId.platform_revenue()]
    assert platform == charged - provider_part(charged)
    assert billing.payouts(ADMIN).payouts == [
        Payout("alpha", 2_541_500, (PayoutLine("rnt_g", 2_541_500, 4),)),
        Payout("beta", 2_541_500, (PayoutLine("rnt_g", 2_541_500, 4),)),
    ]
    assert billing.verify(ADMIN)[0].ok


def test_a_replaced_rental_pays_the_provider_of_each_node_for_its_run_there(env) -> None:
    factory = env[1]
    _run_on_alpha_then_beta(env, "rnt_r")
    on_alpha = provider_part(charge_micros(RATE, 100))  # its 100 s on alpha's node
    total = provider_part(charge_micros(RATE, 1000))  # 100 s there + 900 s on beta's
    # beta got nothing: the rental kept paying alpha, its first node's provider, for its run on beta
    assert _payables(factory, "rnt_r") == {"alpha": on_alpha, "beta": total - on_alpha}


def test_a_grown_rental_pays_the_new_nodes_provider_from_its_growth_on(env) -> None:
    _, factory, _, _, billing = env
    _place(factory, "rnt_e", [ALPHA], T0)
    grown_at = T0 + 1800 * S
    _place(factory, "rnt_e", [BETA], grown_at, extend=True)  # grown by a node, beta's, as the Resizer does
    with factory() as u:
        follow_size(u, u.rentals.get("rnt_e"), (1, 1.0), (2, 1.0), grown_at)
        u.commit()
    billing.meter(now=T0 + 2400 * S)
    _stop(factory, "rnt_e", T0 + 3600 * S)
    billing.meter(now=T0 + 3600 * S)
    before = provider_part(charge_micros(RATE, 1800))  # the first half hour, on alpha's node only
    total = provider_part(round_half_up(RATE * 1800 + 2 * RATE * 1800, 3600))
    after = total - before  # the second half hour on both nodes: half each (ties to the first by name)
    assert _payables(factory, "rnt_e") == {"alpha": before + (after + 1) // 2, "beta": after // 2}


def test_a_rental_booked_before_allocations_had_times_pays_its_first_nodes_provider(env) -> None:
    engine, factory, _, _, billing = env
    _place(factory, "rnt_old", [ALPHA, BETA], T0)
    with engine.begin() as connection:  # as migration 0016 left the rows booked before it
        connection.execute(update(AllocationRow).values(booked_at=None))
    _stop(factory, "rnt_old", T0 + 3600 * S)
    billing.meter(now=T0 + 3600 * S)
    assert _payables(factory, "rnt_old") == {"alpha": provider_part(charge_micros(2 * RATE, 3600))}


def test_a_rental_replaced_in_another_region_has_each_regions_energy_and_carbon_on_its_invoice(env) -> None:
    """Its 100 s in cn-north and 900 s in eu-west: each at its own region's PUE and grid (all of it was
    charged at cn-north's, its first node's)."""
    _, factory, clock, _, _ = env
    beta_in_eu = FLEET.replace(
        'provider = "beta"\ntopology = "cn-north/', 'provider = "beta"\ntopology = "eu-west/'
    )
    assert beta_in_eu.count("eu-west/") == 1
    eu_west = '[regions.eu-west]\njurisdiction = "EU"\ngrid_gco2_per_kwh = 250\npue = 1.1\n\n'
    with factory() as u:
        u.fleet.put(eu_west + beta_in_eu, [ALPHA, BETA], T0)
        u.commit()
    _run_on_alpha_then_beta(env, "rnt_r")
    (line,) = InvoiceService(factory, clock, CATALOG, FleetCache(CATALOG)).invoice(ALICE, "2030-01").lines
    assert line.gpu_seconds == 1000 and line.description == "H100-SXM-80GB x 1 in eu-west, cn-north"
    power_w = CATALOG.get("H100-SXM-80GB").tdp_watts * 0.7
    assert line.energy_kwh == round(power_w * (100 * 1.3 + 900 * 1.1) / 3600 / 1000, 3)
    assert line.co2_kg == round(power_w * (100 * 1.3 * 581 + 900 * 1.1 * 250) / 3600 / 1e6, 3)


def test_a_rental_replaced_on_another_model_has_each_models_energy_and_name_on_its_invoice(env) -> None:
    """An `H100` rental re-placed after a lost node from an H100-SXM (100 s) onto an H100-PCIe (900 s): its
    line names both models and its energy weighs each one's TDP by its GPU-seconds (all of it had the
    first node's model and TDP)."""
    _, factory, clock, _, _ = env
    beta_pcie = FLEET.replace(
        'provider = "beta"\ntopology = "cn-north/z1/pod-a/leaf-01"\ncpu_milli = 224000\n'
        'memory_mib = 2097152\ngpus = { model = "H100-SXM-80GB"',
        'provider = "beta"\ntopology = "cn-north/z1/pod-a/leaf-01"\ncpu_milli = 224000\n'
        'memory_mib = 2097152\ngpus = { model = "H100-PCIe"',
    )
    assert beta_pcie.count("H100-PCIe") == 1
    with factory() as u:
        u.fleet.put(beta_pcie, [ALPHA, BETA], T0)
        u.commit()
    _run_on_alpha_then_beta(env, "rnt_m")
    (line,) = InvoiceService(factory, clock, CATALOG, FleetCache(CATALOG)).invoice(ALICE, "2030-01").lines
    assert line.gpu_seconds == 1000 and line.description == "H100-PCIe, H100-SXM-80GB x 1 in cn-north"
    sxm_w, pcie_w = (CATALOG.get(m).tdp_watts * 0.7 for m in ("H100-SXM-80GB", "H100-PCIe"))
    assert line.energy_kwh == round((100 * sxm_w + 900 * pcie_w) * 1.3 / 3600 / 1000, 3)
    assert line.co2_kg == round((100 * sxm_w + 900 * pcie_w) * 1.3 * 581 / 3600 / 1e6, 3)
