"""Billing over a rental's life on the real store (SQLite and PostgreSQL): a re-queued rental is charged for
its runs, not for its time in the queue, and after the gap at the price of its new placement; a resize
re-prices the rental at its new size, its contract-covered GPUs still covered, without drift; a preempting
rental is charged to its notice deadline at most; a live rental to its nodes' latest heartbeat, so a lost one
metered before the reap is not charged past its last heartbeat; an invoice counts the size a rental held."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import agent_service
from suanli.app.agent_records import WorkloadReport
from suanli.app.billing import BillingService
from suanli.app.fleet import FleetCache
from suanli.app.invoices import InvoiceService
from suanli.app.notices import requeue_victim
from suanli.app.records import Booking, Caller, Rental, RentalEvent, RentalSpec, Tenant
from suanli.app.rentals import added_price, follow_size
from suanli.domain.billing.ledger import TxKind
from suanli.domain.billing.money import charge_micros, round_half_up
from suanli.domain.catalog_data import CATALOG
from suanli.domain.plan import NodeAllocation, Slice

FLEET = (Path(__file__).resolve().parents[2] / "examples" / "fleet.toml").read_text()
T0 = datetime(2030, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)
RATE = 2_990_000
NODE, OTHER = "h100-a-01", "l40s-01"
ADMIN = Caller(Tenant("ten_admin", "admin", "admin", T0), "key_admin")
ALICE = Caller(Tenant("ten_a", "a", "tenant", T0), "key_a")


@pytest.fixture
def env(store, clock):
    engine, factory = store
    with factory() as u:
        u.tenants.add(ADMIN.tenant)
        u.tenants.add(ALICE.tenant)
        u.fleet.put(FLEET, [NODE, OTHER], T0)
        u.commit()
    agents = agent_service(engine, clock)
    billing = BillingService(factory, clock, CATALOG, FleetCache(CATALOG))
    return factory, clock, agents, billing


def _key(agents, node):
    _, secret = agents.create_token(ADMIN, node)
    return agents.register(secret, {})[1]


def _place(factory, rental_id, node, at, spec=None, time_limit_at=None):
    with factory() as u:
        if u.rentals.get(rental_id) is None:
            u.rentals.add(
                Rental(rental_id, "ten_a", "pending", spec or RentalSpec(gpu_model="H100", gpus=1), T0)
            )
        assert u.rentals.mark_placed(rental_id, at, RATE, time_limit_at=time_limit_at)
        u.rentals.book(
            rental_id, [NodeAllocation(node, 0, 0, (Slice(0, 1000, 1024),))], [Booking(node, 0, 0)], at=at
        )
        u.commit()


def _charged(factory, rental_id):
    with factory() as u:
        txs = [t for t in u.ledger.transactions(None) if t.ref == rental_id and t.kind is TxKind.CHARGE]
    return sum(-p.amount_micros for t in txs for p in t.postings if p.amount_micros < 0)


def test_a_requeued_rental_is_charged_for_its_runs_not_for_its_time_in_the_queue(env) -> None:
    factory, clock, agents, billing = env
    key = _key(agents, NODE)
    spec = RentalSpec(gpu_model="H100", gpus=1, restart="on-failure", max_restarts=1)
    _place(factory, "rnt_r", NODE, T0, spec)
    agents.heartbeat(key, [WorkloadReport("rnt_r", "running")], [])  # run 1 from T0
    clock.at = T0 + 100 * S
    agents.heartbeat(key, [], [])  # its last heartbeat
    clock.at = T0 + 131 * S
    assert agents.reap() == [NODE]
    with factory() as u:
        assert u.rentals.get("rnt_r").state == "pending"  # re-queued
    billing.meter(now=T0 + 200 * S)
    assert _charged(factory, "rnt_r") == charge_micros(RATE, 100)  # billed to its last run's end
    clock.at = T0 + 1000 * S  # placed again 900 s later, on another node
    other = _key(agents, OTHER)
    _place(factory, "rnt_r", OTHER, clock.at)
    agents.heartbeat(other, [WorkloadReport("rnt_r", "running")], [])  # run 2 from T0+1000
    clock.at = T0 + 1100 * S
    agents.heartbeat(other, [], [])  # confirms it ran to here
    billing.meter()
    # ran 100 s + 100 s; got charge_micros(RATE, 1100): the 900 s in the queue are charged
    assert _charged(factory, "rnt_r") == charge_micros(RATE, 200)
    (line,) = InvoiceService(factory, clock, CATALOG, FleetCache(CATALOG)).invoice(ALICE, "2030-01").lines
    assert line.amount_micros == charge_micros(RATE, 200)
    assert line.gpu_seconds == 200  # nor does its invoice count them (it said 1,100 GPU-seconds)


def test_a_requeued_spot_rental_pays_the_price_of_its_new_placement_after_the_gap(env) -> None:
    factory, clock, agents, billing = env
    key = _key(agents, NODE)
    spec = RentalSpec(gpu_model="H100", gpus=1, restart="on-failure", max_restarts=1)
    _place(factory, "rnt_s", NODE, T0, spec)
    agents.heartbeat(key, [WorkloadReport("rnt_s", "running")], [])
    with factory() as u:  # spot re-pricing during the first placement: a rate history
        u.rentals.change_rate("rnt_s", T0 + 50 * S, 2 * RATE, since=T0, previous=RATE)
        u.commit()
    clock.at = T0 + 100 * S
    agents.heartbeat(key, [], [])
    clock.at = T0 + 131 * S
    assert agents.reap() == [NODE]
    clock.at = T0 + 1000 * S
    other = _key(agents, OTHER)
    _place(factory, "rnt_s", OTHER, clock.at)  # placed again at RATE
    agents.heartbeat(other, [WorkloadReport("rnt_s", "running")], [])
    clock.at = T0 + 1100 * S
    agents.heartbeat(other, [], [])
    billing.meter()
    # 50 s at RATE, 50 s at 2 x RATE, nothing in the queue, 100 s at the new placement's RATE
    assert _charged(factory, "rnt_s") == round_half_up(RATE * 50 + 2 * RATE * 50 + RATE * 100, 3600)


def _place_on(factory, rental_id, node, at, gpus, rate, spec):
    """Place (again) on `gpus` whole GPUs of `node` at `rate`, quoted at that rate, as the leader does."""
    quote = {"final_micros_per_hour": rate, "base_micros_per_hour": rate, "contract_covered_gpu_milli": 0}
    with factory() as u:
        if u.rentals.get(rental_id) is None:
            u.rentals.add(Rental(rental_id, "ten_a", "pending", spec, T0))
        assert u.rentals.mark_placed(rental_id, at, rate, quote, size=(1, float(gpus)))
        slices = tuple(Slice(i, 1000, 1024) for i in range(gpus))
        bookings = [Booking(node, i, 0) for i in range(gpus)]
        u.rentals.book(rental_id, [NodeAllocation(node, 0, 0, slices)], bookings, at=at)
        u.commit()


def test_a_rental_placed_again_at_another_size_pays_each_runs_rate_and_a_resize_counts_from_the_new_size(
    env,
) -> None:
    """Run 1 on 1 GPU, run 2 on 2 GPUs at twice the rate: the meter billed run 1's seconds at run 2's rate
    (no rate row was written at the re-placement), the invoice counted 2 GPUs for both runs, and a resize
    after it priced the new size against run 1's (4 GPUs at 8 x RATE, not 4 x RATE)."""
    factory, clock, agents, billing = env
    key = _key(agents, NODE)
    spec = RentalSpec(gpu_model="H100", gpus=2, restart="on-failure", max_restarts=1, min_gpus=1)
    _place_on(factory, "rnt_e", NODE, T0, 1, RATE, spec)
    agents.heartbeat(key, [WorkloadReport("rnt_e", "running")], [])
    clock.at = T0 + 100 * S
    agents.heartbeat(key, [], [])
    billing.meter(now=clock.at)  # run 1's seconds posted while it ran
    clock.at = T0 + 131 * S
    assert agents.reap() == [NODE]
    clock.at = T0 + 1000 * S
    other = _key(agents, OTHER)
    _place_on(factory, "rnt_e", OTHER, clock.at, 2, 2 * RATE, spec)
    agents.heartbeat(other, [WorkloadReport("rnt_e", "running")], [])
    clock.at = T0 + 1100 * S
    agents.heartbeat(other, [], [])
    billing.meter()
    assert _charged(factory, "rnt_e") == charge_micros(RATE, 100) + charge_micros(2 * RATE, 100)
    (line,) = InvoiceService(factory, clock, CATALOG, FleetCache(CATALOG)).invoice(ALICE, "2030-01").lines
    assert line.gpu_seconds == 1 * 100 + 2 * 100
    with factory() as u:  # grown on its node to 4 GPUs, as the Resizer does (`follow_size`)
        follow_size(u, u.rentals.get("rnt_e"), (1, 2.0), (1, 4.0), clock.at)
        u.commit()
    with factory() as u:
        assert u.rentals.get("rnt_e").price_micros_per_hour == 4 * RATE


def test_a_requeued_rental_placed_again_is_billed_from_its_placement_until_its_run_is_reported(env) -> None:
    factory, clock, agents, billing = env
    key = _key(agents, NODE)
    spec = RentalSpec(gpu_model="H100", gpus=1, restart="on-failure", max_restarts=1)
    _place(factory, "rnt_q", NODE, T0, spec)
    agents.heartbeat(key, [WorkloadReport("rnt_q", "running")], [])
    clock.at = T0 + 100 * S
    agents.heartbeat(key, [], [])
    clock.at = T0 + 131 * S
    assert agents.reap() == [NODE]
    _place(factory, "rnt_q", OTHER, T0 + 1000 * S)  # no run reported there yet
    billing.meter(now=T0 + 1030 * S)
    assert _charged(factory, "rnt_q") == charge_micros(RATE, 130)


def _requeue_at(factory, rental_id, deadline, now):
    """Preempt a rental that checkpoints with notice to `deadline`; the cycle at `now` re-queues it."""
    with factory() as u:
        assert u.rentals.give_notice(rental_id, "rnt_other", deadline, expect=("running",))
        u.commit()
    with factory() as u:
        assert requeue_victim(u, u.rentals.get(rental_id), now) == 1
        u.commit()


def test_a_rental_placed_again_on_its_node_has_a_run_per_placement_each_billed(env) -> None:
    """Preempted twice, a rental that checkpoints comes back to the same node each time: three runs there,
    each billed from its start to its end, none of the time in the queue. The first ends when its agent says
    so (it left under notice), the second, whose agent said nothing, at its deadline, and the agent's late
    word on it, after the third began, changes neither the third run nor the rental."""
    factory, clock, agents, billing = env
    key = _key(agents, NODE)
    spec = RentalSpec(gpu_model="H100", gpus=1, tier="spot", checkpoints=True)
    _place(factory, "rnt_c", NODE, T0, spec)
    agents.heartbeat(key, [WorkloadReport("rnt_c", "running", placement=1)], [])  # run 1 from T0
    clock.at = T0 + 100 * S
    with factory() as u:
        u.rentals.give_notice("rnt_c", "rnt_other", T0 + 130 * S, expect=("running",))
        u.commit()
    agents.heartbeat(key, [WorkloadReport("rnt_c", "stopped", placement=1)], [])  # saved and left at 100
    with factory() as u:
        assert requeue_victim(u, u.rentals.get("rnt_c"), T0 + 101 * S) == 1
        u.commit()
    _place(factory, "rnt_c", NODE, T0 + 1000 * S)  # 900 s in the queue, then the same node again
    clock.at = T0 + 1000 * S
    agents.heartbeat(key, [WorkloadReport("rnt_c", "running", placement=2)], [])  # run 2 from 1000
    clock.at = T0 + 1200 * S
    agents.heartbeat(key, [WorkloadReport("rnt_c", "running", placement=2)], [])
    _requeue_at(factory, "rnt_c", T0 + 1230 * S, T0 + 1231 * S)  # its agent silent: ends at its deadline
    _place(factory, "rnt_c", NODE, T0 + 2000 * S)
    clock.at = T0 + 2000 * S
    agents.heartbeat(key, [WorkloadReport("rnt_c", "running", placement=3)], [])  # run 3 from 2000
    clock.at = T0 + 2050 * S
    late = [WorkloadReport("rnt_c", "stopped", placement=2), WorkloadReport("rnt_c", "running", placement=3)]
    agents.heartbeat(key, late, [])
    with agents.uow() as u:
        assert u.rentals.get("rnt_c").state == "running"
        runs = [(r.placement, r.state, r.started_at, r.ended_at) for r in u.agents.runs("rnt_c")]
    assert runs == [
        (1, "stopped", T0, T0 + 100 * S),
        (2, "stopped", T0 + 1000 * S, T0 + 1230 * S),
        (3, "running", T0 + 2000 * S, None),
    ]
    billing.meter()  # to the heartbeat at 2050
    assert _charged(factory, "rnt_c") == charge_micros(RATE, 100 + 230 + 50)
    clock.at = T0 + 2100 * S
    agents.heartbeat(key, [WorkloadReport("rnt_c", "succeeded", exit_code=0, placement=3)], [])
    billing.meter()
    assert _charged(factory, "rnt_c") == charge_micros(RATE, 100 + 230 + 100)
    (line,) = InvoiceService(factory, clock, CATALOG, FleetCache(CATALOG)).invoice(ALICE, "2030-01").lines
    assert line.gpu_seconds == 430


def test_a_contract_covered_rental_grown_from_1_to_4_gpus_pays_on_demand_for_the_3_uncovered(env) -> None:
    factory, clock, _, _ = env
    # 1 H100 fully drawn from the tenant's 1-GPU compute future: placed at 0 marginal price
    quote = {"final_micros_per_hour": 0, "base_micros_per_hour": RATE, "contract_covered_gpu_milli": 1000}
    with factory() as u:
        u.rentals.add(Rental("rnt_c", "ten_a", "pending", RentalSpec(gpu_model="H100", gpus=1), T0))
        assert u.rentals.mark_placed("rnt_c", T0, 0, quote)
        u.commit()
    clock.at = T0 + 3600 * S
    with factory() as u:  # the Resizer grows it to 4 GPUs per node (app/resizing.py -> follow_size)
        follow_size(u, u.rentals.get("rnt_c"), (1, 1.0), (1, 4.0), clock.at)
        u.commit()
    with factory() as u:
        rate = u.rentals.get("rnt_c").price_micros_per_hour
    # the 3 GPUs the 1-GPU contract does not cover pay on-demand; got 0 (0 x 4000 // 1000): free forever
    assert rate == 3 * RATE


def test_the_spend_cap_check_before_a_growth_prices_the_gpus_a_contract_does_not_cover(env) -> None:
    """The Resizer checks a growth against the tenant's spend caps at what it will add to the rate
    (`added_price`): 3 on-demand GPUs for a rental whose 1 GPU a contract covers (it was priced at 0 x 3)."""
    factory, _, _, _ = env
    quote = {"final_micros_per_hour": 0, "base_micros_per_hour": RATE, "contract_covered_gpu_milli": 1000}
    with factory() as u:
        u.rentals.add(Rental("rnt_c", "ten_a", "pending", RentalSpec(gpu_model="H100", gpus=1), T0))
        assert u.rentals.mark_placed("rnt_c", T0, 0, quote)
        u.commit()
    with factory() as u:
        rental = u.rentals.get("rnt_c")
        assert added_price(u, rental, (1, 1.0), (1, 4.0), T0) == 3 * RATE
        assert added_price(u, rental, (1, 4.0), (1, 1.0), T0) == 0  # a shrink adds nothing


def test_resizing_down_and_up_again_comes_back_to_the_same_rate(env) -> None:
    factory, _, _, _ = env
    quote = {"final_micros_per_hour": 1000, "base_micros_per_hour": 1000, "contract_covered_gpu_milli": 0}
    with factory() as u:
        u.rentals.add(Rental("rnt_d", "ten_a", "pending", RentalSpec(gpu_model="H100", gpus=3), T0))
        assert u.rentals.mark_placed("rnt_d", T0, 1000, quote)
        u.commit()
    for offset, (before, after) in enumerate((((1, 3.0), (1, 2.0)), ((1, 2.0), (1, 3.0))), start=1):
        with factory() as u:
            follow_size(u, u.rentals.get("rnt_d"), before, after, T0 + offset * 60 * S)
            u.commit()
    with factory() as u:
        rental = u.rentals.get("rnt_d")
    assert rental.price_micros_per_hour == 1000  # was 999: 1000 x 2 // 3 = 666, then 666 x 3 // 2
    assert rental.quote["final_micros_per_hour"] == 1000


def test_a_preempting_rental_metered_past_its_deadline_before_it_ends_is_charged_to_the_deadline(env) -> None:
    factory, _, _, billing = env
    _place(factory, "rnt_p", NODE, T0)
    with factory() as u:
        u.rentals.give_notice("rnt_p", "rnt_x", T0 + 120 * S, expect=("placed",))
        u.commit()
    billing.meter(now=T0 + 150 * S)  # past the deadline, before the cycle ends it
    with factory() as u:
        u.rentals.set_state("rnt_p", "preempted", expect=("preempting",), reason=None)
        u.rentals.add_event("rnt_p", RentalEvent(T0 + 151 * S, "preempted"))
        u.commit()
    billing.meter(now=T0 + 200 * S)
    assert _charged(factory, "rnt_p") == charge_micros(RATE, 120)  # got charge_micros(RATE, 150)


def test_a_lost_rental_metered_before_the_reap_is_charged_to_its_last_heartbeat_only(env) -> None:
    factory, clock, agents, billing = env
    key = _key(agents, NODE)
    _place(factory, "rnt_l", NODE, T0)
    agents.heartbeat(key, [WorkloadReport("rnt_l", "running")], [])
    clock.at = T0 + 3600 * S
    agents.heartbeat(key, [], [])  # the last heartbeat
    clock.at = T0 + 3625 * S
    billing.meter()  # the 30-s meter pass runs while the node is silent but not yet marked down
    clock.at = T0 + 3631 * S
    assert agents.reap() == [NODE]  # lost, "billing ends there" (the last heartbeat)
    billing.meter()
    assert _charged(factory, "rnt_l") == charge_micros(RATE, 3600)  # got charge_micros(RATE, 3625)


def test_a_lost_gang_is_billed_to_its_lost_node_s_last_heartbeat_whenever_its_other_agents_report(
    env,
) -> None:
    """Two nodes; one goes silent. Lost at the reap, the rental is billed to that node's last heartbeat: the
    other node's run ends there too, and its agent's word that it stopped, later, moves nothing."""
    factory, clock, agents, billing = env
    keys = {node: _key(agents, node) for node in (NODE, OTHER)}
    with factory() as u:
        u.rentals.add(Rental("rnt_g", "ten_a", "pending", RentalSpec(gpu_model="H100", gpus=1, nodes=2), T0))
        assert u.rentals.mark_placed("rnt_g", T0, RATE)
        parts = [NodeAllocation(node, 0, 0, (Slice(0, 1000, 1024),)) for node in (NODE, OTHER)]
        u.rentals.book("rnt_g", parts, [Booking(NODE, 0, 0), Booking(OTHER, 0, 0)], at=T0)
        u.commit()
    for key in keys.values():
        agents.heartbeat(key, [WorkloadReport("rnt_g", "running")], [])
    clock.at = T0 + 100 * S
    agents.heartbeat(keys[NODE], [], [])  # NODE's last heartbeat
    clock.at = T0 + 125 * S
    agents.heartbeat(keys[OTHER], [WorkloadReport("rnt_g", "running")], [])
    clock.at = T0 + 131 * S
    assert agents.reap() == [NODE]
    clock.at = T0 + 140 * S
    agents.heartbeat(
        keys[OTHER], [WorkloadReport("rnt_g", "stopped", exit_code=143)], []
    )  # killed, said late
    with agents.uow() as u:
        assert u.rentals.get("rnt_g").state == "lost"
        assert {r.node: r.ended_at for r in u.agents.runs("rnt_g")} == {
            NODE: T0 + 100 * S,
            OTHER: T0 + 100 * S,
        }
    billing.meter()
    assert _charged(factory, "rnt_g") == charge_micros(RATE, 100)  # got charge_micros(RATE, 140)


def test_an_invoice_counts_gpu_seconds_at_the_size_held_not_at_a_resize_it_never_got(env) -> None:
    factory, clock, agents, billing = env
    key = _key(agents, NODE)
    _place(factory, "rnt_z", NODE, T0)  # 1 H100, billed at RATE (1 GPU)
    agents.heartbeat(key, [WorkloadReport("rnt_z", "running")], [])
    clock.at = T0 + 600 * S
    with factory() as u:  # PATCH gpus 1 -> 4 (RentalService.resize): the spec changes at once, the GPUs
        rental = u.rentals.get("rnt_z")  # only when the Resizer finds them free; here it never does
        u.rentals.update_spec("rnt_z", replace(rental, spec=replace(rental.spec, gpus=4)))
        u.commit()
    clock.at = T0 + 3600 * S
    agents.heartbeat(key, [], [])
    billing.meter()
    (line,) = InvoiceService(factory, clock, CATALOG, FleetCache(CATALOG)).invoice(ALICE, "2030-01").lines
    assert line.amount_micros == charge_micros(RATE, 3600)  # charged for 1 GPU-hour
    assert line.gpu_seconds == 3600  # got 14400: 4 GPUs for the whole hour, energy and CO2 x4 too


def test_spend_so_far_counts_what_the_meter_has_not_posted_at_the_rates_in_force(env) -> None:
    """Spend caps and budgets read what a tenant spent: the ledger's charges plus what its rentals ran up that
    the meter has not posted (its interval), read as the meter would charge it now: to the nodes' last
    heartbeat (a silent node's time may never be charged), each at the rates in force over the time (spot
    re-pricing, a resize), so a later meter pass changes nothing. The time from the heartbeat on is what the
    rental commits (`BillingWindow`). Reads stop at one ledger transaction, so a charge posted between them is
    counted once."""
    from suanli.app.limits import spend_now
    from suanli.app.usage import open_spend
    from suanli.domain.quotas import BillingWindow

    factory, clock, agents, billing = env
    key = _key(agents, NODE)
    _place(factory, "rnt_c", NODE, T0)
    agents.heartbeat(key, [WorkloadReport("rnt_c", "running")], [])
    with factory() as u:
        u.rentals.change_rate("rnt_c", T0 + 50 * S, 2 * RATE, since=T0, previous=RATE)
        u.commit()
    clock.at = T0 + 60 * S
    agents.heartbeat(key, [], [])
    billing.meter()  # posts 50 s at RATE and 10 s at 2 x RATE
    clock.at = T0 + 100 * S
    agents.heartbeat(key, [], [])  # the last heartbeat: the meter would post to here, not to now
    now_s = int((T0 + 130 * S).timestamp())
    to_heartbeat = round_half_up(RATE * 50 + 2 * RATE * 50, 3600)
    with factory() as u:
        spent, windows = spend_now(u, ["ten_a"], now_s)
        assert spent["ten_a"].day_micros == to_heartbeat
        assert windows == {"rnt_c": BillingWindow((T0 + 100 * S).timestamp(), None)}  # committed from there
        before = u.ledger.head_seq()
    clock.at = T0 + 130 * S
    agents.heartbeat(key, [], [])
    billing.meter()  # posts to the new heartbeat: what was spent, and the 30 s it had committed
    whole = round_half_up(RATE * 50 + 2 * RATE * 80, 3600)
    assert _charged(factory, "rnt_c") == whole
    with factory() as u:
        assert spend_now(u, ["ten_a"], now_s)[0]["ten_a"].month_micros == whole
        # reads bounded by the head seen before the meter posted: the charge is still unposted to them
        first_pass = round_half_up(RATE * 50 + 2 * RATE * 10, 3600)
        assert u.ledger.charged_since(["ten_a"], 0, through_seq=before) == {"ten_a": first_pass}
        found = open_spend(u, ["ten_a"], now_s, before)
        assert found.owed_micros == {"ten_a": whole - first_pass}


def test_a_rental_is_billed_no_further_than_its_time_limit_whatever_its_stop_takes(env) -> None:
    """Declared 90 s: the leader stops it at its limit, its agent confirms 5 s later. It was billed the 95 s,
    past the dry run's "at most ... to its time limit"; the stop's lag past the limit is not its doing."""
    from suanli.app.rentals import stop_overdue

    factory, clock, agents, billing = env
    key = _key(agents, NODE)
    _place(factory, "rnt_t", NODE, T0, time_limit_at=T0 + 90 * S)
    agents.heartbeat(key, [WorkloadReport("rnt_t", "running")], [])
    clock.at = T0 + 91 * S
    with factory() as u:
        assert stop_overdue(u, clock.now()) == ["rnt_t"]
        u.commit()
    clock.at = T0 + 95 * S
    agents.heartbeat(key, [WorkloadReport("rnt_t", "stopped")], [])
    billing.meter()
    with factory() as u:
        assert u.rentals.get("rnt_t").state == "stopped"
    assert _charged(factory, "rnt_t") == charge_micros(RATE, 90)  # got charge_micros(RATE, 95)


def test_a_rental_being_stopped_when_its_node_goes_down_is_billed_to_its_last_heartbeat(env) -> None:
    """Its agent went silent, then its tenant stopped it: the reap ends it `stopped` (it was being stopped),
    saying "billing ends there" at the last heartbeat; it was billed to the reap, as the end event's time."""
    from suanli.app.rentals import stop_in

    factory, clock, agents, billing = env
    key = _key(agents, NODE)
    _place(factory, "rnt_d", NODE, T0)
    agents.heartbeat(key, [WorkloadReport("rnt_d", "running")], [])
    clock.at = T0 + 77 * S
    agents.heartbeat(key, [], [])  # its last heartbeat
    clock.at = T0 + 80 * S
    with factory() as u:
        stop_in(u, u.rentals.get("rnt_d"), clock.now(), "by its tenant")
        u.commit()
    clock.at = T0 + 110 * S
    assert agents.reap() == [NODE]
    billing.meter()
    with factory() as u:
        rental = u.rentals.get("rnt_d")
        assert rental.state == "stopped" and "billing ends there" in u.rentals.events("rnt_d")[-1].message
    assert _charged(factory, "rnt_d") == charge_micros(RATE, 77)  # got charge_micros(RATE, 110)


def test_a_rental_placed_on_a_node_gone_silent_is_not_charged_past_its_last_heartbeat(env) -> None:
    """Placed after its node's last heartbeat (the node died before the reaper saw it), its workload never
    started: it was charged from its placement to each meter pass (no run of it bounded the charge), and a
    charge is never taken back once it is found lost."""
    factory, clock, agents, billing = env
    clock.at = T0
    key = _key(agents, NODE)
    agents.heartbeat(key, [], [])  # the node's last word
    _place(factory, "rnt_z", NODE, T0 + 5 * S)
    billing.meter(now=T0 + 12 * S)
    assert _charged(factory, "rnt_z") == 0
    clock.at = T0 + 20 * S
    agents.heartbeat(key, [WorkloadReport("rnt_z", "running")], [])  # it was only late: its run starts
    clock.at = T0 + 30 * S
    agents.heartbeat(key, [], [])
    billing.meter(now=T0 + 30 * S)
    with factory() as u:
        ((started, _),) = u.rentals.run_spans(["rnt_z"])["rnt_z"]
    assert started >= T0 + 5 * S
    assert _charged(factory, "rnt_z") == charge_micros(RATE, int((T0 + 30 * S - started).total_seconds()))
