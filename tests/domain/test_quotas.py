"""Quotas and spend caps: they hold at admission, and the pending reason names the limit."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.domain.catalog_data import CATALOG
from suanli.domain.inventory import Fleet, GpuMode, Node, Region
from suanli.domain.plan import Placement, Reason
from suanli.domain.policies import BestFitPolicy
from suanli.domain.queue_order import GREEDY_QUEUE, PLATFORM_QUEUE
from suanli.domain.queueing import Gates, admit
from suanli.domain.quotas import BillingWindow, Limits, Spent, TenantLimits, period_ends, request_gpus
from suanli.domain.request import GpuSelector, Request, Tier, WholeGpus
from suanli.domain.running import Running
from suanli.domain.scheduler import place
from suanli.domain.snapshot import Snapshot

REGION = Region("r", "US", 400.0, 1.2)
POLICY = BestFitPolicy()
NOW = datetime(2025, 3, 10, 12, tzinfo=UTC).timestamp()  # a fake clock: noon, 12 h left in the day
H100 = GpuSelector(models=frozenset({"H100"}))


def snapshot_of(nodes: int, gpus: int = 8) -> Snapshot:
    fleet = Fleet(
        {"r": REGION},
        tuple(
            Node(f"n{i}", "r", ("r", "z", "p", "l"), 64_000, 512_000, "H100-SXM-80GB", gpus, GpuMode.WHOLE)
            for i in range(nodes)
        ),
    )
    return Snapshot(fleet, CATALOG)


def ask(rid: str, gpus: int, tenant: str = "acme", at: float = 0.0, hours: float | None = None) -> Request:
    duration = None if hours is None else hours * 3600
    return Request(
        rid, WholeGpus(gpus), selector=H100, tenant=tenant, submitted_at_s=at, max_duration_s=duration
    )


def running(snapshot: Snapshot, request: Request, at: float = NOW) -> Running:
    placement = place(snapshot, request, POLICY)
    assert isinstance(placement, Placement)
    return Running(request, placement, at)


def price(request: Request) -> int:
    return int(request.gpus_per_node * request.node_count * 2_000_000)  # 2 dollars per GPU-hour


def test_gpu_quota_holds_and_names_the_limit():
    snap = snapshot_of(4)
    held = [running(snap, ask("a", 8)), running(snap, ask("b", 4))]
    limits = Limits({"acme": TenantLimits(gpu_quota={"H100": 16})})
    decision = admit(snap, [ask("c", 8, at=1)], held, POLICY, NOW, gates=Gates(limits=limits))
    assert decision.placements == ()
    (pending,) = decision.pending
    assert pending.reason is Reason.QUOTA
    assert pending.message == "tenant acme: H100 quota 16 GPUs, 12 in use, asks 8"


def test_a_request_counts_against_each_of_its_groups():
    """A model quota and a family quota both hold: `H100-SXM-80GB` is in the `H100` family (groups_of)."""
    snap = snapshot_of(4)
    held = [running(snap, ask("a", 8))]
    groups = lambda request: ("H100-SXM-80GB", "H100")  # noqa: E731
    for quota, limit in (({"H100-SXM-80GB": 12}, "H100-SXM-80GB quota 12"), ({"H100": 12}, "H100 quota 12")):
        limits = Limits({"acme": TenantLimits(gpu_quota=quota)}, groups_of=groups)
        decision = admit(snap, [ask("c", 8, at=1)], held, POLICY, NOW, gates=Gates(limits=limits))
        assert decision.placements == () and limit in decision.pending[0].message
    both = Limits({"acme": TenantLimits(gpu_quota={"H100-SXM-80GB": 16, "H100": 16})}, groups_of=groups)
    ledger = both.ledger([(ask("a", 8), NOW)], NOW)
    assert ledger.check(ask("c", 8)) is None
    ledger.take(ask("c", 8))
    assert ledger.in_use[("acme", "H100")] == ledger.in_use[("acme", "H100-SXM-80GB")] == 16


def test_a_quota_held_request_blocks_nobody_and_other_tenants_are_free():
    snap = snapshot_of(4)
    limits = Limits({"acme": TenantLimits(gpu_quota={"*": 8})})
    queue = [ask("a1", 8, at=0), ask("a2", 8, at=1), ask("other", 8, tenant="beta", at=2)]
    decision = admit(snap, queue, [], POLICY, NOW, gates=Gates(limits=limits))
    assert sorted(p.request_id for p in decision.placements) == ["a1", "other"]
    assert [p.reason for p in decision.pending] == [Reason.QUOTA]
    assert "GPU quota 8 GPUs, 8 in use, asks 8" in decision.pending[0].message


def test_daily_spend_cap_counts_spent_plus_committed_burn():
    snap = snapshot_of(4)
    # 8 GPUs x 2 $/h = 16 $/h; the day has 12 h left; spent 100 $ already today
    limits = Limits(
        {"acme": TenantLimits(daily_cap_micros=300_000_000)},
        {"acme": Spent(day_micros=100_000_000)},
        price_micros_per_hour=price,
    )
    short = ask("short", 8, hours=4)  # adds 64 $: 164 $ <= 300 $
    long = ask("long", 8, at=1)  # no declared end: burns to midnight, 192 $ more: 356 $ > 300 $
    decision = admit(snap, [short, long], [], POLICY, NOW, gates=Gates(limits=limits))
    assert [p.request_id for p in decision.placements] == ["short"]
    (pending,) = decision.pending
    assert pending.reason is Reason.SPEND_CAP
    assert pending.message.startswith("tenant acme: daily spend cap 300.0000, 164.0000 spent")


def test_a_running_rental_commits_from_where_it_is_charged_to_where_its_billing_ends():
    """A running rental's burn is its rate from how far it is charged (`BillingWindow`) to when its billing
    ends: not from now to midnight for one being stopped (billed to its stop at most) or under notice (to
    its deadline), and not its 60-s minimum again, which is charged (spent) ahead. Each was counted to
    midnight from now: a stop its agent hung on held its tenant's next rentals back all day."""
    one = ask("one", 1)  # 2 $/h, no declared end: to midnight, 12 h
    cap = {"acme": TenantLimits(daily_cap_micros=33_000_000)}
    plain = Limits(cap, price_micros_per_hour=price).ledger([(one, NOW - 5), (ask("min", 1), NOW - 3)], NOW)
    assert plain.burn_day["acme"] == pytest.approx(48_000_000)
    assert plain.check(ask("next", 4, hours=1)) is not None
    windows = {
        "one": BillingWindow(NOW - 10, ends_s=NOW + 120),  # stopping: 10 s lag behind, 120 s at most
        "min": BillingWindow(NOW + 57, ends_s=None),  # started 3 s ago: its minimum charged to 57 s ahead
    }
    limits = Limits(cap, price_micros_per_hour=price, billing=windows)
    ledger = limits.ledger([(one, NOW - 5), (ask("min", 1), NOW - 3)], NOW)
    assert ledger.burn_day["acme"] == pytest.approx(2_000_000 * (130 + 12 * 3600 - 57) / 3600)
    assert ledger.check(ask("next", 4, hours=1)) is None  # 24.04 $ + 8 $ fits 33 $


def test_monthly_cap_applies_when_the_day_is_fine():
    snap = snapshot_of(1)
    limits = Limits(
        {"acme": TenantLimits(daily_cap_micros=10**12, monthly_cap_micros=1_000_000_000)},
        {"acme": Spent(day_micros=0, month_micros=990_000_000)},
        price_micros_per_hour=price,
    )
    decision = admit(snap, [ask("x", 1, hours=10)], [], POLICY, NOW, gates=Gates(limits=limits))
    assert decision.pending[0].reason is Reason.SPEND_CAP and "monthly" in decision.pending[0].message


def test_a_tenants_own_budget_holds_like_a_cap_and_says_it_is_its_own():
    """The operator's cap of 1,000 $ a month leaves room; the tenant's own budget of 995 $ does not."""
    snap = snapshot_of(1)
    limits = Limits(
        {"acme": TenantLimits(monthly_cap_micros=1_000_000_000, budget_monthly_micros=995_000_000)},
        {"acme": Spent(day_micros=0, month_micros=990_000_000)},
        price_micros_per_hour=price,
    )
    decision = admit(snap, [ask("x", 1, hours=3)], [], POLICY, NOW, gates=Gates(limits=limits))  # adds 6 $
    (pending,) = decision.pending
    assert pending.reason is Reason.SPEND_CAP
    assert pending.message.startswith("tenant acme: own monthly budget 995.0000, 990.0000 spent")
    daily = Limits(
        {"acme": TenantLimits(budget_daily_micros=3_000_000)}, {"acme": Spent()}, price_micros_per_hour=price
    )
    decision = admit(snapshot_of(1), [ask("y", 1, hours=2)], [], POLICY, NOW, gates=Gates(limits=daily))
    assert "own daily budget 3.0000," in decision.pending[0].message  # 2 h x 2 $ = 4 $ > 3 $
    roomy = Limits(
        {"acme": TenantLimits(budget_daily_micros=4_000_000)}, {"acme": Spent()}, price_micros_per_hour=price
    )
    decision = admit(snapshot_of(1), [ask("z", 1, hours=2)], [], POLICY, NOW, gates=Gates(limits=roomy))
    assert [p.request_id for p in decision.placements] == ["z"]  # exactly the budget: allowed


def test_period_ends_follow_the_calendar():
    day_end, month_end = period_ends(datetime(2024, 2, 10, 5, tzinfo=UTC).timestamp())
    assert day_end == datetime(2024, 2, 11, tzinfo=UTC).timestamp()
    assert month_end == datetime(2024, 3, 1, tzinfo=UTC).timestamp()  # leap year February


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 8), min_size=1, max_size=12), quota=st.integers(0, 32))
def test_quota_is_never_exceeded(sizes, quota):
    snap = snapshot_of(8)
    limits = Limits({"acme": TenantLimits(gpu_quota={"H100": quota})})
    queue = [ask(f"r{i}", g, at=i) for i, g in enumerate(sizes)]
    decision = admit(snap, queue, [], POLICY, NOW, gates=Gates(limits=limits))
    assert sum(p.gpus for p in decision.placements) <= quota
    assert all(
        p.reason in (Reason.QUOTA, Reason.NO_CAPACITY, Reason.BLOCKED_BY_HEAD) for p in decision.pending
    )


@pytest.mark.parametrize("tenant", ["acme", "nobody"])
def test_no_limits_means_no_gate(tenant):
    snap = snapshot_of(1)
    decision = admit(snap, [ask("x", 8, tenant=tenant)], [], POLICY, NOW, gates=Gates(limits=Limits()))
    assert [p.request_id for p in decision.placements] == ["x"]


def test_the_greedy_schedule_checks_and_books_the_limits_too():
    from suanli.domain.scheduler import schedule

    snap = snapshot_of(4)
    limits = Limits({"acme": TenantLimits(gpu_quota={"*": 16})})
    ledger = limits.ledger([(ask("held", 8), NOW)], NOW)  # 8 of its 16 GPUs already in use
    queue = [ask("a", 8, at=1), ask("b", 8, at=2), ask("other", 8, "zeta", at=3)]
    plan = schedule(snap, queue, POLICY, NOW, ledger)
    assert [p.request_id for p in plan.placements] == ["a", "other"]
    (waiting,) = plan.pending
    assert waiting.request_id == "b" and waiting.reason is Reason.QUOTA and "quota 16 GPUs" in waiting.message


def two_models(nodes_each: int = 1) -> Snapshot:
    """H100 and A100 nodes side by side: a request naming no model may land on either."""
    fleet = Fleet(
        {"r": REGION},
        tuple(
            Node(f"{model[:4]}-{i}", "r", ("r", "z", "p", "l"), 64_000, 512_000, model, 8, GpuMode.WHOLE)
            for model in ("H100-SXM-80GB", "A100-80GB")
            for i in range(nodes_each)
        ),
    )
    return Snapshot(fleet, CATALOG)


def anywhere(rid: str, gpus: int, at: float = 0.0) -> Request:
    return Request(rid, WholeGpus(gpus), tenant="acme", submitted_at_s=at)


@pytest.mark.parametrize("quota_key", ["H100", "H100-SXM-80GB"])
def test_a_request_naming_no_model_counts_where_it_lands_and_keeps_off_a_full_quota(quota_key):
    """Naming no model (or a family) is no way past a model's quota: the rental counts against the model it
    runs on, and a request that may land on several is kept off those whose quota is full."""
    snap = two_models(nodes_each=2)
    held = [running(snap, anywhere("held", 8))]
    assert snap.classes[snap.by_name[held[0].placement.nodes[0].node].class_id].model.name == "H100-SXM-80GB"
    limits = Limits({"acme": TenantLimits(gpu_quota={quota_key: 8})})
    queue = [anywhere("a", 8, at=1), anywhere("b", 8, at=2), anywhere("c", 8, at=3)]
    decision = admit(snap, queue, held, POLICY, NOW, gates=Gates(limits=limits))
    placed = {p.request_id: p.nodes[0].node for p in decision.placements}
    assert sorted(placed) == ["a", "b"] and all(node.startswith("A100") for node in placed.values())
    (waiting,) = decision.pending  # only H100 is left, and its quota is full
    assert waiting.request_id == "c" and waiting.reason is Reason.QUOTA
    assert f"{quota_key} quota 8 GPUs, 8 in use" in waiting.message


def test_a_family_request_counts_against_its_models_quota_once_placed():
    snap = two_models()
    limits = Limits({"acme": TenantLimits(gpu_quota={"H100-SXM-80GB": 4})})
    queue = [ask("a", 4, at=1), ask("b", 4, at=2)]  # each names the H100 family, not the model
    decision = admit(snap, queue, [], POLICY, NOW, gates=Gates(limits=limits))
    assert [p.request_id for p in decision.placements] == ["a"]
    assert [(p.request_id, p.reason) for p in decision.pending] == [("b", Reason.QUOTA)]


def test_the_greedy_schedule_keeps_a_request_off_a_full_models_nodes():
    from suanli.domain.scheduler import schedule

    snap = two_models()
    limits = Limits({"acme": TenantLimits(gpu_quota={"H100": 8})})
    ledger = limits.ledger([(ask("held", 8), NOW)], NOW)  # its 8 H100s are in use elsewhere
    plan = schedule(snap, [anywhere("a", 8, at=1), anywhere("b", 8, at=2)], POLICY, NOW, ledger)
    assert [(p.request_id, p.nodes[0].node[:4]) for p in plan.placements] == [("a", "A100")]
    assert [p.reason for p in plan.pending] == [Reason.QUOTA]


@pytest.mark.parametrize("config", [GREEDY_QUEUE, PLATFORM_QUEUE], ids=["greedy", "backfill"])
def test_an_elastic_request_past_a_limit_at_its_size_starts_at_a_size_within_it(config):
    """Held back at its full size by a GPU quota or a spend cap, an elastic request starts at the largest
    size the limit allows (if its least size is within it) rather than wait with GPUs free; it waited."""

    def elastic(rid: str, gpus: int) -> Request:
        return Request(rid, WholeGpus(gpus), selector=H100, tenant="acme", submitted_at_s=1, min_gpus=1)

    snap = snapshot_of(1)
    held = [running(snap, ask("one", 1))]
    quota = Limits({"acme": TenantLimits(gpu_quota={"*": 4})})
    decision = admit(snap, [elastic("e", 4)], held, POLICY, NOW, config, gates=Gates(limits=quota))
    assert [(p.request_id, p.gpus) for p in decision.placements] == [("e", 3)] and decision.pending == ()
    # a day's cap of 60 $ at 2 $ per GPU-hour with 12 h left: 2 GPUs (48 $), not 3 (72 $), nor 8 (192 $)
    cap = Limits(
        {"acme": TenantLimits(daily_cap_micros=60_000_000)}, {"acme": Spent()}, price_micros_per_hour=price
    )
    decision = admit(snapshot_of(1), [elastic("f", 8)], [], POLICY, NOW, config, gates=Gates(limits=cap))
    assert [(p.request_id, p.gpus) for p in decision.placements] == [("f", 2)] and decision.pending == ()
    tight = Limits({"acme": TenantLimits(gpu_quota={"*": 1})})
    decision = admit(snap, [elastic("g", 4)], held, POLICY, NOW, config, gates=Gates(limits=tight))
    assert decision.placements == () and decision.pending[0].reason is Reason.QUOTA  # not even its least


def test_a_rental_that_adds_nothing_goes_however_far_past_its_cap_the_tenant_is():
    """A tenant already past its daily cap: a rental priced at nothing (its contract covers it) cannot take
    the spend further, so it is admitted; one that adds a cent still waits, naming the cap."""
    snap = snapshot_of(1)
    limits = Limits(
        {"acme": TenantLimits(daily_cap_micros=100_000_000)},
        {"acme": Spent(day_micros=150_000_000)},
        price_micros_per_hour=lambda r: 0 if r.id == "covered" else 2_000_000 * request_gpus(r),
    )
    decision = admit(
        snap, [ask("covered", 2), ask("paid", 2, hours=1)], [], POLICY, NOW, gates=Gates(limits=limits)
    )
    assert [p.request_id for p in decision.placements] == ["covered"]
    assert decision.pending[0].reason is Reason.SPEND_CAP and decision.pending[0].request_id == "paid"


@pytest.mark.parametrize("durations", [(None, None), (2.0, None)], ids=["none_declared", "one_declared"])
def test_behind_a_blocked_head_a_request_a_limit_holds_is_told_its_limit_not_to_declare_a_duration(durations):
    """A head waits on a fleet whose running rentals declare no end; behind it a tenant at its quota and one
    at its spend cap ask. Whether none behind the head could backfill or the head's start cannot be
    bounded, each is told the limit that holds it (it was told "no declared duration: cannot backfill" or
    "the head's start cannot be bounded", and neither a duration nor a bound would have started it)."""
    snap = snapshot_of(3)  # 20 of 24 GPUs held, none with a declared end: the head's start is unbounded
    held = [running(snap, ask(f"held{i}", gpus, tenant="other")) for i, gpus in enumerate((8, 8, 4))]
    limits = Limits(
        {"capped": TenantLimits(daily_cap_micros=1_000_000), "quota": TenantLimits(gpu_quota={"*": 0})},
        price_micros_per_hour=price,
    )
    hours_quota, hours_capped = durations
    queue = [
        ask("head", 8, tenant="waiting", at=NOW - 86_400),  # waited a day: it heads the queue
        ask("q", 4, tenant="quota", at=NOW, hours=hours_quota),
        ask("c", 1, tenant="capped", at=NOW, hours=hours_capped),
    ]
    decision = admit(snap, queue, held, POLICY, NOW, gates=Gates(limits=limits), config=PLATFORM_QUEUE)
    reasons = {p.request_id: p.reason for p in decision.pending}
    assert reasons == {
        "head": Reason.NO_CAPACITY,
        "q": Reason.QUOTA,
        "c": Reason.SPEND_CAP,
    }


def test_a_covered_rental_commits_its_rate_after_its_coverage_ends_not_0_to_the_end_of_the_day():
    """8 GPUs a contract covers (0/h) with no declared end, the window ending in an hour: it commits the
    16 $/h it pays from then to midnight (176 $), past a 100 $ cap; it committed nothing and ran at the full
    rate. A window ending after midnight commits nothing today."""
    snap = snapshot_of(2)
    covered = ask("covered", 8)
    for ends_in_h, held in ((1.0, True), (13.0, False)):
        limits = Limits(
            {"acme": TenantLimits(daily_cap_micros=100_000_000)},
            price_micros_per_hour=lambda request: 0,
            rate_after=lambda request, ends=NOW + ends_in_h * 3600: (ends, 16_000_000),
        )
        decision = admit(snap, [covered], [], POLICY, NOW, gates=Gates(limits=limits))
        assert [p.reason for p in decision.pending] == ([Reason.SPEND_CAP] if held else [])
        if held:
            assert "this rental adds 176.0000" in decision.pending[0].message
        snap = snapshot_of(2)


def test_a_preemptor_that_starts_on_freed_gpus_still_counts_against_its_quota():
    """acme (quota 2 GPUs) holds 1 spot GPU under notice for its own on-demand `pre`; the walk then starts
    acme's `other` (2 of 2 in use). `pre`, which may start at the cycle's end on GPUs freed elsewhere while
    its victim still has notice, is checked again: it would make 3, so it waits for its victim to leave."""
    snap = snapshot_of(1, 4)
    victim = running(snap, replace(ask("spot", 1), tier=Tier.SPOT))
    noticed = replace(victim, preempted_by="pre", notice_deadline_s=NOW + 30)
    queue = [replace(ask("pre", 1, at=1), tier=Tier.ON_DEMAND), ask("other", 1, at=2)]
    limits = Limits({"acme": TenantLimits(gpu_quota={"*": 2})})
    decision = admit(snap, queue, [noticed], POLICY, NOW, promised={"pre"}, gates=Gates(limits=limits))
    assert [p.request_id for p in decision.placements] == ["other"]
    assert [(p.request_id, p.reason) for p in decision.pending] == [("pre", Reason.PREEMPTING)]
