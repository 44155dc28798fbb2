"""Compute futures: overbooking is refused; an open contract's holder gets its capacity within the notice
period even when spot filled the fleet; held capacity is kept from on-demand; spot floors give notice."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.domain.catalog_data import CATALOG
from suanli.domain.contracts import (
    Contract,
    Maintenance,
    check_contract,
    contract_shortfalls,
    deepened_shortfalls,
    fleet_capacity,
    open_holds,
    pools_of,
    short_contracts,
    transfer,
)
from suanli.domain.errors import ContractError, RequestError
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.plan import Placement, Reason
from suanli.domain.policies import BestFitPolicy
from suanli.domain.preemption import PreemptionConfig, below_floor
from suanli.domain.queue_order import Mode, Order, QueueConfig
from suanli.domain.queueing import Gates, admit
from suanli.domain.request import Constraints, GpuSelector, MigSlice, Request, Tier, WholeGpus
from suanli.domain.running import SPOT_FLOOR, Running
from suanli.domain.scheduler import place
from suanli.domain.snapshot import Snapshot

HOUR = 3600.0

MODEL = "H100-SXM-80GB"
REGION = Region("r", "US", 400.0, 1.2)
POLICY = BestFitPolicy()
CONFIG = QueueConfig(mode=Mode.BACKFILL, order=Order.PRIORITY, preemption=PreemptionConfig())
SELECT = GpuSelector(models=frozenset({MODEL}))


def fleet_of(nodes: int, gpus: int = 8) -> Fleet:
    return Fleet(
        {"r": REGION},
        tuple(
            Node(f"n{i}", "r", ("r", "z", "p", "l"), 64_000, 512_000, MODEL, gpus, GpuMode.WHOLE)
            for i in range(nodes)
        ),
    )


def contract(cid: str, gpus: int, start: float, end: float, tenant: str = "acme") -> Contract:
    return Contract(cid, tenant, MODEL, "r", gpus, start, end)


def ask(rid: str, gpus: int, tenant: str = "acme", tier: Tier = Tier.ON_DEMAND, at: float = 0.0, bid=None):
    return Request(
        rid,
        WholeGpus(gpus),
        selector=SELECT,
        tenant=tenant,
        tier=tier,
        submitted_at_s=at,
        bid_micros_per_hour=bid,
    )


def run(snapshot: Snapshot, request: Request, at: float = 0.0) -> Running:
    placement = place(snapshot, request, POLICY)
    assert isinstance(placement, Placement)
    return Running(request, placement, at)


CAPACITY = fleet_capacity(fleet_of(4))  # 32 GPUs


@pytest.mark.parametrize(
    ("new", "existing", "down", "ok"),
    [
        pytest.param(contract("n", 32, 0, 10), [], [], True, id="whole-fleet"),
        pytest.param(contract("n", 33, 0, 10), [], [], False, id="more-than-the-fleet"),
        pytest.param(contract("n", 16, 5, 15), [contract("a", 16, 0, 10)], [], True, id="fits-beside"),
        pytest.param(contract("n", 17, 5, 15), [contract("a", 16, 0, 10)], [], False, id="overlap-overbooks"),
        pytest.param(contract("n", 32, 10, 20), [contract("a", 32, 0, 10)], [], True, id="back-to-back"),
        pytest.param(
            contract("n", 30, 0, 10), [], [Maintenance("n0", MODEL, "r", 8, 8, 9)], False, id="maintenance"
        ),
        pytest.param(
            contract("n", 24, 0, 10),
            [],
            [Maintenance("n0", MODEL, "r", 8, 8, 9)],
            True,
            id="maintenance-fits",
        ),
        pytest.param(
            contract("n", 8, 12, 14),
            [contract("a", 16, 0, 20), contract("b", 16, 13, 30)],
            [],
            False,
            id="peak-inside-window",
        ),
        pytest.param(  # one node's two overlapping windows take its 8 GPUs once, not 16
            contract("n", 24, 12, 14),
            [],
            [Maintenance("n0", MODEL, "r", 8, 10, 40), Maintenance("n0", MODEL, "r", 8, 11, 35)],
            True,
            id="one-node-two-windows",
        ),
    ],
)
def test_admission_refuses_overbooking(new, existing, down, ok):
    if ok:
        check_contract(new, existing, CAPACITY, down)
    else:
        with pytest.raises(ContractError, match="would overbook"):
            check_contract(new, existing, CAPACITY, down)


def test_a_refusal_says_when_and_why_in_words() -> None:
    """No contract id (a quote has none yet), the instant as a UTC time, and a pool the fleet lacks named."""
    with pytest.raises(ContractError) as overbooked:
        check_contract(contract("new", 33, 3600, 7200), [], CAPACITY)
    assert str(overbooked.value) == (
        f"33 x {MODEL} in r would overbook it from 1970-01-01 01:00 UTC: 32 GPUs, 0 of them out of service "
        "(in maintenance or drained), 0 already contracted"
    )
    elsewhere = replace(contract("new", 1, 0, 10), region="mars")
    with pytest.raises(ContractError, match=f"the fleet has no {MODEL} in mars to contract"):
        check_contract(elsewhere, [], CAPACITY)


@settings(max_examples=60, deadline=None)
@given(windows=st.lists(st.tuples(st.integers(0, 20), st.integers(1, 10), st.integers(1, 16)), max_size=8))
def test_admitted_contracts_never_exceed_capacity_at_any_instant(windows):
    admitted: list[Contract] = []
    for i, (start, length, gpus) in enumerate(windows):
        new = contract(f"c{i}", gpus, start, start + length)
        try:
            check_contract(new, admitted, CAPACITY)
        except ContractError:
            continue
        admitted.append(new)
    for t in range(0, 31):
        assert sum(c.gpus for c in admitted if c.open_at(t)) <= 32


def test_transfer_moves_the_contract_until_it_ends():
    c = contract("c", 8, 0, 100)
    assert transfer(c, "beta", 50).tenant == "beta"
    with pytest.raises(ContractError, match=r"ended at 1970-01-01 00:01:40 UTC; nothing to transfer"):
        transfer(c, "beta", 100)


def test_holder_gets_its_capacity_within_the_notice_period_when_spot_filled_the_fleet():
    snap = Snapshot(fleet_of(2), CATALOG)
    spot = [run(snap, ask(f"s{i}", 8, tenant="crowd", tier=Tier.SPOT, bid=10**6)) for i in range(2)]
    gates = Gates(contracts=[contract("c", 8, 100, 200)])
    claim = ask("claim", 8, at=120)
    first = admit(snap, [claim], spot, POLICY, 120, CONFIG, gates=gates)
    assert first.promoted == ("claim",)
    (preemption,) = first.preemptions
    assert preemption.deadline_s <= 120 + 30 and len(preemption.victims) == 1
    victim = next(r for r in spot if r.request.id == preemption.victims[0].request_id)
    for allocation in victim.placement.nodes:  # the kill at the deadline
        snap.release(allocation)
    rest = [r for r in spot if r is not victim]
    second = admit(
        snap, [claim], rest, POLICY, preemption.deadline_s, CONFIG, promised={"claim"}, gates=gates
    )
    assert [p.request_id for p in second.placements] == ["claim"]


def test_a_holders_running_claim_is_reserved_so_its_next_claim_preempts_someone_else():
    snap = Snapshot(fleet_of(2), CATALOG)
    crowd8 = run(snap, ask("crowd8", 8, tenant="crowd"), at=0)
    crowd4 = run(snap, ask("crowd4", 4, tenant="crowd"), at=0)
    first_half = run(snap, ask("first-half", 4, tenant="alpha"), at=110)  # cheapest to evict: newest
    gates = Gates(contracts=[contract("A", 8, 100, 200, tenant="alpha")])
    second = ask("second-half", 4, tenant="alpha", at=120)
    decision = admit(snap, [second], [crowd8, crowd4, first_half], POLICY, 120, CONFIG, gates=gates)
    assert decision.promoted == ("second-half",)
    (preemption,) = decision.preemptions
    assert [v.request_id for v in preemption.victims] == ["crowd4"]


def test_one_holders_claim_never_preempts_another_holders_running_claim():
    snap = Snapshot(fleet_of(2), CATALOG)
    older = run(snap, ask("older", 8, tenant="crowd"), at=0)
    alphas = run(snap, ask("alphas", 8, tenant="alpha"), at=110)  # lost fewer GPU-seconds than `older`
    gates = Gates(
        contracts=[contract("A", 8, 100, 200, tenant="alpha"), contract("B", 8, 100, 200, tenant="beta")]
    )
    decision = admit(
        snap, [ask("betas", 8, tenant="beta", at=120)], [older, alphas], POLICY, 120, CONFIG, gates=gates
    )
    (preemption,) = decision.preemptions
    assert [v.request_id for v in preemption.victims] == ["older"]
    after = admit(
        snap, [ask("betas", 8, tenant="beta", at=120)], [older, alphas], POLICY, 250, CONFIG, gates=gates
    )
    assert after.preemptions == ()  # the windows closed: both on demand, nothing to preempt


def test_a_holders_contracts_in_one_pool_hold_for_it_together():
    """Two contracts of 4 in one pool, as billing covers them: the holder's request for 8 is `reserved`
    (it preempts the crowd's on-demand), and once it runs on 8 nothing more is held back, so another
    tenant's 8 start beside it (one contract's hold stayed, and that tenant waited on 8 idle GPUs)."""
    snap = Snapshot(fleet_of(2), CATALOG)
    crowd = [run(snap, ask(f"crowd{i}", 8, tenant="crowd"), at=0) for i in range(2)]
    gates = Gates(contracts=[contract("c1", 4, 100, 200), contract("c2", 4, 100, 200)])
    decision = admit(snap, [ask("eight", 8, at=110)], crowd, POLICY, 120, CONFIG, gates=gates)
    assert decision.promoted == ("eight",) and len(decision.preemptions) == 1
    snap = Snapshot(fleet_of(2), CATALOG)
    eight = run(snap, ask("eight", 8), at=120)
    holds = open_holds(gates.contracts, 130, [(eight.request, eight.placement.nodes)], pools_of(snap))
    assert holds.claimed == {"c1": 4, "c2": 4} and holds.claiming == {"eight"}
    beside = admit(snap, [ask("other", 8, tenant="beta", at=125)], [eight], POLICY, 130, CONFIG, gates=gates)
    assert [p.request_id for p in beside.placements] == ["other"]


def test_held_capacity_is_kept_from_on_demand_but_spot_may_borrow_it():
    snap = Snapshot(fleet_of(2), CATALOG)
    gates = Gates(contracts=[contract("c", 8, 0, 100)])
    queue = [ask("od1", 8, tenant="beta", at=1), ask("od2", 8, tenant="beta", at=2)]
    decision = admit(snap, queue, [], POLICY, 10, CONFIG, gates=gates)
    assert [p.request_id for p in decision.placements] == ["od1"]
    assert [(p.request_id, p.reason) for p in decision.pending] == [("od2", Reason.CONTRACT_HOLD)]
    borrow = admit(
        snap, [ask("sp", 8, tenant="beta", tier=Tier.SPOT, at=3)], [], POLICY, 10, CONFIG, gates=gates
    )
    assert [p.request_id for p in borrow.placements] == ["sp"]


def test_beyond_the_contracted_count_the_holder_is_on_demand():
    snap = Snapshot(fleet_of(4), CATALOG)
    gates = Gates(contracts=[contract("c", 8, 0, 100)])
    decision = admit(snap, [ask("a", 8, at=1), ask("b", 8, at=2)], [], POLICY, 10, CONFIG, gates=gates)
    assert decision.promoted == ("a",)
    assert len(decision.placements) == 2


def test_a_holders_request_larger_than_its_contract_uses_what_is_held_for_it():
    """A holder of 8 asks 16 on 16 free GPUs: the 8 held for it are not held back from it (it waited with
    `contract_hold` until the window closed). Running, it covers the contract's 8 (`claiming`), so nothing
    more is held: on 24 GPUs another tenant's 8 start in the next cycle, and the holder's further 8 are
    on-demand. Another tenant's 16 on the 16 still waits for the hold."""
    gates = Gates(contracts=[contract("c", 8, 0, 100)])
    gang = replace(ask("big", 8, at=1), node_count=2)
    snap = Snapshot(fleet_of(2), CATALOG)
    decision = admit(snap, [gang], [], POLICY, 10, CONFIG, gates=gates)
    assert [p.request_id for p in decision.placements] == ["big"] and decision.promoted == ()
    snap = Snapshot(fleet_of(2), CATALOG)
    other = replace(ask("other", 8, tenant="beta", at=1), node_count=2)
    decision = admit(snap, [other], [], POLICY, 10, CONFIG, gates=gates)
    assert [(p.request_id, p.reason) for p in decision.pending] == [("other", Reason.CONTRACT_HOLD)]

    snap = Snapshot(fleet_of(3), CATALOG)
    running = run(snap, gang, at=10)
    queue = [ask("beta8", 8, tenant="beta", at=20), ask("more", 8, at=21)]
    decision = admit(snap, queue, [running], POLICY, 30, CONFIG, gates=gates)
    assert [p.request_id for p in decision.placements] == ["beta8"]  # the one node left
    assert decision.promoted == ()  # the contract is used: the holder's next 8 are on-demand
    holds = open_holds(gates.contracts, 30, [(running.request, running.placement.nodes)], pools_of(snap))
    assert holds.claimed == {"c": 8} and holds.claiming == {"big"} and holds.held() == {(MODEL, "r"): 0.0}


def test_spot_below_the_floor_waits_and_running_spot_below_it_gets_notice():
    snap = Snapshot(fleet_of(1), CATALOG)
    low = run(snap, ask("low", 4, tier=Tier.SPOT, bid=1_000_000))
    high = run(snap, ask("high", 2, tier=Tier.SPOT, bid=3_000_000))
    gates = Gates(spot_floor=lambda model, region: 2_000_000)
    queue = [ask("cheap", 1, tier=Tier.SPOT, bid=1_500_000), ask("fine", 1, tier=Tier.SPOT, bid=2_500_000)]
    decision = admit(snap, queue, [low, high], POLICY, 50, CONFIG, gates=gates)
    assert [p.request_id for p in decision.placements] == ["fine"]
    assert [(p.request_id, p.reason) for p in decision.pending] == [("cheap", Reason.BID_BELOW_FLOOR)]
    (eviction,) = decision.floor_evictions
    assert eviction.request_id == "low" and eviction.deadline_s == 80
    noticed = Running(low.request, low.placement, 0, SPOT_FLOOR, 80)
    assert below_floor([noticed, high], lambda r: 2_000_000, 60) == ()


def test_spot_without_a_bid_pays_the_spot_price_so_the_floor_neither_holds_nor_evicts_it():
    """`gated` lets a spot request with no bid pass the floor; `below_floor` read the missing bid as 0 and
    gave the same rental notice in the next cycle."""
    snap = Snapshot(fleet_of(1), CATALOG)
    gates = Gates(spot_floor=lambda model, region: 2_000_000)
    first = admit(snap, [ask("nobid", 4, tier=Tier.SPOT)], [], POLICY, 10, CONFIG, gates=gates)
    assert [p.request_id for p in first.placements] == ["nobid"]
    snap = Snapshot(fleet_of(1), CATALOG)
    running = run(snap, ask("nobid", 4, tier=Tier.SPOT))
    later = admit(snap, [], [running], POLICY, 20, CONFIG, gates=gates)
    assert later.floor_evictions == ()


def test_a_spot_bid_lands_only_in_pools_whose_floor_it_meets():
    """An H100 node (floor 2.00/GPU-h) and an L40S node (floor 0.40): a 1.00 bid that may take either goes
    to the L40S, and while the L40S is taken it waits rather than pay 1.00 for an H100. It was placed on the
    H100, below that pool's floor, and never given notice (its bid had not fallen)."""
    nodes = (
        Node("h100", "r", ("r", "z", "p", "l"), 64_000, 512_000, MODEL, 8, GpuMode.WHOLE),
        Node("l40s", "r", ("r", "z", "p", "l"), 64_000, 512_000, "L40S", 8, GpuMode.WHOLE),
    )
    floors = {MODEL: 2_000_000, "L40S": 400_000}
    gates = Gates(spot_floor=lambda model, region: floors[model])

    def spot(rid: str) -> Request:
        return Request(rid, WholeGpus(4), tier=Tier.SPOT, bid_micros_per_hour=1_000_000)

    snap = Snapshot(Fleet({"r": REGION}, nodes), CATALOG)
    decision = admit(snap, [spot("a")], [], POLICY, 10, CONFIG, gates=gates)
    assert [(p.request_id, p.nodes[0].node) for p in decision.placements] == [("a", "l40s")]
    snap = Snapshot(Fleet({"r": REGION}, nodes), CATALOG)
    busy = run(snap, Request("busy", WholeGpus(8), selector=GpuSelector(models=frozenset({"L40S"}))))
    decision = admit(snap, [spot("b")], [busy], POLICY, 10, CONFIG, gates=gates)
    assert decision.placements == ()
    (waiting,) = decision.pending
    assert waiting.reason is Reason.BID_BELOW_FLOOR and "of the pools with room now" in waiting.message
    high = Request("high", WholeGpus(4), tier=Tier.SPOT, bid_micros_per_hour=2_500_000)
    decision = admit(snap, [high], [busy], POLICY, 10, CONFIG, gates=gates)
    assert [p.nodes[0].node for p in decision.placements] == ["h100"]
    running = run(snap, spot("below"))  # placed below the floor by hand: notice, whatever pool it is in
    assert [
        e.request_id
        for e in admit(snap, [], [busy, running], POLICY, 10, CONFIG, gates=gates).floor_evictions
    ] == ["below"]


def test_a_notice_of_no_time_is_refused():
    with pytest.raises(RequestError, match="spot notice must be above 0"):
        PreemptionConfig(notice_s={Tier.SPOT: 0})
    with pytest.raises(RequestError, match="default notice must be above 0"):
        PreemptionConfig(default_notice_s=-30)


def test_a_holders_spot_request_is_not_promoted_so_it_neither_skips_the_floor_nor_preempts():
    """No contract applies to spot: a holder's spot request stays spot. It was promoted to `reserved`, so a
    bid of 1 micro/h under a 2,000,000 floor skipped the floor and gave another tenant's on-demand notice."""
    snap = Snapshot(fleet_of(1), CATALOG)
    other = run(snap, ask("od", 8, tenant="beta"))
    gates = Gates(contracts=[contract("c", 8, 0, 100)], spot_floor=lambda model, region: 2_000_000)
    decision = admit(
        snap, [ask("sp", 8, tier=Tier.SPOT, bid=1, at=1)], [other], POLICY, 10, CONFIG, gates=gates
    )
    assert decision.promoted == () and decision.preemptions == ()
    assert [(p.request_id, p.reason) for p in decision.pending] == [("sp", Reason.BID_BELOW_FLOOR)]


def test_a_holders_running_spot_does_not_claim_its_contract_so_on_demand_cannot_take_it():
    """The holder's own spot rental borrows its held capacity; it counted as the contract's claim, so the hold
    fell to 0 and another tenant's on-demand preempted that spot rental to take the contracted GPUs."""
    snap = Snapshot(fleet_of(1), CATALOG)
    spot = run(snap, ask("sp", 8, tier=Tier.SPOT, bid=10**6))
    gates = Gates(contracts=[contract("c", 8, 0, 100)])
    decision = admit(snap, [ask("od", 8, tenant="beta", at=1)], [spot], POLICY, 10, CONFIG, gates=gates)
    assert decision.preemptions == ()
    assert [(p.request_id, p.reason) for p in decision.pending] == [("od", Reason.CONTRACT_HOLD)]


def test_a_holders_request_naming_the_family_draws_on_its_contract_instead_of_waiting_on_it():
    """The contract covers all 8 GPUs of the pool; the holder asks for `H100`, a family whose only model in
    this fleet is the contract's. It waited with `contract_hold` on its own contract (the claim asked for
    the model's exact name), though pricing covered it there and, running, it would count as the claim."""
    snap = Snapshot(fleet_of(1), CATALOG)
    gates = Gates(contracts=[contract("c", 8, 0, 100)])
    family = Request("fam", WholeGpus(8), selector=GpuSelector(models=frozenset({"H100"})), tenant="acme")
    decision = admit(snap, [family], [], POLICY, 10, CONFIG, gates=gates)
    assert [p.request_id for p in decision.placements] == ["fam"]
    assert decision.promoted == ("fam",) and decision.pending == ()


def test_a_holders_request_that_may_land_in_another_region_runs_on_its_contract_and_leaves_the_rest():
    """A contract for 8 GPUs in region r; the holder asks for the model in any region. It was promoted and
    booked against the contract, was placed in region q (first in node order), and the contract's 8 GPUs in
    r went to another tenant's on-demand rental in the same cycle: the holder paid on-demand in q while its
    prepaid capacity ran someone else's work. Then it was promoted only when it could land nowhere but r,
    and was placed in q at the on-demand price while r's 8 idled, held back from the other tenant, who
    waited. Now it is narrowed to its contract's pool and promoted there, and the other tenant takes q."""
    other = Region("q", "US", 400.0, 1.2)
    nodes = [Node("b0", "q", ("q", "z", "p", "l"), 64_000, 512_000, MODEL, 8, GpuMode.WHOLE)]
    nodes.append(Node("a0", "r", ("r", "z", "p", "l"), 64_000, 512_000, MODEL, 8, GpuMode.WHOLE))
    snap = Snapshot(Fleet({"r": REGION, "q": other}, tuple(nodes)), CATALOG)
    gates = Gates(contracts=[contract("c", 8, 0, 100)])
    queue = [ask("mine", 8, at=1), ask("theirs", 8, tenant="beta", at=2)]
    decision = admit(snap, queue, [], POLICY, 10, CONFIG, gates=gates)
    assert decision.promoted == ("mine",) and decision.pending == ()
    assert sorted((p.request_id, p.nodes[0].node) for p in decision.placements) == [
        ("mine", "a0"),
        ("theirs", "b0"),
    ]
    pinned = Request(
        "pinned",
        WholeGpus(8),
        selector=SELECT,
        tenant="acme",
        constraints=Constraints(regions=frozenset({"r"})),
    )
    snap = Snapshot(Fleet({"r": REGION, "q": other}, tuple(nodes)), CATALOG)
    again = admit(snap, [pinned], [], POLICY, 10, CONFIG, gates=gates)
    assert again.promoted == ("pinned",) and [p.nodes[0].node for p in again.placements] == ["a0"]


def test_mig_slices_claim_a_contract_at_their_share_of_a_gpu():
    """A 1-GPU contract on a MIG H100: each 1g.10gb instance is 1/7 of the GPU. A slice claimed a whole GPU
    of the contract, so the holder's second slice was not promoted and the hold fell to 0 after its first:
    another tenant's slice took the GPU the holder had prepaid. Now two slices claim 2/7 and the rest stays
    held for the holder."""
    node = Node("m0", "r", ("r", "z", "p", "l"), 64_000, 512_000, MODEL, 1, GpuMode.MIG, ((),))
    snap = Snapshot(Fleet({"r": REGION}, (node,)), CATALOG)
    gates = Gates(contracts=[contract("c", 1, 0, 100)])

    def slice_of(rid: str, tenant: str, at: float) -> Request:
        return Request(rid, MigSlice("1g.10gb"), selector=SELECT, tenant=tenant, submitted_at_s=at)

    queue = [slice_of("a1", "acme", 1), slice_of("b1", "beta", 2), slice_of("a2", "acme", 3)]
    decision = admit(snap, queue, [], POLICY, 10, CONFIG, gates=gates)
    assert decision.promoted == ("a1", "a2")
    assert sorted(p.request_id for p in decision.placements) == ["a1", "a2"]
    assert [(p.request_id, p.reason) for p in decision.pending] == [("b1", Reason.CONTRACT_HOLD)]


def test_short_contracts_names_those_a_maintenance_window_would_overbook() -> None:
    """Two 8-GPU nodes (16 GPUs); contracts a (10 GPUs, 0-100) and b (6 GPUs, 50-150). Taking n1 down over
    60-70 leaves 8 GPUs for 16 contracted: both short; over 120-130 only b is open, 6 of 8: none short.
    An open-ended outage (no return date) from 140 leaves b short."""
    capacity = fleet_capacity(fleet_of(2))
    signed = [contract("a", 10, 0, 100), contract("b", 6, 50, 150)]

    def down(start: float, end: float) -> list[Maintenance]:
        return [Maintenance("n1", MODEL, "r", 8, start, end)]

    assert [c.id for c in short_contracts(signed, capacity, down(60, 70), 60, 70)] == ["a", "b"]
    assert short_contracts(signed, capacity, down(120, 130), 120, 130) == []
    assert [c.id for c in short_contracts(signed, capacity, down(0, 40), 0, 40)] == ["a"]
    assert short_contracts(signed, capacity, down(140, math.inf), 140, math.inf) == []
    nine = [contract("c", 9, 0, 200)]
    assert [c.id for c in short_contracts(nine, capacity, down(140, math.inf), 140, math.inf)] == ["c"]


def test_contract_shortfalls_say_how_short_each_contract_is_left_at_its_pools_worst_instant() -> None:
    """16 GPUs; a (10, 0-100), b (6, 50-150) and beta's c (4, 120-200). n1 down from 60 with no end (a drain)
    leaves 8: at 60 a and b hold 16 (8 short), at 120 b and c hold 10 (2 short). b is named at its worst
    instant, 60, not at 120; c, open only from 120, at 120."""
    capacity = fleet_capacity(fleet_of(2))
    signed = [contract("a", 10, 0, 100), contract("b", 6, 50, 150), contract("c", 4, 120, 200, "beta")]
    drained = [Maintenance("n1", MODEL, "r", 8, 60, math.inf)]
    found = contract_shortfalls(signed, capacity, drained, 60, math.inf)
    shown = [(s.contract.id, s.at_s, s.contracted_gpus, s.in_service_gpus, s.short_gpus) for s in found]
    assert shown == [("a", 60, 16, 8, 8), ("b", 60, 16, 8, 8), ("c", 120, 10, 8, 2)]
    assert [s.contract for s in found] == short_contracts(signed, capacity, drained, 60, math.inf)
    assert contract_shortfalls(signed, capacity, [], 0, math.inf) == []


def test_a_request_that_declares_its_duration_is_not_placed_where_maintenance_starts_before_it_ends() -> None:
    """One node, maintenance from 1800 s: a 1 h request waits (the only node would go down under it), a 10
    min one and one that declares no duration (it gets notice at the window's start) are placed."""
    gates = Gates(maintenance=(("n0", 1800.0, 7200.0),))
    long = replace(ask("long", 1), max_duration_s=3600.0)
    short = replace(ask("short", 1), max_duration_s=600.0)
    decision = admit(Snapshot(fleet_of(1), CATALOG), [long], [], POLICY, 0.0, CONFIG, gates=gates)
    assert decision.placements == () and [p.reason for p in decision.pending] == [Reason.NO_CAPACITY]
    for request in (short, ask("open", 1)):
        decision = admit(Snapshot(fleet_of(1), CATALOG), [request], [], POLICY, 0.0, CONFIG, gates=gates)
        assert [p.request_id for p in decision.placements] == [request.id]
    later = admit(Snapshot(fleet_of(1), CATALOG), [long], [], POLICY, 1800.0, CONFIG, gates=gates)
    assert [p.request_id for p in later.placements] == ["long"]  # the window has started: cordons rule then


def test_a_drain_that_deepens_a_pool_short_already_is_its_doing_where_it_takes_more():
    """Two nodes of 4; 6 contracted over [1 h, 5 h); a window on one node over [2 h, 3 h) leaves it 2 short
    then. A drain of the other from now on leaves it 2 short outside the window and 6 inside: the drain made
    it shorter, listed at its worst instant; a drain that changes nothing of it is not."""
    pool = ("H100-SXM-80GB", "cn-north")
    contract = Contract("c1", "acme", *pool, 6, 1 * HOUR, 5 * HOUR)
    window = Maintenance("n1", *pool, 4, 2 * HOUR, 3 * HOUR)
    drain = Maintenance("n2", *pool, 4, 0.0, math.inf)
    capacity = {pool: 8}
    [shortfall] = deepened_shortfalls([contract], capacity, [window], [window, drain], 0.0, math.inf)
    assert (shortfall.at_s, shortfall.contracted_gpus, shortfall.in_service_gpus) == (2 * HOUR, 6, 0)
    assert deepened_shortfalls([contract], capacity, [window], [window], 0.0, math.inf) == []
    assert [s.short_gpus for s in contract_shortfalls([contract], capacity, [window], 0.0, math.inf)] == [2]


def test_capacity_a_contract_opens_on_soon_is_kept_from_others_that_would_still_run_then():
    """A contract of acme for 4 of the 8 GPUs opens at 100 (now 60). Beta's on-demand request for 8 GPUs
    declared to run an hour would still run then, and acme's claim would preempt it with notice at once:
    it waits (`contract_hold`). One for 4 GPUs fits beside the contract; one for 8 declared 30 s ends before
    it opens; one without a duration is judged over its notice (30 s), so it is placed (a contract opening
    later cannot be weighed against a rental with no end); acme's own request takes what is held for it."""
    gates = Gates(contracts=[contract("c", 4, 100, 1000)])

    def admitted(request: Request) -> bool:
        decision = admit(Snapshot(fleet_of(1), CATALOG), [request], [], POLICY, 60, CONFIG, gates=gates)
        return bool(decision.placements)

    hour = replace(ask("long", 8, tenant="beta"), max_duration_s=3600)
    waiting = admit(Snapshot(fleet_of(1), CATALOG), [hour], [], POLICY, 60, CONFIG, gates=gates).pending
    assert [(p.request_id, p.reason) for p in waiting] == [("long", Reason.CONTRACT_HOLD)]
    assert "opening while it would run" in waiting[0].message
    assert admitted(replace(ask("half", 4, tenant="beta"), max_duration_s=3600))
    assert admitted(replace(ask("brief", 8, tenant="beta"), max_duration_s=30))
    assert admitted(ask("open-ended", 8, tenant="beta"))
    assert admitted(replace(ask("own", 8, tenant="acme"), max_duration_s=3600))
